"""The star relay sends each worker the sum of the others' deltas (never its own), per round
in sync mode, and a last aggregate marked final once every live worker sent its final."""

from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import StarRelay
from hogwild.cluster.coordinator.sums.tree_root import TreeRoot
from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts

DIM = 10


def _delta(state: RunState, wid: int, seq: int, round_: int, idx: list[int],
           val: list[float], final: bool = False) -> None:
    header = DeltaHeader(state.run_id, wid, round_, seq, DIM, final=final)
    (message,) = encode_delta_parts(header, np.array(idx, np.int32), np.array(val, np.float32),
                                    dense=False)
    assert state.model.apply_delta(decode_delta(message, DIM))


def _relay(state: RunState) -> tuple[StarRelay, dict[int, list[OutgoingDelta]]]:
    relay = _new_relay(StarRelay, state, "sync")
    sent: dict[int, list[OutgoingDelta]] = {w: [] for w in range(3)}
    for wid, dest in relay.destinations.items():
        # Capture instead of sending (nothing listens at these addresses).
        def capture(delta: OutgoingDelta, wid: int = wid) -> None:
            sent[wid].append(delta)
        dest.put_delta = capture  # type: ignore[method-assign]
    return relay, sent


def _capture_sends(monkeypatch: Any, n: int) -> dict[int, list[OutgoingDelta]]:
    """What every destination is given, by worker, instead of sending it."""
    sent: dict[int, list[OutgoingDelta]] = {w: [] for w in range(n)}

    def capture(self: Destination, delta: OutgoingDelta) -> None:
        sent[self.dest_id].append(delta)

    monkeypatch.setattr(Destination, "put_delta", capture)
    return sent


def _started_state(n: int) -> RunState:
    state = RunState(n)
    for w in range(n):
        state.roster.register(f"127.0.0.1:{9 + w}", 1)
    state.model.start_model(DIM)
    return state


def _new_relay(kind: type[StarRelay], state: RunState, mode: str, **extra: Any) -> StarRelay:
    """A relay (star, or a tree root with ``fanout``) over every worker of ``state``."""
    n = len(state.roster.workers)
    return kind(state, {w: f"127.0.0.1:{9 + w}" for w in range(n)}, DIM, mode,
                barrier_timeout=30.0, rpc_timeout=1.0, chunk_bytes=1 << 20,
                open_channel=lambda wid, address: grpc.insecure_channel(address), **extra)


def _wait(sent: dict[int, list[Any]], count: int) -> None:
    deadline = time.monotonic() + 10
    while any(len(v) < count for v in sent.values()) and time.monotonic() < deadline:
        time.sleep(0.01)


def _dense(delta: OutgoingDelta) -> np.ndarray:
    out = np.zeros(DIM)
    out[delta.indices] = delta.values
    return out


def test_each_worker_gets_the_others_sum_per_round_then_a_final() -> None:
    state = _started_state(3)
    relay, sent = _relay(state)
    relay.start()
    try:
        _delta(state, 0, 1, 1, [1, 2], [1.0, 2.0])
        _delta(state, 1, 1, 1, [2, 3], [10.0, 20.0])
        time.sleep(0.2)
        assert all(not v for v in sent.values())  # sync: worker 2's round 1 is missing
        _delta(state, 2, 1, 1, [5], [100.0])
        _wait(sent, 1)
        got = {w: _dense(sent[w][0]) for w in range(3)}
        everything = np.zeros(DIM)
        everything[[1, 2, 3, 5]] = [1.0, 12.0, 20.0, 100.0]
        own = {0: [0, 1, 2, 0, 0, 0], 1: [0, 0, 10, 20, 0, 0], 2: [0, 0, 0, 0, 0, 100]}
        for w in range(3):
            expected = everything.copy()
            expected[:6] -= own[w]
            np.testing.assert_array_equal(got[w], expected)
            assert sent[w][0].round == 1 and not sent[w][0].final
        for w in range(3):
            _delta(state, w, 2, 1, [7], [float(w + 1)], final=True)
        _wait(sent, 2)
        for w in range(3):
            last = sent[w][1]
            assert last.final
            np.testing.assert_array_equal(_dense(last)[7], 6.0 - (w + 1))
        # Own + the others' == the coordinator's model, for every worker.
        for w in range(3):
            mine = np.zeros(DIM)
            mine[[1, 2, 7]] = [1.0, 2.0, 1.0] if w == 0 else [0, 0, 0]
            if w == 1:
                mine[[2, 3, 7]] = [10.0, 20.0, 2.0]
            if w == 2:
                mine[[5, 7]] = [100.0, 3.0]
            total = mine + sum(_dense(d) for d in sent[w])
            np.testing.assert_allclose(total, state.model.model_copy())
    finally:
        relay.close()


def test_a_dead_worker_is_not_waited_for_and_its_last_delta_still_counts() -> None:
    state = _started_state(3)
    relay, sent = _relay(state)
    relay.start()
    try:
        _delta(state, 2, 1, 1, [9], [5.0])
        state.roster.mark_dead(2, "killed right after its round-1 delta")
        _delta(state, 0, 1, 1, [0], [1.0])
        _delta(state, 1, 1, 1, [1], [2.0])
        live = {w: sent[w] for w in (0, 1)}
        _wait(live, 1)
        assert not sent[2]
        # The coordinator's model took worker 2's delta: the survivors get it too.
        np.testing.assert_array_equal(_dense(sent[0][0])[[0, 1, 9]], [0.0, 2.0, 5.0])
        np.testing.assert_array_equal(_dense(sent[1][0])[[0, 1, 9]], [1.0, 0.0, 5.0])
        # Round 2 goes out without worker 2.
        _delta(state, 0, 2, 2, [0], [1.0])
        _delta(state, 1, 2, 2, [1], [2.0])
        _wait(live, 2)
        assert sent[0][1].round == 2 and not sent[2]
    finally:
        relay.close()


def test_a_worker_taken_back_gets_exactly_what_its_model_lacks(monkeypatch: Any) -> None:
    """Sync: worker 2 dies and registers again. The model it is sent holds some deltas the
    relay has not passed on yet (one of them told to the relay only after the copy): its
    aggregates leave those out, wait until it holds the model, and its model plus its own
    deltas plus its aggregates is the coordinator's model."""
    sent = _capture_sends(monkeypatch, 3)
    state = _started_state(3)
    relay = _new_relay(StarRelay, state, "sync")
    relay.start()
    try:
        for w in range(3):
            _delta(state, w, 1, 1, [w], [1.0 + w])
        _wait(sent, 1)
        old = relay.destinations[2]
        state.roster.mark_dead(2, "killed")
        _delta(state, 0, 2, 2, [3], [4.0])
        _delta(state, 1, 2, 2, [4], [5.0])
        _wait({w: sent[w] for w in (0, 1)}, 2)
        _delta(state, 0, 3, 3, [5, 6], [6.0, 7.0])   # pending when worker 2 is taken back
        state.model.relay = None                      # in the model, told to the relay later
        _delta(state, 1, 3, 3, [6, 7], [8.0, 9.0])
        late_version = state.model.model_version()[1]
        state.model.relay = relay.offer
        first, model = relay.take_back(2, first_round=99)
        assert first == 3  # sync: the next aggregate's round, whose barrier waits for it now
        assert not state.roster.workers[2].dead and 2 not in relay.destinations
        header = DeltaHeader(state.run_id, 1, 3, 3, DIM)
        (message,) = encode_delta_parts(header, np.array([6, 7], np.int32),
                                        np.array([8.0, 9.0], np.float32), dense=False)
        relay.offer(decode_delta(message, DIM), True, late_version)
        _delta(state, 0, 4, 3, [9], [11.0])           # after the copy: its aggregate has it
        # The destination of the dead incarnation gives up late: that does not drop the new one.
        old.on_down(2, "gave up")
        assert not state.roster.workers[2].dead
        time.sleep(0.2)
        assert len(sent[0]) == 2  # round 3 waits for worker 2 now
        _delta(state, 2, 1, 3, [8], [10.0])           # its new incarnation numbers from 1
        _wait({w: sent[w] for w in (0, 1)}, 3)
        time.sleep(0.1)
        assert len(sent[2]) == 1  # only the round-1 aggregate of the old incarnation
        relay.release(2, "127.0.0.1:11")
        _wait(sent, 2)
        (aggregate,) = sent[2][1:]
        assert aggregate.round == 3
        mine = model.copy()
        mine[8] += 10.0
        np.testing.assert_allclose(mine + _dense(aggregate), state.model.model_copy(), atol=1e-12)
        # Of the others' deltas only the one after its model's copy.
        expected = np.zeros(DIM)
        expected[9] = 11.0
        np.testing.assert_array_equal(_dense(aggregate), expected)
        # The new destination's giving up does drop it.
        relay.destinations[2].on_down(2, "gave up")
        assert state.roster.workers[2].dead
    finally:
        relay.close()


def test_async_an_empty_aggregate_carries_a_round_that_moved_alone(monkeypatch: Any) -> None:
    """Workers bounded by staleness wait for the round the aggregates vouch for; when it
    moves with nothing to pass on (empty deltas), an empty aggregate says so."""
    sent = _capture_sends(monkeypatch, 2)
    state = _started_state(2)
    relay = _new_relay(StarRelay, state, "async", period=0.01)
    relay.start()
    try:
        _delta(state, 0, 1, 4, [], [])
        time.sleep(0.1)
        assert sent == {0: [], 1: []}    # worker 1 is at round 0: the round did not move
        _delta(state, 1, 1, 3, [], [])
        _wait(sent, 1)
        assert [(d.round, d.indices.shape[0]) for d in sent[0]] == [(3, 0)]
        time.sleep(0.1)
        assert len(sent[0]) == 1         # said once
    finally:
        relay.close()


def test_a_tree_root_takes_a_worker_back_as_its_leaf(monkeypatch: Any) -> None:
    """Tree, 4 workers, fan-out 2 (the root's children 0 and 1; 2 and 3 below 0). Worker 0
    dies with a sum still pending at the root; 2 and 3 are adopted; 0 registers again and
    becomes one more leaf of the root. Its old sum goes to 1, and to 2 and 3 in their
    resync (everything that crossed 0's old edge); its new deltas go to everyone; it gets
    everything new."""
    sent = _capture_sends(monkeypatch, 4)
    state = _started_state(4)
    state.roster.tree_fanout = 2
    root = _new_relay(TreeRoot, state, "sync", fanout=2)
    assert isinstance(root, TreeRoot)
    root.start()
    try:
        _delta(state, 0, 1, 1, [0], [1.0])       # 0's subtree (0, 2, 3), round 1
        _delta(state, 1, 1, 1, [1], [2.0])
        _wait({w: sent[w] for w in (0, 1)}, 1)
        _delta(state, 0, 2, 2, [2], [4.0])       # pending when 0 dies
        state.roster.mark_dead(0, "killed")
        first, model = root.take_back(0, first_round=99)
        assert first == 2 and 0 in state.roster.detached and not state.roster.workers[0].dead
        root.release(0, "127.0.0.1:9")
        _delta(state, 0, 1, 2, [3], [8.0])       # its new incarnation, round 2
        _delta(state, 1, 2, 2, [4], [16.0])
        _delta(state, 2, 1, 3, [5], [32.0])      # adopted: below a worker now dead
        _delta(state, 3, 1, 3, [6], [64.0])
        # The relay thread hands round 2 to 0, 1, 2, 3 in turn: wait for the last of them.
        deadline = time.monotonic() + 10
        while (any(not v or v[-1].round < 2 for v in sent.values())
               and time.monotonic() < deadline):
            time.sleep(0.01)
        got = {w: _dense(sent[w][-1]) for w in range(4)}
        assert all(sent[w][-1].round == 2 for w in range(4))
        # The adopted were levelled at once, with the round the root had sent: everything
        # that crossed 0's edge (up {0: 1}, {2: 4}; down {1: 2}).
        for w in (2, 3):
            assert [(d.round, d.indices.shape[0]) for d in sent[w]] == [(1, 3), (2, 3)]
            assert sent[w][0].resync_cut == 2
            np.testing.assert_array_equal(_dense(sent[w][0])[[0, 1, 2]], [1, 2, 4])
        np.testing.assert_array_equal(got[0][[2, 3, 4, 5, 6]], [0, 0, 16, 32, 64])
        np.testing.assert_array_equal(got[1][[2, 3, 4, 5, 6]], [4, 8, 0, 32, 64])
        np.testing.assert_array_equal(got[2][[2, 3, 4, 5, 6]], [0, 8, 16, 0, 64])
        np.testing.assert_array_equal(got[3][[2, 3, 4, 5, 6]], [0, 8, 16, 32, 0])
        # The worker taken back: its model + its own + what it got is the global model.
        mine = model.copy()
        mine[3] += 8.0
        np.testing.assert_array_equal(mine + got[0], state.model.model_copy())
        # A report from an old neighbour (it still routes around 0) does not drop it.
        state.roster.reports.peer_down(state.run_id, 2, 0, 2, "silent",
                                       key=state.roster.worker_key(2))
        assert not state.roster.workers[0].dead
    finally:
        root.close()
