"""Topology tree, async: a worker's messages up carry per-origin counts; an orphan re-sends
what the coordinator's counts do not cover, and its new parent (the coordinator or a
worker) applies each contribution once."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.tree_root import TreeRoot
from hogwild.cluster.transport.sender import OutgoingDelta, _mark
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.engine import tree as tree_module
from hogwild.engine.tree import ASYNC_SLACK_ROUNDS, TreeLinks

from .tree_roots import DIM, root_of_four


def _send(state: RunState, wid: int, seq: int, entries: dict[int, float],
          covers: dict[int, int], resent: bool = False) -> None:
    """Worker ``wid``'s message up, as its sender encodes it (counts on every part)."""
    idx = np.array(sorted(entries), np.int32)
    val = np.array([entries[i] for i in sorted(entries)], np.float32)
    messages = encode_delta_parts(DeltaHeader(state.run_id, wid, 1, seq, DIM), idx, val,
                                  dense=False)
    _mark(messages, OutgoingDelta(1, False, 0, idx, val, covers=covers, resent=resent))
    for m in messages:
        assert state.model.apply_delta(decode_delta(m, DIM))


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
        assert state.roster.workers[0].dead
        expected = np.zeros(DIM)
        expected[0] = 0.5
        for j, entry in mine.items():
            for i, v in entry.items():
                expected[i] += v
        assert state.model.w is not None
        np.testing.assert_array_equal(state.model.w, expected)  # message 2 once, not twice
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


def test_kept_messages_are_bounded_and_counted(monkeypatch: Any) -> None:
    monkeypatch.setattr(tree_module, "ASYNC_KEEP_BYTES", 0)  # the round bound alone
    tree = TreeLinks([0], rounds_done=0)
    tree.parent, tree.me, tree.keep_rounds = 0, 2, 2
    for r in range(1, 21):
        tree.own(np.array([r], np.int32), np.array([1.0]))
        tree.forward(r)
    keep = 2 + ASYNC_SLACK_ROUNDS
    assert [u.round for u in tree.resend()] == list(range(20 - keep, 21))
    assert tree.retained_dropped == 20 - keep - 1


def test_messages_past_the_round_bound_are_kept_within_the_byte_budget(
        monkeypatch: Any) -> None:
    # A coordinator whose applied counts trail (a busy machine) costs nothing while what is
    # kept fits the budget: all 40 rounds stay, ready to re-send; past it the oldest go.
    tree = TreeLinks([0], rounds_done=0)
    tree.parent, tree.me, tree.keep_rounds = 0, 2, 2
    for r in range(1, 41):
        tree.own(np.array([r], np.int32), np.array([1.0]))
        tree.forward(r)
    assert [u.round for u in tree.resend()] == list(range(1, 41))
    assert tree.retained_dropped == 0
    one = sum(u.indices.nbytes + u.values.nbytes for u in tree.resend()[:1])
    monkeypatch.setattr(tree_module, "ASYNC_KEEP_BYTES", 30 * one)
    tree.own(np.array([41], np.int32), np.array([1.0]))
    tree.forward(41)
    assert len(tree.resend()) == 30 and tree.resend()[-1].round == 41
    assert tree.retained_dropped == 11


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
    relay = state.model.relay
    assert relay is not None
    raced: list[bool] = []

    def bad_order(delta: Any, fresh: bool, version: int) -> None:
        if delta.header.worker_id == 0 and not raced:
            raced.append(True)
            _send(state, 2, 1, {2: 4.0}, {2: 2}, resent=True)
        relay(delta, fresh, version)

    state.model.relay = bad_order
    try:
        _send(state, 0, 1, {0: 0.5, 1: 2.0, 2: 4.0}, {0: 1, 2: 2})
        assert raced and state.roster.workers[0].dead
        assert state.model.w is not None
        np.testing.assert_array_equal(state.model.w[:3], [0.5, 2.0, 4.0])  # 2's second once
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
        assert root.applied_counts() == {0: 1, 2: 2}  # 2 keeps what is past the gap
    finally:
        root.close()


def _wait_for(sent: dict[int, list[OutgoingDelta]], wid: int, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(sent[wid]) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sent[wid]) >= count, sent[wid]


def _dense(indices: Any, values: Any) -> np.ndarray:
    out = np.zeros(DIM)
    np.add.at(out, np.asarray(indices), np.asarray(values, dtype=np.float64))
    return out


def test_root_levels_an_orphan_with_what_crossed_the_dead_edge(monkeypatch: Any) -> None:
    state, root, sent = _root(monkeypatch)
    try:
        _send(state, 1, 1, {5: 1.0}, {1: 1})
        _wait_for(sent, 0, 1)  # down worker 0's edge: 1's message
        # Up it: 0's own work with 2's first two messages and 3's first.
        _send(state, 0, 1, {0: 0.5, 2: 4.0, 3: 8.0}, {0: 1, 2: 2, 3: 1})
        # Worker 2 goes around its dead parent: the coordinator adopts 2 and 3.
        _send(state, 2, 1, {2: 16.0}, {2: 3}, resent=True)
        assert state.roster.workers[0].dead
        for orphan, cut in ((2, 2), (3, 1)):
            (resync,) = [d for d in sent[orphan] if d.resync_cut is not None]
            assert resync.resync_cut == cut and resync.apart
            # Everything that crossed 0's edge, each contribution once.
            np.testing.assert_array_equal(
                _dense(resync.indices, resync.values),
                _dense([0, 2, 3, 5], [0.5, 4.0, 8.0, 1.0]))
        assert root.recovery()["orphans_caught_up"] == 2
    finally:
        root.close()


def _up(tree: TreeLinks, own_round: int, entries: dict[int, float]) -> None:
    """A node's own delta, sent up at once (async)."""
    tree.own(np.array(sorted(entries), np.int32), np.array([entries[i] for i in sorted(entries)]))
    for f in tree.forward(own_round):
        assert f.neighbour == tree.parent


def test_worker_parent_sends_an_orphan_what_crossed_the_dead_edge() -> None:
    # Worker 0 (parent: the coordinator, sender id -7 here), child 2 with child 6.
    tree = TreeLinks([-7, 2], rounds_done=0)
    tree.parent, tree.me = -7, 0
    tree.track(DIM)
    for r in range(1, 4):  # three messages down to 2, one coordinate each
        tree.received(-7, np.array([r], np.int32), np.array([float(r)]))
        (f,) = tree.forward(r)
        assert f.neighbour == 2 and f.resync_cut is None
    # Up from 2: its own and 6's first three messages.
    tree.received(2, np.array([6, 7], np.int32), np.array([60.0, 70.0]))
    tree.heard(2, [(2, 1), (6, 3)], ())
    tree.forward(3)
    tree.adopt(6, [2], orphan=True, sync=False)  # 2 died: 6 is a child now
    tree.remove(2)
    resync = tree.take_resync(6, 4, sync=False)
    assert resync is not None and resync.neighbour == 6 and resync.resync_cut == 3
    np.testing.assert_array_equal(_dense(resync.indices, resync.values),
                                  _dense([1, 2, 3, 6, 7], [1.0, 2.0, 3.0, 60.0, 70.0]))
    assert tree.take_resync(6, 4, sync=False) is None  # once
    assert tree.caught_up == 1


def test_an_edge_adopted_around_a_death_inherits_its_world() -> None:
    # Worker 0 learns of 2's death and adopts 6, itself dead already (its death not yet
    # known): 6's edge starts with 2's world and counts, so 6's orphan 13 is levelled from it.
    tree = TreeLinks([-7, 2], rounds_done=0)
    tree.parent, tree.me = -7, 0
    tree.track(DIM)
    tree.received(2, np.array([4], np.int32), np.array([4.0]))
    tree.heard(2, [(2, 1), (6, 2), (13, 5)], ())
    tree.forward(1)
    tree.adopt(6, [2], orphan=True, sync=False)
    tree.remove(2)
    first = tree.take_resync(6, 1, sync=False)
    assert first is not None and first.resync_cut == 2
    tree.adopt(13, [6], orphan=True, sync=False)
    tree.remove(6)
    second = tree.take_resync(13, 1, sync=False)
    assert second is not None and second.resync_cut == 5
    np.testing.assert_array_equal(_dense(second.indices, second.values),
                                  _dense([4], [4.0]))


def test_an_orphan_is_levelled_with_its_new_parents_world() -> None:
    # Worker 6 under worker 2 under worker 0. 6 sends up 3 messages; 2 passes the first two
    # up and dies. Through 2, 6 had got 0's message {1: 1} and 2's own {2: 2} (which never
    # went up: lost everywhere) and its sibling 5's {3: 3} (which 2 never passed up: 5
    # re-sends it to 0, which relays it to 6 again).
    tree = TreeLinks([2], rounds_done=0)
    tree.parent, tree.me = 2, 6
    tree.track(DIM)
    for r, j in enumerate([7, 8, 9], start=1):
        _up(tree, r, {j: float(j)})
    for j in (1, 2, 3):
        tree.received(2, np.array([j], np.int32), np.array([float(j)]))
    own_total = _dense([7, 8, 9], [7.0, 8.0, 9.0])
    tree.orphaned(sync=False)
    tree.adopt(0, [2])
    tree.remove(2)
    tree.parent = 0
    # Before the resync: 0's next message, relayed from elsewhere, arrives as usual.
    tree.received(0, np.array([4], np.int32), np.array([4.0]))
    # 0's world of the dead edge: its message down ({1: 1}) and 2's sums up, which held
    # 6's messages 1-2 ({7: 7, 8: 8}) and 5's first ({0: 0.5}, passed up but not down).
    assert tree.view is not None
    change = tree.view.level(2, [(np.array([0, 1, 7, 8], np.int32),
                                  np.array([0.5, 1.0, 7.0, 8.0], np.float32))])
    assert change is not None
    tree.view.settle()
    tree.received(0, *change)
    # The parent side is now the world less 6's own 1-2, plus what 0 sent since; the own
    # side is all of 6's messages (its third went to 0 again as a re-send).
    parent_side = _dense([0, 1, 4], [0.5, 1.0, 4.0])
    np.testing.assert_allclose(tree.view.sum, own_total + parent_side)
    np.testing.assert_allclose(_dense(*change), _dense([0, 2, 3], [0.5, -2.0, -3.0]))
    assert tree.view.level(2, []) is None  # settled: a second resync is a stray


def test_own_messages_let_go_are_left_out_like_everywhere(monkeypatch: Any) -> None:
    monkeypatch.setattr(tree_module, "ASYNC_KEEP_BYTES", 0)  # the round bound alone
    tree = TreeLinks([2], rounds_done=0)
    tree.parent, tree.me, tree.keep_rounds = 2, 6, 0
    tree.track(DIM)
    for r in range(1, ASYNC_SLACK_ROUNDS + 3):  # the oldest two are let go unconfirmed
        _up(tree, r, {1: 1.0})
    assert tree.retained_dropped == 1
    tree.orphaned(sync=False)
    assert tree.view is not None
    change = tree.view.level(0, [])  # the new parent holds none of them
    assert change is not None
    # Every own message is undone from the parent side's view of it but the one let go,
    # which is in no model: the model keeps only what can still reach the others.
    assert tree.view.lost == 1
    np.testing.assert_allclose(_dense(*change), _dense([1], [-1.0]))
