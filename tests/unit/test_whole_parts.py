"""Topology tree: a delta in parts counts whole or not at all (protocol/wholeparts.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.wire.codec import DecodedDelta, DeltaHeader, decode_delta, encode_delta_parts
from hogwild.cluster.wire.wholeparts import WholeParts
from hogwild.errors import Busy

DIM = 2000


def _parts(run_id: str, worker_id: int, seq: int, value: float = 1.0) -> list[DecodedDelta]:
    """A delta on the first 1,000 coordinates, cut into 2 parts (4 KiB each at most)."""
    idx = np.arange(1000, dtype=np.int32)
    val = np.full(1000, value, dtype=np.float32)
    messages = encode_delta_parts(DeltaHeader(run_id, worker_id, round=1, seq=seq, dim=DIM),
                                  idx, val, chunk_bytes=4096, dense=False)
    assert len(messages) == 2
    return [decode_delta(m, DIM) for m in messages]


def test_parts_are_held_until_the_last_and_come_out_in_order() -> None:
    whole = WholeParts()
    first, second = _parts("r", 0, 1)
    assert whole.add(second) is None and whole.holds(second) and not whole.holds(first)
    out = whole.add(first)
    assert out is not None and [p.header.part for p in out] == [0, 1]
    assert whole.held_parts() == 0


def test_a_sender_with_too_many_open_messages_is_busy_and_forget_drops_its_parts() -> None:
    whole = WholeParts(open_per_sender=2)
    for seq in (1, 2):
        part = _parts("r", 3, seq)[0]
        whole.room(part)
        assert whole.add(part) is None
    third = _parts("r", 3, 3)[0]
    with pytest.raises(Busy, match="worker 3 has 2 messages"):
        whole.room(third)
    whole.room(_parts("r", 4, 1)[0])  # another sender is not held back
    assert whole.senders() == {3}
    whole.forget(3)
    assert whole.held_parts() == 0 and whole.discarded == 2
    whole.room(third)


def _tree_state() -> RunState:
    state = RunState(2)
    for w in range(2):
        state.roster.register(f"127.0.0.1:{9 + w}", 1)
    state.model.start_model(DIM)
    state.roster.tree_fanout = 2  # workers 0 and 1 are the coordinator's children
    return state


def test_the_coordinator_sums_a_tree_message_only_once_all_its_parts_are_in() -> None:
    state = _tree_state()
    first, second = _parts(state.run_id, 0, 1)
    assert state.model.apply_delta(first) is True
    assert not state.model.model_copy().any() and state.model.deltas_received == 0
    assert state.model.apply_delta(first) is False  # a retry of a held part is a duplicate
    assert state.model.apply_delta(second) is True
    model = state.model.model_copy()
    assert np.all(model[:1000] == 1.0) and not model[1000:].any()
    assert state.model.deltas_received == 2 and state.model.duplicates == 1


def test_a_tree_message_cut_off_by_its_senders_death_is_never_summed() -> None:
    # Its orphans re-send their own messages; the parts that got through would be summed
    # twice (once in them, once in the re-sends) if they had been applied on arrival.
    state = _tree_state()
    first, _ = _parts(state.run_id, 0, 1)
    state.model.apply_delta(first)
    state.roster.mark_dead(0, "killed")
    assert not state.model.model_copy().any()
    whole = state.model.sequences.whole_parts
    assert whole.held_parts() == 0 and whole.discarded == 1


def test_outside_a_tree_each_part_is_summed_as_it_arrives() -> None:
    state = RunState(2)
    for w in range(2):
        state.roster.register(f"127.0.0.1:{9 + w}", 1)
    state.model.start_model(DIM)
    first, _ = _parts(state.run_id, 0, 1)
    state.model.apply_delta(first)
    assert state.model.model_copy()[:1000].sum() > 0  # mesh and star: its own work, kept
