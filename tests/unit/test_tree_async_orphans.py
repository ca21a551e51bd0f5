"""Topology tree, async: a worker's messages up carry per-origin counts; an orphan re-sends
what the coordinator's counts do not cover, and its new parent (the coordinator or a
worker) applies each contribution once."""

from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np

from hogwild.coordinator.state import RunState
from hogwild.coordinator.tree_root import TreeRoot
from hogwild.engine.tree import ASYNC_SLACK_ROUNDS, TreeLinks
from hogwild.protocol.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.worker.sender import Destination, OutgoingDelta, _mark

DIM = 10


def _send(state: RunState, wid: int, seq: int, entries: dict[int, float],
          covers: dict[int, int], resent: bool = False) -> None:
    """Worker ``wid``'s message up, as its sender encodes it (counts on every part)."""
    idx = np.array(sorted(entries), np.int32)
    val = np.array([entries[i] for i in sorted(entries)], np.float32)
    messages = encode_delta_parts(DeltaHeader(state.run_id, wid, 1, seq, DIM), idx, val,
                                  dense=False)
    _mark(messages, OutgoingDelta(1, False, 0, idx, val, covers=covers, resent=resent))
    for m in messages:
        assert state.apply_delta(decode_delta(m, DIM))


def _root(monkeypatch: Any) -> tuple[RunState, TreeRoot, dict[int, list[OutgoingDelta]]]:
    """4 workers, fan-out 2, async: the root's children are 0 and 1; 2 and 3 are 0's."""
    sent: dict[int, list[OutgoingDelta]] = {w: [] for w in range(4)}

    def capture(self: Destination, delta: OutgoingDelta) -> None:
        sent[self.dest_id].append(delta)

    monkeypatch.setattr(Destination, "put_delta", capture)
    state = RunState(4)
    for w in range(4):
        state.register(f"127.0.0.1:{9 + w}", 1)
    state.start_model(DIM)
    state.tree_fanout = 2
    root = TreeRoot(state, {w: f"127.0.0.1:{9 + w}" for w in range(4)}, DIM, "async",
                    barrier_timeout=30.0, rpc_timeout=1.0, chunk_bytes=1 << 20,
                    open_channel=lambda wid, address: grpc.insecure_channel(address), fanout=2)
    root.start()
    return state, root, sent


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
