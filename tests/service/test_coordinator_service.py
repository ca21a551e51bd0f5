"""A real Coordinator server: bad deltas get the right status code and leave the model untouched."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from hogwild.cluster.transport.health import check
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.wire.codec import DeltaHeader, encode_delta

from .conftest import CoordinatorServer, WorkerServer

DIM = 501
SECRET = b"a test worker's secret"


@pytest.fixture
def coord(coordinator_server: CoordinatorServer) -> CoordinatorServer:
    coordinator_server.state.roster.register("127.0.0.1:1", threads=1)  # worker 0
    coordinator_server.state.model.start_model(DIM)
    return coordinator_server


def _delta(run_id: str, worker_id: int = 0, seq: int = 1, round_: int = 1) -> pb.Delta:
    idx = np.array([0, 7, 99, DIM - 1], dtype=np.int32)
    val = np.array([0.5, -1.25, 2.0, 0.125], dtype=np.float32)
    return encode_delta(DeltaHeader(run_id, worker_id, round=round_, seq=seq, dim=DIM), idx,
                        val)


def _weights(coord: CoordinatorServer) -> bytes:
    return coord.state.model.model_copy().tobytes()


def _expect(coord: CoordinatorServer, message: pb.Delta, code: grpc.StatusCode) -> None:
    before = _weights(coord)
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.PushDelta(message, timeout=5)
    assert info.value.code() == code, info.value.details()
    assert _weights(coord) == before, "a rejected delta changed the model"
    assert coord.state.model.deltas_received == 0


def test_valid_delta_is_applied(coord: CoordinatorServer) -> None:
    ack = coord.stub.PushDelta(_delta(coord.state.run_id), timeout=5)
    assert not ack.duplicate and ack.run_id == coord.state.run_id
    w = coord.state.model.model_copy()
    assert w[7] == -1.25 and w[DIM - 1] == 0.125 and w[1] == 0.0
    assert coord.state.model.deltas_received == 1


def test_index_at_dim_is_invalid_argument(coord: CoordinatorServer) -> None:
    m = _delta(coord.state.run_id)
    idx = np.frombuffer(m.indices.data, np.int32).copy()
    idx[-1] = DIM
    m.indices.data = idx.tobytes()
    _expect(coord, m, grpc.StatusCode.INVALID_ARGUMENT)


def test_length_mismatch_is_invalid_argument(coord: CoordinatorServer) -> None:
    m = _delta(coord.state.run_id)
    m.values.data = m.values.data[:-4]
    m.values.length -= 1
    _expect(coord, m, grpc.StatusCode.INVALID_ARGUMENT)


def test_nan_is_invalid_argument(coord: CoordinatorServer) -> None:
    m = _delta(coord.state.run_id)
    val = np.frombuffer(m.values.data, np.float32).copy()
    val[1] = np.nan
    m.values.data = val.tobytes()
    _expect(coord, m, grpc.StatusCode.INVALID_ARGUMENT)


def test_unknown_run_is_failed_precondition(coord: CoordinatorServer) -> None:
    _expect(coord, _delta("not-this-run"), grpc.StatusCode.FAILED_PRECONDITION)


def test_unknown_worker_is_failed_precondition(coord: CoordinatorServer) -> None:
    _expect(coord, _delta(coord.state.run_id, worker_id=5), grpc.StatusCode.FAILED_PRECONDITION)


def test_wrong_protocol_version_is_failed_precondition(coord: CoordinatorServer) -> None:
    m = _delta(coord.state.run_id)
    m.protocol_version = PROTOCOL_VERSION + 1
    _expect(coord, m, grpc.StatusCode.FAILED_PRECONDITION)


def test_duplicate_seq_is_acknowledged_but_applied_once(coord: CoordinatorServer) -> None:
    m = _delta(coord.state.run_id, seq=3)
    first = coord.stub.PushDelta(m, timeout=5)
    once = _weights(coord)
    second = coord.stub.PushDelta(m, timeout=5)
    assert not first.duplicate and second.duplicate
    assert _weights(coord) == once
    assert coord.state.model.deltas_received == 1 and coord.state.model.duplicates == 1
    # The next seq from the same worker is applied again.
    coord.stub.PushDelta(_delta(coord.state.run_id, seq=4), timeout=5)
    assert coord.state.model.model_copy()[7] == -2.5


def test_registration_is_idempotent_and_bounded(coord: CoordinatorServer) -> None:
    def register(address: str) -> pb.RegisterReply:
        return coord.stub.Register(pb.RegisterRequest(
            protocol_version=PROTOCOL_VERSION, address=address, threads=2,
            process_secret=SECRET), timeout=5)

    a = register("127.0.0.1:2")
    assert register("127.0.0.1:2").worker_id == a.worker_id == 1
    assert a.run_id == coord.state.run_id and a.n_workers == 2
    with pytest.raises(grpc.RpcError) as info:
        register("127.0.0.1:3")  # the run wants 2 workers and has them
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_peer_report_names_a_known_worker(coord: CoordinatorServer) -> None:
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.ReportPeerDown(pb.PeerDown(
            protocol_version=PROTOCOL_VERSION, run_id=coord.state.run_id, worker_id=0,
            peer_id=9, round=1), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert not coord.state.roster.reports.kept


def test_health_follows_the_reporter(coord: CoordinatorServer) -> None:
    assert check(coord.address, timeout=10) == "NOT_SERVING"
    coord.health.set(True)
    assert check(coord.address, timeout=10) == "SERVING"
    assert check(coord.address, timeout=10, service="hogwild.v1.Coordinator") == "SERVING"
    coord.health.set(False)
    assert check(coord.address, timeout=10) == "NOT_SERVING"


def test_health_of_nothing_is_unreachable() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert check(f"127.0.0.1:{port}", timeout=1) == "UNREACHABLE"


def test_missing_registrations_are_named_after_the_deadline(
        coordinator_server: CoordinatorServer) -> None:
    from hogwild.errors import ClusterError

    coordinator_server.state.roster.register("127.0.0.1:9", threads=1)
    with pytest.raises(ClusterError, match=r"only 1 of 2 workers.*1 missing.*127\.0\.0\.1:9"):
        coordinator_server.state.roster.wait_for_workers(0.2)


@pytest.mark.parametrize(("fields", "why"), [
    ({"address": "no-port"}, "address must be host:port"),
    ({"address": "127.0.0.1:99999"}, "address must be host:port"),
    ({"address": "h" * 100_000 + ":1"}, "address must be host:port"),
    ({"address": "127.0.0.1:5", "hostname": "x" * 1_000_000}, "hostname of 1000000"),
    ({"address": "127.0.0.1:5", "threads": 1 << 20}, "threads, at most 256"),
    ({"address": "127.0.0.1:5", "process_secret": b""}, "a process secret of 16..64 bytes"),
    ({"address": "127.0.0.1:5", "process_secret": b"x" * 65}, "a process secret of 16..64"),
])
def test_a_malformed_registration_is_refused_and_nothing_is_kept(
        coord: CoordinatorServer, fields: dict[str, object], why: str) -> None:
    before = dict(coord.state.roster.workers)
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.Register(pb.RegisterRequest(protocol_version=PROTOCOL_VERSION,
                                               **{"process_secret": SECRET, **fields}),
                            timeout=10)  # type: ignore[arg-type]
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert why in (info.value.details() or "")
    assert len(info.value.details() or "") < 300  # the offending value is not echoed whole
    assert coord.state.roster.workers == before


def test_a_registration_with_a_workers_host_and_pid_but_not_its_secret_gets_nothing(
        worker_server: WorkerServer) -> None:
    """Host, pid and address are anyone's for the asking (Identify); a registration that
    copies them gets neither the worker's id nor its keys, and the worker keeps its place."""
    node = worker_server.node
    stub = pb_grpc.CoordinatorStub(Security().channel(node.settings.coordinator_address))
    who = pb_grpc.WorkerStub(Security().channel(worker_server.address)).Identify(
        pb.IdentifyRequest(protocol_version=PROTOCOL_VERSION), timeout=5)
    assert who.secret_digest and who.address == worker_server.address
    forged = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address=who.address,
                                hostname=who.hostname, pid=who.pid, threads=1,
                                process_secret=b"not the worker's secret!")
    with pytest.raises(grpc.RpcError) as info:
        stub.Register(forged, timeout=10)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "still answers there" in (info.value.details() or "")
    assert node.worker_key not in (info.value.details() or "")
    # The worker itself (its own secret) registering again is the same worker.
    again = stub.Register(pb.RegisterRequest(
        protocol_version=PROTOCOL_VERSION, address=who.address, hostname=who.hostname,
        pid=who.pid, threads=1, process_secret=node.process_secret), timeout=10)
    assert again.worker_id == node.worker_id and again.worker_key == node.worker_key


@pytest.mark.parametrize("field", ["round", "examples", "max_staleness"])
def test_a_progress_report_with_an_absurd_count_is_refused_and_kept_nowhere(
        coord: CoordinatorServer, field: str) -> None:
    """A round of 2**64-1 would sit in the checkpoint and break every resume from it."""
    record = coord.state.roster.workers[0]
    before = (record.round, record.examples, record.max_staleness)
    report = pb.Progress(protocol_version=PROTOCOL_VERSION, run_id=coord.state.run_id,
                         worker_id=0, round=3, examples=30, train_loss=0.5)
    setattr(report, field, (1 << 64) - 1)
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.ReportProgress(report, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (record.round, record.examples, record.max_staleness) == before
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.PushDelta(_delta(coord.state.run_id, seq=1, round_=(1 << 64) - 1), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert coord.state.model.deltas_received == 0
