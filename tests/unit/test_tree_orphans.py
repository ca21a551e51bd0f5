"""Topology tree, sync: the orphans of a dead child of the root lose nothing. Their re-sent
messages reach the global model once (one the dead child had passed on is taken as known),
and each gets what it missed through the dead child; a worker's messages to its parent are
kept until the parent vouches for them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hogwild.coordinator.state import RunState
from hogwild.coordinator.tree_root import TreeRoot
from hogwild.engine.tree import RETAINED_MAX, TreeLinks
from hogwild.protocol.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.worker.sender import OutgoingDelta

from .tree_roots import DIM, root_of_four


def _send(state: RunState, wid: int, seq: int, round_: int, entries: dict[int, float]) -> None:
    header = DeltaHeader(state.run_id, wid, round_, seq, DIM)
    idx = np.array(sorted(entries), np.int32)
    (message,) = encode_delta_parts(header, idx, np.array([entries[i] for i in sorted(entries)],
                                                          np.float32), dense=False)
    assert state.apply_delta(decode_delta(message, DIM))


def _dense(delta: OutgoingDelta) -> np.ndarray:
    out = np.zeros(DIM)
    out[delta.indices] = delta.values
    return out


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


def test_orphans_that_missed_the_last_aggregate_get_it_and_resend_nothing_twice(
        monkeypatch: Any) -> None:
    """Worker 0 passed round 2 up, the root sent round 2, and 0 died before passing it down:
    2 and 3 re-send their round 2 (known: not summed again) and get round 2 less their own
    part. The first re-sent message alone tells the root that 0 died (its sender routes
    around 0)."""
    state, root, sent = _root(monkeypatch)
    try:
        _two_rounds_through_worker_0(state, sent)
        _send(state, 1, 2, 2, {1: 8.0})
        _until(lambda: len(sent[1]) == 2)
        model = state.model_copy()
        _send(state, 2, 1, 2, {5: 1.0})   # re-sent: the root had it through 0
        assert state.workers[0].dead
        _send(state, 3, 1, 2, {6: 1.0})
        np.testing.assert_array_equal(state.model_copy(), model)
        assert root.replays_known == 2 and root.catch_up_missed == 0
        # What metrics.json reports of it.
        assert root.recovery() == {"orphans_adopted": 2, "resent_known": 2,
                                   "orphans_caught_up": 2, "catch_up_missed": 0}
        round_2 = np.zeros(DIM)
        round_2[[1, 2, 5, 6]] = [8.0, 4.0, 1.0, 1.0]
        for orphan, own in ((2, 5), (3, 6)):
            catch_up = [d for d in sent[orphan] if d.round == 2]
            assert len(catch_up) == 1
            expected = round_2.copy()
            expected[own] = 0.0
            np.testing.assert_array_equal(_dense(catch_up[0]), expected)
        # Round 3 from everyone: new, summed once, relayed as usual.
        _send(state, 1, 3, 3, {1: 16.0})
        _send(state, 2, 2, 3, {5: 32.0})
        _send(state, 3, 2, 3, {6: 64.0})
        _until(lambda: all(d and d[-1].round == 3 for w, d in sent.items() if w != 0))
        np.testing.assert_array_equal(_dense(sent[2][-1])[[1, 5, 6]], [16, 0, 64])
        np.testing.assert_array_equal(_dense(sent[3][-1])[[1, 5, 6]], [16, 32, 0])
        np.testing.assert_array_equal(_dense(sent[1][-1])[[1, 5, 6]], [0, 32, 64])
        assert state.model_copy()[5] == 33.0 and state.model_copy()[6] == 65.0
    finally:
        root.close()


def test_orphans_of_a_sum_still_pending_get_the_rest_of_it(monkeypatch: Any) -> None:
    """Worker 0 passed round 2 up and died before the root's round 2: the orphans' round 2
    is known, and round 2's aggregate brings each of them 0's sum less its own part (once it
    was left out whole: the rest of it was lost to them)."""
    state, root, sent = _root(monkeypatch)
    try:
        _two_rounds_through_worker_0(state, sent)
        state.mark_dead(0, "killed")
        model = state.model_copy()
        _send(state, 2, 1, 2, {5: 1.0})
        _send(state, 3, 1, 2, {6: 1.0})
        np.testing.assert_array_equal(state.model_copy(), model)
        _send(state, 1, 2, 2, {1: 8.0})
        _until(lambda: all(sent[w] and sent[w][-1].round == 2 for w in (1, 2, 3)))
        np.testing.assert_array_equal(_dense(sent[2][-1])[[1, 2, 5, 6]], [8, 4, 0, 1])
        np.testing.assert_array_equal(_dense(sent[3][-1])[[1, 2, 5, 6]], [8, 4, 1, 0])
        np.testing.assert_array_equal(_dense(sent[1][-1])[[1, 2, 5, 6]], [0, 4, 1, 1])
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
