"""Topology tree, async: a worker's messages up carry per-origin counts; an orphan re-sends
what the coordinator's counts do not cover, and its new parent (the coordinator or a
worker) applies each contribution once."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hogwild.coordinator.state import RunState
from hogwild.coordinator.tree_root import TreeRoot
from hogwild.engine.tree import ASYNC_SLACK_ROUNDS, DOWN_KEPT, TreeLinks
from hogwild.protocol.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.worker.sender import OutgoingDelta, _mark

from .tree_roots import DIM, root_of_four


def _send(state: RunState, wid: int, seq: int, entries: dict[int, float],
          covers: dict[int, int], resent: bool = False, orphan_heard: int | None = None
          ) -> None:
    """Worker ``wid``'s message up, as its sender encodes it (counts on every part)."""
    idx = np.array(sorted(entries), np.int32)
    val = np.array([entries[i] for i in sorted(entries)], np.float32)
    messages = encode_delta_parts(DeltaHeader(state.run_id, wid, 1, seq, DIM), idx, val,
                                  dense=False)
    _mark(messages, OutgoingDelta(1, False, 0, idx, val, covers=covers, resent=resent,
                                  orphan_heard=orphan_heard))
    for m in messages:
        assert state.apply_delta(decode_delta(m, DIM))


def _root(monkeypatch: Any) -> tuple[RunState, TreeRoot, dict[int, list[OutgoingDelta]]]:
    return root_of_four(monkeypatch, "async")


def test_root_applies_each_contribution_of_an_orphan_once(monkeypatch: Any) -> None:
    state, root, _ = _root(monkeypatch)
    try:
        # Worker 2's messages to worker 0: one coordinate each, a distinct power of two.
        mine = {j: {j: float(2 ** j)} for j in range(1, 6)}
        # Worker 0 passed on its own delta with 2's first two messages, then died.
        _send(state, 0, 1, {0: 0.5, 1: 2.0, 2: 4.0}, {0: 1, 2: 2})
        # Worker 2 re-sends 2..4 (it had heard the coordinator apply only its first), then
        # goes on with its fifth, sent to the coordinator directly.
        for seq, j in enumerate([2, 3, 4], start=1):
            _send(state, 2, seq, mine[j], {2: j}, resent=True)
        _send(state, 2, 4, mine[5], {2: 5})
        assert state.workers[0].dead
        expected = np.zeros(DIM)
        expected[0] = 0.5
        for j, entry in mine.items():
            for i, v in entry.items():
                expected[i] += v
        assert state.w is not None
        np.testing.assert_array_equal(state.w, expected)  # message 2 once, not twice
        recovery = root.recovery()
        assert recovery["resent_known"] == 1
        assert recovery["resent_applied"] == 2
        assert recovery["applied_up"] == {"0": 1, "2": 5}
    finally:
        root.close()


def test_aggregates_carry_the_applied_counts(monkeypatch: Any) -> None:
    state, root, sent = _root(monkeypatch)
    try:
        _send(state, 1, 1, {3: 1.0}, {1: 1})
        deadline = time.monotonic() + 5
        while not sent[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sent[0], "no aggregate to worker 0"
        assert sent[0][-1].applied == {1: 1}
    finally:
        root.close()


def test_worker_keeps_what_the_coordinator_has_not_applied() -> None:
    tree = TreeLinks([0], rounds_done=0)  # worker 2, a leaf under worker 0
    tree.parent, tree.me, tree.keep_rounds = 0, 2, None
    for r in range(1, 5):
        tree.own(np.array([r], np.int32), np.array([1.0]))
        (f,) = tree.forward(r)
        assert f.covers == {2: r}
    assert [u.index for u in tree.resend()] == [1, 2, 3, 4]
    tree.heard(0, (), ((2, 2), (5, 9)))  # the parent passes the coordinator's counts down
    assert [u.index for u in tree.resend()] == [3, 4]
    assert [int(u.indices[0]) for u in tree.resend()] == [3, 4]


def test_kept_messages_are_bounded_and_counted() -> None:
    tree = TreeLinks([0], rounds_done=0)
    tree.parent, tree.me, tree.keep_rounds = 0, 2, 2
    for r in range(1, 21):
        tree.own(np.array([r], np.int32), np.array([1.0]))
        tree.forward(r)
    keep = 2 + ASYNC_SLACK_ROUNDS
    assert [u.round for u in tree.resend()] == list(range(20 - keep, 21))
    assert tree.retained_dropped == 20 - keep - 1


def test_worker_parent_takes_a_held_resend_as_known() -> None:
    # Worker 0 (parent: the coordinator, sender id -7 here) adopts orphan 6 of dead worker 2.
    tree = TreeLinks([-7, 2], rounds_done=0)
    tree.parent, tree.me = -7, 0
    tree.heard(2, ((2, 4), (6, 3)), ())  # 2's messages held 6's first three
    assert tree.held(6, ((6, 3),))
    assert not tree.held(6, ((6, 4),))
    tree.heard(6, ((6, 4), (13, 1)), ())  # re-sent 4th, applied: its counts are held now
    tree.own(np.array([1], np.int32), np.array([1.0]))
    (up,) = [f for f in tree.forward(1) if f.neighbour == -7]
    assert up.covers == {0: 1, 2: 4, 6: 4, 13: 1}


def test_resend_racing_the_dead_parents_message_is_applied_once(monkeypatch: Any) -> None:
    # The bad order: worker 0's message (holding worker 2's second) is in the model, and
    # before the relay has heard of it, 2's re-sent second arrives. Deterministic: the
    # re-send goes in from the state's relay callback of 0's message, at that very point.
    state, root, _ = _root(monkeypatch)
    relay = state.relay
    assert relay is not None
    raced: list[bool] = []

    def bad_order(delta: Any, fresh: bool, version: int) -> None:
        if delta.header.worker_id == 0 and not raced:
            raced.append(True)
            _send(state, 2, 1, {2: 4.0}, {2: 2}, resent=True)
        relay(delta, fresh, version)

    state.relay = bad_order
    try:
        _send(state, 0, 1, {0: 0.5, 1: 2.0, 2: 4.0}, {0: 1, 2: 2})
        assert raced and state.workers[0].dead
        assert state.w is not None
        np.testing.assert_array_equal(state.w[:3], [0.5, 2.0, 4.0])  # 2's second once
        recovery = root.recovery()
        assert recovery["resent_known"] == 1
        assert recovery["resent_applied"] == 0
    finally:
        root.close()


def test_a_gap_in_an_origins_counts_shows(monkeypatch: Any) -> None:
    state, root, _ = _root(monkeypatch)
    try:
        _send(state, 0, 1, {0: 0.5, 2: 1.0}, {0: 1, 2: 2})  # held 2's first two
        # Worker 2's third was let go before 0 died: only its fourth comes again.
        _send(state, 2, 1, {3: 1.0}, {2: 4}, resent=True)
        recovery = root.recovery()
        assert recovery["applied_up"] == {"0": 1, "2": 4}
        assert recovery["applied_count"] == {"0": 1, "2": 3}  # 1, 2 and 4: 3 is missing
        with root._cond:
            assert root._applied_counts() == {0: 1, 2: 2}  # 2 keeps what is past the gap
    finally:
        root.close()


def _wait_for(sent: dict[int, list[OutgoingDelta]], wid: int, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(sent[wid]) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sent[wid]) >= count, sent[wid]


def test_root_sends_an_orphan_what_its_dead_parent_had_not_passed_down(
        monkeypatch: Any) -> None:
    state, root, sent = _root(monkeypatch)
    try:
        _send(state, 1, 1, {5: 1.0}, {1: 1})
        _wait_for(sent, 0, 1)
        _send(state, 1, 2, {6: 2.0}, {1: 2})
        _wait_for(sent, 0, 2)
        assert [d.down_index for d in sent[0]] == [1, 2]
        # Worker 2 heard worker 0's sums holding the first aggregate only, then 0 died.
        _send(state, 2, 1, {}, {2: 1}, orphan_heard=1)
        assert state.workers[0].dead
        caught = [d for d in sent[2] if d.indices.size]
        assert len(caught) == 1
        assert caught[0].indices.tolist() == [6] and caught[0].values.tolist() == [2.0]
        assert root.recovery()["orphans_caught_up"] == 1
        # Worker 3 had it all: sent nothing more (its report counts it as caught up).
        _send(state, 3, 1, {}, {3: 1}, orphan_heard=2)
        assert not [d for d in sent[3] if d.indices.size]
        assert root.recovery()["orphans_caught_up"] == 2
    finally:
        root.close()


def test_worker_parent_owes_an_orphan_what_it_sent_the_dead_child() -> None:
    # Worker 0 (parent: the coordinator, sender id -7 here), child 2 with child 6.
    tree = TreeLinks([-7, 2], rounds_done=0)
    tree.parent, tree.me = -7, 0
    tree.heard(-7, (), (), down_index=4, parent_heard=0)
    for r in range(1, 4):  # three messages down to 2, one coordinate each
        tree.received(-7, np.array([r], np.int32), np.array([float(r)]))
        (f,) = tree.forward(r)
        assert (f.neighbour, f.down_index, f.parent_heard) == (2, r, 4)
    tree.adopt(6, [2], async_orphan=True)  # 2 died: 6 is a child now
    tree.remove(2)
    tree.catch_up_async(6, 1)  # 2's sums it got held 0's first message to 2 only
    (f,) = tree.forward(4)
    assert f.neighbour == 6
    assert f.indices.tolist() == [2, 3] and f.values.tolist() == [2.0, 3.0]
    assert tree.caught_up == 1 and tree.catch_up_missed == 0


def test_orphan_reports_how_far_it_got_through_its_dead_parent() -> None:
    tree = TreeLinks([2], rounds_done=0)  # worker 6 under worker 2
    tree.parent, tree.me = 2, 6
    tree.heard(2, (), (), down_index=5, parent_heard=3)
    tree.heard(2, (), (), down_index=6, parent_heard=2)  # counts only grow
    tree.orphaned()
    tree.adopt(-7, [2])
    tree.remove(2)
    tree.parent = -7
    assert tree.orphan_heard == 3
    tree.own(np.array([1], np.int32), np.array([1.0]))
    (f,) = tree.forward(1)
    assert f.orphan_heard == 3
    tree.heard(-7, (), (), down_index=1)  # the new parent answered: no more reports
    tree.own(np.array([1], np.int32), np.array([1.0]))
    (f,) = tree.forward(2)
    assert f.orphan_heard is None


def test_lost_downward_messages_are_counted() -> None:
    tree = TreeLinks([-7, 2], rounds_done=0)
    tree.parent, tree.me = -7, 0
    for r in range(1, DOWN_KEPT + 6):
        tree.received(-7, np.array([1], np.int32), np.array([1.0]))
        tree.forward(r)
    tree.adopt(6, [2], async_orphan=True)
    tree.remove(2)
    tree.catch_up_async(6, 1)
    assert tree.catch_up_missed == 4  # messages 2-5 fell out of the kept ones
