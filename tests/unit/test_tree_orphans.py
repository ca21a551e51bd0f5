"""Topology tree, sync: the orphans of a dead child of the root lose nothing. Their re-sent
messages reach the global model once (one the dead child had passed on is taken as known),
and each is sent everything that crossed the dead child's edge to level its model with; a
worker's messages to its parent are kept until the parent vouches for them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.tree_root import TreeRoot
from hogwild.cluster.transport.sender import OutgoingDelta
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.engine.tree import RETAINED_MAX, TreeLinks

from .tree_roots import DIM, root_of_four


def _send(state: RunState, wid: int, seq: int, round_: int, entries: dict[int, float]) -> None:
    header = DeltaHeader(state.run_id, wid, round_, seq, DIM)
    idx = np.array(sorted(entries), np.int32)
    (message,) = encode_delta_parts(header, idx, np.array([entries[i] for i in sorted(entries)],
                                                          np.float32), dense=False)
    assert state.model.apply_delta(decode_delta(message, DIM))


def _dense(delta: OutgoingDelta) -> np.ndarray:
    out = np.zeros(DIM)
    out[delta.indices] = delta.values
    return out


def _resync(sent: list[OutgoingDelta]) -> OutgoingDelta:
    (resync,) = [d for d in sent if d.resync_cut is not None]
    return resync


def _root(monkeypatch: Any) -> tuple[RunState, TreeRoot, dict[int, list[OutgoingDelta]]]:
    return root_of_four(monkeypatch, "sync")


def _until(check: Any) -> None:
    deadline = time.monotonic() + 10
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert check()


def _two_rounds_through_worker_0(state: RunState, sent: dict[int, list[OutgoingDelta]]) -> None:
    # Round 1; then 0's round 2: its own {2: 4}, 2's {5: 1} and 3's {6: 1}, summed.
    _send(state, 0, 1, 1, {0: 1.0})
    _send(state, 1, 1, 1, {1: 2.0})
    _until(lambda: sent[0] and sent[1])
    _send(state, 0, 2, 2, {2: 4.0, 5: 1.0, 6: 1.0})


def test_orphans_that_missed_the_last_aggregate_are_levelled_and_resend_nothing_twice(
        monkeypatch: Any) -> None:
    """Worker 0 passed round 2 up, the root sent round 2, and 0 died before passing it down:
    2 and 3 re-send their round 2 (known: not summed again) and are each sent what crossed
    0's edge, labelled round 2, with their own messages of rounds up to 2 in it. The first
    re-sent message alone tells the root that 0 died (its sender routes around 0)."""
    state, root, sent = _root(monkeypatch)
    try:
        _two_rounds_through_worker_0(state, sent)
        _send(state, 1, 2, 2, {1: 8.0})
        _until(lambda: len(sent[1]) == 2)
        model = state.model.model_copy()
        _send(state, 2, 1, 2, {5: 1.0})   # re-sent: the root had it through 0
        assert state.roster.workers[0].dead
        _send(state, 3, 1, 2, {6: 1.0})
        np.testing.assert_array_equal(state.model.model_copy(), model)
        assert root.replays_known == 2
        # What metrics.json reports of it.
        assert root.recovery() == {"orphans_adopted": 2, "resent_known": 2,
                                   "orphans_caught_up": 2}
        # Up 0's edge: {0: 1}, then {2: 4, 5: 1, 6: 1}; down it: the aggregates {1: 2}, {1: 8}.
        world = np.zeros(DIM)
        world[[0, 1, 2, 5, 6]] = [1.0, 10.0, 4.0, 1.0, 1.0]
        for orphan in (2, 3):
            resync = _resync(sent[orphan])
            assert (resync.round, resync.resync_cut) == (2, 2) and resync.apart
            np.testing.assert_array_equal(_dense(resync), world)
        # Round 3 from everyone: new, summed once, relayed as usual.
        _send(state, 1, 3, 3, {1: 16.0})
        _send(state, 2, 2, 3, {5: 32.0})
        _send(state, 3, 2, 3, {6: 64.0})
        _until(lambda: all(d and d[-1].round == 3 for w, d in sent.items() if w != 0))
        np.testing.assert_array_equal(_dense(sent[2][-1])[[1, 5, 6]], [16, 0, 64])
        np.testing.assert_array_equal(_dense(sent[3][-1])[[1, 5, 6]], [16, 32, 0])
        np.testing.assert_array_equal(_dense(sent[1][-1])[[1, 5, 6]], [0, 32, 64])
        assert state.model.model_copy()[5] == 33.0 and state.model.model_copy()[6] == 65.0
    finally:
        root.close()


def test_orphans_of_a_sum_still_pending_hold_it_from_their_resync(monkeypatch: Any) -> None:
    """Worker 0 passed round 2 up and died before the root's round 2: the orphans' round 2
    is known; their resync holds 0's round-2 sum, so round 2's aggregate leaves it out for
    them and brings it to worker 1."""
    state, root, sent = _root(monkeypatch)
    try:
        _two_rounds_through_worker_0(state, sent)
        state.roster.mark_dead(0, "killed")
        model = state.model.model_copy()
        _send(state, 2, 1, 2, {5: 1.0})
        _send(state, 3, 1, 2, {6: 1.0})
        np.testing.assert_array_equal(state.model.model_copy(), model)
        _send(state, 1, 2, 2, {1: 8.0})
        _until(lambda: all(sent[w] and sent[w][-1].round == 2 for w in (1, 2, 3)))
        for orphan in (2, 3):
            resync = _resync(sent[orphan])
            assert (resync.round, resync.resync_cut) == (1, 2)
            np.testing.assert_array_equal(_dense(resync)[[0, 1, 2, 5, 6]], [1, 2, 4, 1, 1])
            np.testing.assert_array_equal(_dense(sent[orphan][-1])[[1, 2, 5, 6]], [8, 0, 0, 0])
        np.testing.assert_array_equal(_dense(sent[1][-1])[[1, 2, 5, 6]], [0, 4, 1, 1])
    finally:
        root.close()


def test_an_orphan_of_an_orphan_that_died_too_is_levelled_from_its_world(
        monkeypatch: Any) -> None:
    """7 workers: 0 dies, 2 (0's child, 6's parent) is adopted, then found dead too: 6 comes
    through 2, whose edge held nothing of its own but the resync of 0's world. 6's round 2,
    in the model through 0, is known, and its resync says so."""
    state, root, sent = root_of_four(monkeypatch, "sync", n=7)
    try:
        _two_rounds_through_worker_0(state, sent)
        state.roster.mark_dead(0, "killed")
        _send(state, 3, 1, 2, {6: 1.0})   # adopts 2 and 3 (2 is dead, not yet known)
        state.roster.mark_dead(2, "killed")
        model = state.model.model_copy()
        _send(state, 6, 1, 2, {5: 1.0})   # re-sent: the root had it through 2 and 0
        np.testing.assert_array_equal(state.model.model_copy(), model)
        resync = _resync(sent[6])
        assert resync.resync_cut == 2
        np.testing.assert_array_equal(_dense(resync), _dense(_resync(sent[2])))
    finally:
        root.close()


def test_messages_to_the_parent_are_kept_until_it_vouches_for_them() -> None:
    class Peer:
        def __init__(self, round_: int) -> None:
            self.round, self.dropped, self.settled = round_, False, False

    links = TreeLinks([0, 7])   # 0: the parent, 7: a child
    links.parent = 0
    for r in (1, 2, 3):
        links.own(np.array([r], np.int32), np.array([float(r)]))
        links.due(r, False, {0: Peer(r - 1), 7: Peer(r)}, sync=True)
    # The parent vouched for round 2 (its round-2 message arrived): round 3 is still kept.
    assert [label for label, _, _ in links.retained] == [3]
    links.passed(3)
    assert links.retained == []
    # Bounded: the oldest go, counted.
    for r in range(4, 5 + RETAINED_MAX + 2):
        links.due(r, False, {0: Peer(3), 7: Peer(r)}, sync=True)
    assert len(links.retained) == RETAINED_MAX and links.retained_dropped == 3
