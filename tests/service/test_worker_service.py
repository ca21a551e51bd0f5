"""A real Worker server: shard shipping over 4 MiB, configuration, delta validation, health."""

from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np
import pytest

from hogwild.cluster.transport.health import check
from hogwild.cluster.transport.security import Security
from hogwild.cluster.transport.sender import Destination
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.wire.codec import DeltaHeader, encode_delta
from hogwild.cluster.wire.streams import FinalState, shard_chunks, state_chunks
from hogwild.cluster.worker.node import QUEUED_MODELS, WorkerNode
from hogwild.cluster.worker.phase import COORDINATOR_ID, Phase
from hogwild.data.csr import CSRData
from hogwild.engine.averaging import MAX_DEFERRED_ROUNDS
from hogwild.engine.rules import contributing

from .conftest import PEER_KEY, WorkerServer

N_FEATURES = 12_000
DIM = N_FEATURES + 1
PEER = 7


def _big_shard(n_rows: int = 60_000, per_row: int = 12) -> CSRData:
    """~5.8 MB of non-zeros: more than gRPC's 4 MiB message limit."""
    rows = np.arange(n_rows)
    cols = (np.arange(per_row) * 1000)[None, :] + (rows % 1000)[:, None]  # ascending per row
    rng = np.random.default_rng(0)
    return CSRData(np.arange(0, n_rows * per_row + 1, per_row, dtype=np.int64),
                   cols.ravel().astype(np.int32),
                   rng.random(n_rows * per_row).astype(np.float32),
                   np.where(rows % 3 == 0, 1.0, -1.0).astype(np.float32), N_FEATURES)


def _ship(worker: WorkerServer, data: CSRData) -> pb.ShardAck:
    node = worker.node
    return worker.stub.ReceiveShard(
        shard_chunks(data, node.run_id, node.worker_id, chunk_bytes=1 << 20), timeout=30)


def _configure(worker: WorkerServer, mode: str = "sync", peers: list[pb.Peer] | None = None,
               **extra: object) -> None:
    node = worker.node
    worker.stub.Configure(pb.RunConfig(
        protocol_version=PROTOCOL_VERSION, run_id=node.run_id, worker_id=node.worker_id,
        peers=peers or [pb.Peer(worker_id=PEER, address="127.0.0.1:1", receive_key=PEER_KEY)],
        dim=DIM, n_features=N_FEATURES,
        mode=mode, staleness=-1, threads=2, round_size=100, max_rounds=3,
        train_rows=60_000, loss="hinge", learning_rate=0.1, lr_schedule="constant",
        lr_decay=0.9, power_t=0.5, l2=0.0, fit_bias=True, barrier_timeout=2.0,
        rpc_timeout=2.0, **extra), timeout=5)  # type: ignore[arg-type]


@pytest.fixture
def configured(worker_server: WorkerServer) -> WorkerServer:
    _ship(worker_server, _big_shard(2000, 4))
    _configure(worker_server)
    return worker_server


def _delta(run_id: str, worker_id: int = PEER, seq: int = 1) -> pb.Delta:
    idx = np.array([1, 50, N_FEATURES], dtype=np.int32)
    val = np.array([0.25, -0.5, 1.5], dtype=np.float32)
    return encode_delta(DeltaHeader(run_id, worker_id, round=1, seq=seq, dim=DIM), idx, val)


def test_shard_larger_than_4mib_ships_intact(worker_server: WorkerServer) -> None:
    data = _big_shard()
    assert data.indices.nbytes + data.values.nbytes > 4 * 1024 * 1024
    chunks = list(shard_chunks(data, worker_server.node.run_id, worker_server.node.worker_id,
                               chunk_bytes=1 << 20))
    assert all(c.ByteSize() < (1 << 20) + 1024 for c in chunks)
    ack = _ship(worker_server, data)
    assert ack.shard_digest == chunks[-1].shard_digest
    assert (ack.n_rows, ack.nnz) == (data.n_rows, data.nnz)
    got = worker_server.node.shard
    assert got is not None
    for name in ("indptr", "indices", "values", "labels"):
        np.testing.assert_array_equal(getattr(got.data, name), getattr(data, name))
    assert got.data.n_features == N_FEATURES


def test_corrupt_shard_is_invalid_argument(worker_server: WorkerServer) -> None:
    chunks = list(shard_chunks(_big_shard(500, 4), worker_server.node.run_id,
                               worker_server.node.worker_id, chunk_bytes=4096))
    chunks[2].crc32 ^= 0xFF
    with pytest.raises(grpc.RpcError) as info:
        worker_server.stub.ReceiveShard(iter(chunks), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert worker_server.node.shard is None


def test_config_before_shard_is_failed_precondition(worker_server: WorkerServer) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _configure(worker_server)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def _expect(worker: WorkerServer, message: pb.Delta, code: grpc.StatusCode) -> None:
    before = worker.node.w.tobytes()
    with pytest.raises(grpc.RpcError) as info:
        worker.peer_stub.PushDelta(message, timeout=5)
    assert info.value.code() == code, info.value.details()
    assert worker.node.loop.apply_inbox() == 0, "a rejected delta was queued"
    assert worker.node.w.tobytes() == before


def test_bad_deltas_get_status_codes_and_leave_w_untouched(worker_server: WorkerServer) -> None:
    """Each kind of bad delta comes from a peer of its own: a refusal for its values drops
    that peer, and what a dropped peer sends is refused as such."""
    _ship(worker_server, _big_shard(2000, 4))
    senders = (PEER, PEER + 1, PEER + 2)
    _configure(worker_server, peers=[pb.Peer(worker_id=p, address="127.0.0.1:1",
                                             receive_key=PEER_KEY) for p in senders])
    configured = worker_server
    run_id = configured.node.run_id
    at_dim = _delta(run_id, worker_id=senders[0])
    idx = np.frombuffer(at_dim.indices.data, np.int32).copy()
    idx[-1] = DIM
    at_dim.indices.data = idx.tobytes()
    _expect(configured, at_dim, grpc.StatusCode.INVALID_ARGUMENT)

    mismatch = _delta(run_id, worker_id=senders[1])
    mismatch.indices.length += 1
    _expect(configured, mismatch, grpc.StatusCode.INVALID_ARGUMENT)

    nan = _delta(run_id, worker_id=senders[2])
    val = np.frombuffer(nan.values.data, np.float32).copy()
    val[0] = np.nan
    nan.values.data = val.tobytes()
    _expect(configured, nan, grpc.StatusCode.INVALID_ARGUMENT)

    # Those whose values were refused (an index beyond the model, NaN) were dropped, and the
    # same again is refused as from a dropped peer; a malformed message drops nobody.
    inbox = configured.node.inbox
    assert [inbox.dropped(p) for p in senders] == [True, False, True]
    nan.seq += 1
    _expect(configured, nan, grpc.StatusCode.FAILED_PRECONDITION)

    _expect(configured, _delta("other-run"), grpc.StatusCode.FAILED_PRECONDITION)
    _expect(configured, _delta(run_id, worker_id=PEER + 10), grpc.StatusCode.FAILED_PRECONDITION)
    old = _delta(run_id)
    old.protocol_version = PROTOCOL_VERSION + 1
    _expect(configured, old, grpc.StatusCode.FAILED_PRECONDITION)


def test_duplicate_delta_is_acknowledged_and_applied_once(configured: WorkerServer) -> None:
    node = configured.node
    m = _delta(node.run_id, seq=4)
    assert not configured.peer_stub.PushDelta(m, timeout=5).duplicate
    assert configured.peer_stub.PushDelta(m, timeout=5).duplicate
    assert node.loop.apply_inbox() == 1
    expected = np.zeros(DIM)
    expected[[1, 50, N_FEATURES]] = [0.25, -0.5, 1.5]
    assert node.w.tobytes() == expected.tobytes()
    # Applied deltas are peers' updates, not own ones: the next own delta is empty.
    assert node.snap.tobytes() == expected.tobytes()
    assert node.inbox.peers[PEER].applied == 1 and node.inbox.peers[PEER].round == 1


def test_health_serving_then_not_serving(worker_server: WorkerServer) -> None:
    assert check(worker_server.address, timeout=10) == "NOT_SERVING"
    worker_server.health.set(True)
    assert check(worker_server.address, timeout=10, service="hogwild.v1.Worker") == "SERVING"
    worker_server.health.set(False)
    assert check(worker_server.address, timeout=10) == "NOT_SERVING"


def test_own_bias_change_is_averaged_over_the_contributing_workers(
        configured: WorkerServer) -> None:
    node = configured.node
    assert node.plan is not None
    bias = node.plan.dim - 1
    node.w[bias] = 1.0    # this round's own change: +1 on the bias, +2 on feature 5
    node.w[5] = 2.0
    node.loop.exchange(node.plan, 1, final=False)
    # One live peer: half the bias change is kept and sent (snap moves by what was sent);
    # the feature weight is summed, not averaged.
    assert node.w[bias] == node.snap[bias] == 0.5
    assert node.w[5] == node.snap[5] == 2.0
    node.inbox.drop(PEER)  # the peer is gone: nobody else contributes to the bias
    node.w[bias] += 1.0
    node.loop.exchange(node.plan, 2, final=False)
    assert node.w[bias] == node.snap[bias] == 1.5


def test_combine_average_averages_every_weight_not_only_the_bias(
        worker_server: WorkerServer) -> None:
    _ship(worker_server, _big_shard(2000, 4))
    _configure(worker_server, combine="average")
    node = worker_server.node
    assert node.plan is not None and node.plan.combine == "average"
    bias = node.plan.dim - 1
    node.w[bias] = 1.0
    node.w[5] = 2.0
    node.loop.exchange(node.plan, 1, final=False)
    # One live peer: half of every change is kept and sent, the feature's as the bias's.
    assert node.w[bias] == node.snap[bias] == 0.5
    assert node.w[5] == node.snap[5] == 1.0


def test_unknown_combine_is_invalid_argument_naming_it(worker_server: WorkerServer) -> None:
    _ship(worker_server, _big_shard(500, 4))
    with pytest.raises(grpc.RpcError) as info:
        _configure(worker_server, combine="median")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "combine" in (info.value.details() or "")
    assert worker_server.node.plan is None


def test_combine_average_with_topk_is_invalid_argument(worker_server: WorkerServer) -> None:
    _ship(worker_server, _big_shard(500, 4))
    with pytest.raises(grpc.RpcError) as info:
        _configure(worker_server, combine="average", delta_topk=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "combine" in (info.value.details() or "")


def test_a_run_config_setting_the_schema_refuses_is_invalid_argument_naming_it(
        worker_server: WorkerServer) -> None:
    # delta_topk is a setting: the schema's bound (below 2**63) holds on the wire too.
    _ship(worker_server, _big_shard(500, 4))
    with pytest.raises(grpc.RpcError) as info:
        _configure(worker_server, delta_topk=1 << 63)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run config delta_topk: must be non-negative" in (info.value.details() or "")
    assert worker_server.node.plan is None


def test_configure_opens_the_connections_before_start(configured: WorkerServer) -> None:
    # Deltas of the first round must not wait for TCP and TLS handshakes: the destinations
    # (peer and coordinator) exist, connecting, before Start.
    node = configured.node
    assert not node.signals.started.is_set()
    assert set(node.destinations) == {PEER, COORDINATOR_ID}


def _configured_async(worker: WorkerServer, **extra: object) -> WorkerServer:
    _ship(worker, _big_shard(2000, 4))
    _configure(worker, mode="async", **extra)
    # Running without its threads: the model changes only through what the test does.
    worker.node.phase = Phase.RUNNING
    return worker


def test_async_applies_a_delta_when_it_arrives(worker_server: WorkerServer) -> None:
    node = _configured_async(worker_server).node
    assert not worker_server.peer_stub.PushDelta(_delta(node.run_id), timeout=5).duplicate
    # Applied by the RPC that accepted it, not at this worker's next round boundary.
    expected = np.zeros(DIM)
    expected[[1, 50, N_FEATURES]] = [0.25, -0.5, 1.5]
    assert node.inbox.queued() == 0
    assert node.w.tobytes() == expected.tobytes()
    assert node.snap.tobytes() == expected.tobytes()  # a peer's update, not an own one
    assert node.inbox.peers[PEER].applied == 1


def test_async_delta_arriving_during_an_exchange_is_applied_after_it(
        worker_server: WorkerServer) -> None:
    node = _configured_async(worker_server).node
    assert node.plan is not None
    node.w[5] = 2.0  # an own update of this round
    with node.signals.exchange_lock:  # an exchange in progress: the RPC thread must not wait for it
        assert not worker_server.peer_stub.PushDelta(_delta(node.run_id), timeout=5).duplicate
        assert node.inbox.queued() == 1 and node.w[1] == 0.0
    node.loop.exchange(node.plan, 1, final=False)
    assert node.inbox.queued() == 0
    assert node.w[1] == node.snap[1] == 0.25 and node.w[5] == node.snap[5] == 2.0


def test_sync_delta_waits_for_the_barrier(configured: WorkerServer) -> None:
    node = configured.node
    node.phase = Phase.RUNNING
    assert not configured.peer_stub.PushDelta(_delta(node.run_id), timeout=5).duplicate
    # Sync: every worker applies a round's deltas together, at the barrier.
    assert node.inbox.queued() == 1 and not node.w.any()


def _capture_sent(node: WorkerNode) -> list[tuple[np.ndarray, np.ndarray]]:
    """Record the (indices, values) of every delta the node encodes from now on."""
    sent: list[tuple[np.ndarray, np.ndarray]] = []
    encode = node.loop.encode_delta

    def recording(indices: np.ndarray, values: np.ndarray, *args: Any) -> list[pb.Delta]:
        sent.append((indices.copy(), values.copy()))
        return encode(indices, values, *args)

    node.loop.encode_delta = recording  # type: ignore[method-assign, assignment]
    return sent


def test_async_average_keeps_own_progress_until_the_peers_round_arrives(
        worker_server: WorkerServer) -> None:
    node = _configured_async(worker_server, combine="average").node
    assert node.plan is not None
    sent = _capture_sent(node)
    bias = node.plan.dim - 1
    node.w[bias] = 1.0
    node.w[5] = 2.0
    node.loop.exchange(node.plan, 1, final=False)
    # Half of the change is sent (the peer and the coordinator add the same), all of it is
    # kept here while the peer's round 1 is missing: this worker trains on from its progress.
    (idx, val), = sent
    assert dict(zip(idx.tolist(), val.tolist())) == {5: 1.0, bias: 0.5}
    assert node.w[5] == 2.0 and node.w[bias] == 1.0
    # The peer's round 1 arrives: the half not sent goes, the peer's half comes in.
    assert not worker_server.peer_stub.PushDelta(_delta(node.run_id), timeout=5).duplicate
    assert node.w[5] == 1.0 and node.w[bias] == 0.5 + 1.5 and node.w[1] == 0.25
    assert node.w.tobytes() == node.snap.tobytes()  # nothing own left unsent


def test_async_deferred_average_is_settled_by_the_final_delta(
        worker_server: WorkerServer) -> None:
    node = _configured_async(worker_server, combine="average").node
    assert node.plan is not None
    sent = _capture_sent(node)
    node.w[5] = 3.0
    node.loop.exchange(node.plan, 1, final=False)   # the peer never sends round 1
    node.w[7] = 1.0
    node.loop.exchange(node.plan, 2, final=True)
    # Round 1's kept half is taken out before the final delta: this worker's model is what
    # its deltas gave everyone else (1.5 + 0.5).
    assert [dict(zip(i.tolist(), v.tolist())) for i, v in sent] == [{5: 1.5}, {7: 0.5}]
    assert node.w[5] == 1.5 and node.w[7] == 0.5
    assert node.w.tobytes() == node.snap.tobytes()


def test_async_deferred_rounds_are_bounded(worker_server: WorkerServer) -> None:
    node = _configured_async(worker_server, combine="average").node
    assert node.plan is not None
    for r in range(1, MAX_DEFERRED_ROUNDS + 3):  # a peer that never catches up
        node.w[5] += 2.0
        node.loop.exchange(node.plan, r, final=False)
        assert len(node.engine.averaging.deferred) <= MAX_DEFERRED_ROUNDS
    # The settled rounds count at 1 each (half of 2), the deferred ones at 2 still.
    settled = MAX_DEFERRED_ROUNDS + 2 - len(node.engine.averaging.deferred)
    assert node.w[5] == settled * 1.0 + len(node.engine.averaging.deferred) * 2.0


def test_async_three_workers_settle_on_exactly_what_was_sent(
        worker_server: WorkerServer) -> None:
    # W = 3: 1/3 is not exact in float32; the part kept is settled to the last float64 bit.
    _ship(worker_server, _big_shard(2000, 4))
    node = worker_server.node
    _configure(worker_server, mode="async", combine="average", peers=[
        pb.Peer(worker_id=PEER, address="127.0.0.1:1", receive_key=PEER_KEY),
        pb.Peer(worker_id=PEER + 1, address="127.0.0.1:2", receive_key=PEER_KEY)])
    node.phase = Phase.RUNNING
    assert node.plan is not None
    sent = _capture_sent(node)
    node.w[5] = np.float32(0.7)  # a float32 value: build_delta sends all of it
    node.loop.exchange(node.plan, 1, final=False)
    node.engine.averaging.settle(node.w, node.snap, node.inbox.snapshot(), everything=True)
    (idx, val), = sent
    assert idx.tolist() == [5] and val[0] == np.float32(np.float32(0.7) / 3)
    assert node.w[5] == node.snap[5] == np.float64(val[0])


def test_a_peer_call_before_the_run_config_is_unavailable_not_a_refusal(
        worker_server: WorkerServer) -> None:
    # A process restarting at a peer's old address is not configured yet: the caller must
    # retry (UNAVAILABLE), not conclude it was dropped (FAILED_PRECONDITION makes a worker
    # leave the run and register again).
    with pytest.raises(grpc.RpcError) as info:
        worker_server.peer_stub.PushDelta(_delta(worker_server.node.run_id), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "before the run config" in (info.value.details() or "")


def test_loading_the_global_model_discards_deltas_received_before_it(
        configured: WorkerServer) -> None:
    node = configured.node
    assert node.plan is not None
    assert not configured.peer_stub.PushDelta(_delta(node.run_id), timeout=5).duplicate
    assert node.inbox.queued() == 1
    weights = np.full(node.plan.dim, 0.125)
    configured.stub.LoadModel(state_chunks(FinalState(node.worker_id, weights), node.run_id,
                                           1 << 16), timeout=5)
    # The global model holds what peers sent before it: applying it again would count twice.
    assert node.inbox.queued() == 0
    node.loop.exchange(node.plan, 1, final=False)
    assert node.w.tobytes() == weights.tobytes()


def _configure_with_a_down_peer(worker: WorkerServer, **extra: object) -> None:
    _configure(worker, peers=[
        pb.Peer(worker_id=PEER, address="127.0.0.1:1", receive_key=PEER_KEY),
        pb.Peer(worker_id=PEER + 1, address="127.0.0.1:2", receive_key=PEER_KEY, down=True)],
        **extra)


def test_a_peer_down_at_configure_is_not_waited_for_and_is_taken_back_when_it_joins(
        worker_server: WorkerServer) -> None:
    # A worker rejoining while another is dead is configured with that one marked down: no
    # barrier waits for it, nothing is sent to it, and a PeerJoined for it later succeeds
    # (a worker that was no peer used to be refused, and kept registering again).
    _ship(worker_server, _big_shard(2000, 4))
    _configure_with_a_down_peer(worker_server)
    node = worker_server.node
    assert node.plan is not None and node.plan.down == frozenset({PEER + 1})
    assert node.inbox.peers[PEER + 1].settled and not node.inbox.peers[PEER].settled
    assert set(node.destinations) == {PEER, COORDINATOR_ID}
    assert contributing(node.plan.rules, node.inbox.snapshot()) == 2
    first = worker_server.stub.PeerJoined(pb.PeerJoinedRequest(
        protocol_version=PROTOCOL_VERSION, run_id=node.run_id, worker_id=PEER + 1,
        address="127.0.0.1:3"), timeout=5).round
    assert first == node.counters.rounds + 1
    assert not node.inbox.peers[PEER + 1].settled
    assert set(node.destinations) == {PEER, PEER + 1, COORDINATOR_ID}
    assert node.destinations[PEER + 1].address == "127.0.0.1:3"
    assert contributing(node.plan.rules, node.inbox.snapshot()) == 3


def test_a_down_peer_outside_a_mesh_is_refused(worker_server: WorkerServer) -> None:
    _ship(worker_server, _big_shard(2000, 4))
    with pytest.raises(grpc.RpcError) as info:
        _configure_with_a_down_peer(worker_server, topology="star")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "peers" in (info.value.details() or "")


def test_a_refused_progress_report_sends_the_worker_to_register_again(
        worker_server: WorkerServer) -> None:
    """A worker held back by its staleness bound sends the coordinator nothing but progress
    reports: a resumed coordinator it has not registered with refuses those, and that must
    send it back to register (it once trained on, and the resumed run waited in vain)."""
    node = _configured_async(worker_server).node
    node.liveness.on_rejected(COORDINATOR_ID, "ReportProgress", grpc.StatusCode.PERMISSION_DENIED,
                      "the caller is not worker 0")
    assert node.ending.rejoin_reason is None  # not a sign of a coordinator that forgot it
    node.liveness.on_rejected(COORDINATOR_ID, "ReportProgress", grpc.StatusCode.FAILED_PRECONDITION,
                      "worker 0 has not registered with this coordinator since it was "
                      "resumed: register again")
    assert node.ending.rejoin_reason is not None and "ReportProgress" in node.ending.rejoin_reason
    assert node.ending.abandoned and node.signals.stop_requested.is_set()


def _wide_delta(run_id: str, seq: int, width: int = 6000) -> pb.Delta:
    """A sparse delta of ``width`` coordinates (every other weight), each +0.001."""
    idx = np.arange(0, 2 * width, 2, dtype=np.int32)
    return encode_delta(DeltaHeader(run_id, PEER, round=1, seq=seq, dim=DIM), idx,
                        np.full(width, 0.001, dtype=np.float32))


def test_a_peer_flooding_a_sync_worker_is_held_back_not_queued_without_end(
        configured: WorkerServer) -> None:
    """Sync: deltas wait for the round boundary. A member sending numbered deltas faster is
    refused with RESOURCE_EXHAUSTED once QUEUED_MODELS models' worth of its coordinates wait;
    nothing of the refused delta is recorded, and it is taken once the queue was drained."""
    node = configured.node
    node.phase = Phase.RUNNING
    cap = QUEUED_MODELS * DIM
    seq = 0
    with pytest.raises(grpc.RpcError) as refused:
        for seq in range(1, cap // 6000 + 3):
            configured.peer_stub.PushDelta(_wide_delta(node.run_id, seq), timeout=5)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert seq == cap // 6000 + 1                      # the first beyond the bound
    assert node.inbox.queued() == seq - 1 and node.inbox.refused_busy == 1
    assert not node.w.any()                             # sync: nothing applied before the barrier
    # An earlier message retried is still a duplicate (acknowledged), not refused.
    assert configured.peer_stub.PushDelta(_wide_delta(node.run_id, 1), timeout=5).duplicate
    node.inbox.drain()                                  # the round boundary
    assert not configured.peer_stub.PushDelta(_wide_delta(node.run_id, seq), timeout=5).duplicate
    assert node.inbox.queued() == 1


def test_a_sender_refused_as_busy_retries_until_the_delta_is_taken(
        configured: WorkerServer) -> None:
    """The real sender against a full inbox: it retries the same seq (RESOURCE_EXHAUSTED is
    no rejection) and the delta arrives once the worker drains; nothing is lost or doubled."""
    node = configured.node
    node.phase = Phase.RUNNING
    node.inbox.max_queued = 6000                        # room for exactly one wide delta
    downs: list[str] = []
    dest = Destination("worker under test", 0, configured.address, pb_grpc.WorkerStub,
                       rpc_timeout=2.0, give_up_after=20.0,
                       on_down=lambda _id, why: downs.append(why),
                       open_channel=lambda address: Security().channel(address,
                                                                       sender_key=PEER_KEY))
    try:
        for seq in (1, 2):
            dest.put("PushDelta", _wide_delta(node.run_id, seq))
        deadline = time.monotonic() + 10
        while node.inbox.refused_busy == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.inbox.refused_busy >= 1 and node.inbox.queued() == 1
        first = node.inbox.drain()
        assert [d.header.seq for d in first] == [1]
        assert dest.flush(10) and not downs
        second = node.inbox.drain()
        assert [d.header.seq for d in second] == [2] and node.inbox.duplicates == 0
        assert dest.acked == {"PushDelta": 2} and dest.rejected == 0
    finally:
        dest.close(timeout=1.0)
