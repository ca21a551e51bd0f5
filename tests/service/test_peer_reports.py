"""A real Coordinator server and a worker's report that a peer is down: the peer is asked first,
and dropped only if it does not answer as itself, serving."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from hogwild.cluster.coordinator.members.peer_reports import PEER_REPORT_COOLDOWN
from hogwild.cluster.coordinator.servicer import PROBE_TIMEOUT
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.worker import create_server as create_worker

from .conftest import CoordinatorServer, WorkerServer, loopback_settings

SECRET = b"the secret of the registered one"


def _report(coord: CoordinatorServer, peer: int = 1, round_: int = 4) -> None:
    """Worker 0 (the test) tells the coordinator that ``peer`` is down."""
    coord.stub.ReportPeerDown(pb.PeerDown(
        protocol_version=PROTOCOL_VERSION, run_id=coord.state.run_id, worker_id=0,
        peer_id=peer, round=round_, reason="unreachable: UNAVAILABLE"), timeout=5)


def _until(what: Callable[[], bool], timeout: float = PROBE_TIMEOUT + 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.02)
    return what()


def _register_reporter(state: RunState) -> None:
    assert state.roster.register("127.0.0.1:1", 1, "host", 10, secret=b"r" * 32) == 0


@pytest.fixture
def live_peer(coordinator_server: CoordinatorServer,
              request: pytest.FixtureRequest) -> tuple[CoordinatorServer, WorkerServer]:
    """Worker 0: the test; worker 1: a real worker server, registered as itself."""
    _register_reporter(coordinator_server.state)
    worker: WorkerServer = request.getfixturevalue("worker_server")
    assert worker.node.worker_id == 1
    worker.health.set(True)  # as `hogwild worker` says once registered
    return coordinator_server, worker


def test_a_report_about_a_live_peer_does_not_drop_it(
        live_peer: tuple[CoordinatorServer, WorkerServer]) -> None:
    coord, _ = live_peer
    state = coord.state
    _report(coord)
    assert _until(lambda: state.roster.reports.refused == 1)
    assert not state.roster.workers[1].dead and state.roster.dead_workers() == []
    # The reporter is not heard about that peer again for a while: refused at once, no probe.
    for _ in range(50):
        _report(coord)
    assert state.roster.reports.refused == 51 and not state.roster.workers[1].dead
    assert len(state.roster.reports.kept) == 1  # the refused ones are counted, not kept
    assert PEER_REPORT_COOLDOWN > 1


def test_a_peer_that_answers_not_serving_is_dropped(
        live_peer: tuple[CoordinatorServer, WorkerServer]) -> None:
    coord, worker = live_peer
    worker.health.set(False)  # as on SIGTERM: it leaves the run
    _report(coord)
    assert _until(lambda: coord.state.roster.workers[1].dead)
    reason = coord.state.roster.workers[1].dead_reason
    assert reason.startswith("reported by worker 0 at round 4: unreachable") and "NOT_SERVING" \
        in reason, reason
    assert coord.state.roster.reports.refused == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_report_about_a_dead_peer_drops_it(coordinator_server: CoordinatorServer) -> None:
    state = coordinator_server.state
    _register_reporter(state)
    state.roster.register(f"127.0.0.1:{_free_port()}", 1, "host", 11, secret=SECRET)  # nobody there
    began = time.monotonic()
    _report(coordinator_server)
    assert _until(lambda: state.roster.workers[1].dead)
    assert time.monotonic() - began < PROBE_TIMEOUT  # refused at once: no deadline waited
    assert "no answer to the coordinator's probe" in state.roster.workers[1].dead_reason
    assert [r.worker_id for r in state.roster.dead_workers()] == [1]


def test_a_report_about_a_frozen_peer_drops_it_after_the_probe_deadline(
        coordinator_server: CoordinatorServer) -> None:
    state = coordinator_server.state
    _register_reporter(state)
    # A frozen process: the kernel takes the connection, nobody answers on it.
    with socket.socket() as frozen:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(8)
        state.roster.register(f"127.0.0.1:{frozen.getsockname()[1]}", 1, "host", 11, secret=SECRET)
        _report(coordinator_server)
        assert _until(lambda: state.roster.workers[1].dead)
    assert "DEADLINE_EXCEEDED" in state.roster.workers[1].dead_reason


@pytest.fixture
def stranger() -> Iterator[int]:
    """A real worker server that never registered: its secret is not the registered one."""
    server, port, node, _ = create_worker(loopback_settings(workers=2))
    server.start()
    try:
        yield port
    finally:
        node.close()
        server.stop(grace=None).wait(5)


def test_another_process_at_the_peers_address_does_not_save_it(
        coordinator_server: CoordinatorServer, stranger: int) -> None:
    state = coordinator_server.state
    _register_reporter(state)
    state.roster.register(f"127.0.0.1:{stranger}", 1, "host", 11, secret=SECRET)
    _report(coordinator_server)
    assert _until(lambda: state.roster.workers[1].dead)
    assert "another process answers" in state.roster.workers[1].dead_reason


def test_a_report_from_a_stranger_is_refused_before_any_probe(
        live_peer: tuple[CoordinatorServer, WorkerServer]) -> None:
    coord, _ = live_peer
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.ReportPeerDown(pb.PeerDown(
            protocol_version=PROTOCOL_VERSION, run_id=coord.state.run_id, worker_id=1,
            peer_id=0, round=1), timeout=5)  # worker 0's key, worker 1's name
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert coord.state.roster.reports.kept == [] and not coord.state.roster.workers[0].dead
