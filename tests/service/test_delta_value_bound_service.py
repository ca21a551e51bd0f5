"""Real Worker and Coordinator servers: a member's delta of huge finite values (1e30) is refused
with INVALID_ARGUMENT and leaves the model untouched; its sender is dropped (the coordinator
quarantines it), so its later deltas are refused too; another member's delta goes."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import DeltaHeader, encode_delta, value_bound
from hogwild.cluster.wire.streams import shard_chunks
from hogwild.data.csr import CSRData

from .conftest import PEER_KEY, CoordinatorServer, WorkerServer

N_FEATURES = 200
DIM = N_FEATURES + 1
PEER = 7
HUGE = 1e30


def _delta(run_id: str, values: tuple[float, ...], worker_id: int = PEER,
           seq: int = 1) -> pb.Delta:
    return encode_delta(DeltaHeader(run_id, worker_id, round=1, seq=seq, dim=DIM),
                        np.array([3, 50, N_FEATURES][:len(values)], np.int32),
                        np.array(values, np.float32))


@pytest.fixture
def worker(worker_server: WorkerServer) -> WorkerServer:
    """Configured by its coordinator as a run with max|x| 1 and 4 threads in all."""
    node = worker_server.node
    rows = np.arange(40)
    shard = CSRData(np.arange(0, 41, dtype=np.int64), (rows % N_FEATURES).astype(np.int32),
                    np.ones(40, np.float32), np.where(rows % 2, 1.0, -1.0).astype(np.float32),
                    N_FEATURES)
    worker_server.stub.ReceiveShard(shard_chunks(shard, node.run_id, node.worker_id,
                                                 chunk_bytes=4096), timeout=10)
    worker_server.stub.Configure(pb.RunConfig(
        protocol_version=PROTOCOL_VERSION, run_id=node.run_id, worker_id=node.worker_id,
        peers=[pb.Peer(worker_id=PEER, address="127.0.0.1:1", receive_key=PEER_KEY)],
        dim=DIM, n_features=N_FEATURES, mode="sync", staleness=-1, threads=2, round_size=10,
        max_rounds=3, train_rows=40, loss="logistic", learning_rate=0.1,
        lr_schedule="inverse", lr_decay=0.9, power_t=0.5, l2=0.0, fit_bias=True,
        barrier_timeout=2.0, rpc_timeout=2.0, max_abs_value=1.0, run_threads=4), timeout=5)
    return worker_server


def test_a_worker_refuses_a_members_huge_delta_and_keeps_its_model(worker: WorkerServer) -> None:
    node = worker.node
    before = node.w.tobytes()
    with pytest.raises(grpc.RpcError) as info:
        worker.peer_stub.PushDelta(_delta(node.run_id, (0.5, HUGE)), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "beyond what this run" in (info.value.details() or "")
    assert node.loop.apply_inbox() == 0 and node.w.tobytes() == before
    # Its sender is dropped (no barrier waits for it) and counted; what it sends next is
    # refused as from a dropped peer, even values a step of this run could make.
    assert node.inbox.refused == {PEER: 1} and node.inbox.dropped(PEER)
    with pytest.raises(grpc.RpcError) as info:
        worker.peer_stub.PushDelta(_delta(node.run_id, (0.5, -0.25)), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert node.loop.apply_inbox() == 0 and node.w.tobytes() == before
    # The same huge values again: refused as from a dropped peer too, not for the values
    # (that refusal alone would never tell the sender to register again).
    with pytest.raises(grpc.RpcError) as info:
        worker.peer_stub.PushDelta(_delta(node.run_id, (0.5, HUGE), seq=3), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "which was dropped" in (info.value.details() or "")
    assert node.inbox.refused == {PEER: 1} and node.w.tobytes() == before


@pytest.fixture
def coord(coordinator_server: CoordinatorServer) -> CoordinatorServer:
    state = coordinator_server.state
    state.roster.register("127.0.0.1:1", threads=2)  # worker 0: the stub calls as it
    state.model.start_model(DIM)
    # As the driver sets it from the run's settings and data (RunConfigs.build).
    state.model.max_delta_value = value_bound(
        model="linear", loss="hinge", lr_schedule="inverse", learning_rate=0.5, lr_decay=0.9,
        l2=1e-5, max_abs_value=1.0, run_threads=4, round_size=10, max_rounds=3)
    return coordinator_server


def test_the_coordinator_refuses_a_members_huge_delta_and_keeps_its_model(
        coord: CoordinatorServer) -> None:
    state = coord.state
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.PushDelta(_delta(state.run_id, (HUGE, 0.5), worker_id=0), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not state.model.model_copy().any() and state.model.deltas_received == 0
    # Its sender is quarantined: counted, dropped, and refused whatever it sends next.
    assert state.roster.quarantine.refused == {0: 1} and state.roster.workers[0].dead
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.PushDelta(_delta(state.run_id, (0.75, 0.5), worker_id=0), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert not state.model.model_copy().any() and state.model.deltas_received == 0
    # The same huge values again: the sender hears that it was dropped (quarantined).
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.PushDelta(_delta(state.run_id, (HUGE, 0.5), worker_id=0, seq=3), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "dropped from the run (quarantined" in (info.value.details() or "")
    assert state.roster.quarantine.refused == {0: 1}
