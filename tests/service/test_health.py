"""Health of a real server: readiness ("" and the named service) apart from liveness."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from hogwild.cluster.coordinator.members import links
from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.transport.health import LIVENESS, HealthReporter, check

from .conftest import CoordinatorServer, WorkerServer, loopback_settings


def test_liveness_serves_while_readiness_does_not(coordinator_server: CoordinatorServer) -> None:
    address = coordinator_server.address
    assert check(address, timeout=5) == "NOT_SERVING"
    assert check(address, timeout=5, service=LIVENESS) == "SERVING"
    coordinator_server.health.set(True)
    assert check(address, timeout=5) == "SERVING"
    assert check(address, timeout=5, service=LIVENESS) == "SERVING"
    coordinator_server.health.set(False)
    assert check(address, timeout=5, service="hogwild.v1.Coordinator") == "NOT_SERVING"
    assert check(address, timeout=5, service=LIVENESS) == "SERVING"


def test_shutdown_keeps_liveness_and_freezes_readiness(worker_server: WorkerServer) -> None:
    health, address = worker_server.health, worker_server.address
    health.set(True)
    health.shutdown()
    assert check(address, timeout=5) == "NOT_SERVING"
    assert check(address, timeout=5, service="hogwild.v1.Worker") == "NOT_SERVING"
    assert check(address, timeout=5, service=LIVENESS) == "SERVING"  # draining, not dead
    health.set(True)  # ignored after shutdown
    assert check(address, timeout=5) == "NOT_SERVING"


def test_a_stalled_watched_loop_fails_liveness_only(coordinator_server: CoordinatorServer) -> None:
    health, address = coordinator_server.health, coordinator_server.address
    health.set(True)
    clock: dict[str, float | None] = {"at": None}
    health.watch(lambda: clock["at"], stall_after=5.0)
    assert not health.check_stall()  # nothing watched yet
    clock["at"] = time.monotonic()
    assert not health.check_stall()
    assert check(address, timeout=5, service=LIVENESS) == "SERVING"
    clock["at"] = time.monotonic() - 10.0  # the loop has not turned for 10 s
    assert health.check_stall()
    assert check(address, timeout=5, service=LIVENESS) == "NOT_SERVING"
    assert check(address, timeout=5) == "SERVING"  # readiness is a separate question
    clock["at"] = time.monotonic()  # it moves again
    assert not health.check_stall()
    assert check(address, timeout=5, service=LIVENESS) == "SERVING"


def test_the_watchdog_thread_notices_a_stall_by_itself(
        coordinator_server: CoordinatorServer) -> None:
    health, address = coordinator_server.health, coordinator_server.address
    stalled_since = time.monotonic() - 100.0
    health.watch(lambda: stalled_since, stall_after=1.0)
    deadline = time.monotonic() + 30.0  # the watchdog looks once a second; the machine is busy
    while check(address, timeout=5, service=LIVENESS) != "NOT_SERVING":
        if time.monotonic() > deadline:
            pytest.fail("liveness still SERVING 30 s after the watched loop stalled")
        time.sleep(0.2)


def test_shutdown_ends_the_watchdog_thread() -> None:
    """A reporter that is shut down stops watching: its thread must not report a stall later
    (into another server's log, or a later test's)."""
    reporter = HealthReporter([])
    reporter.watch(time.monotonic, stall_after=5.0)
    watchdog = reporter._watchdog
    assert watchdog is not None and watchdog.is_alive()
    reporter.shutdown()
    watchdog.join(timeout=10)
    assert not watchdog.is_alive()


def test_the_coordinator_says_when_a_worker_is_slow_to_be_ready(
        coordinator_server: CoordinatorServer, worker_server: WorkerServer,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Taking a worker back waits for its health to say SERVING (it loads its kernels first);
    a wait past READY_NOTE_AFTER is logged with the health's answer, then its end."""
    monkeypatch.setattr(links, "READY_NOTE_AFTER", 0.3)
    settings = loopback_settings(workers=2)
    worker_links = links.WorkerLinks(settings, coordinator_server.state)
    record = WorkerRecord(worker_id=worker_server.node.worker_id,
                          address=worker_server.address, threads=1)
    worker_links.connect(record)
    timer = threading.Timer(1.0, worker_server.health.set, args=(True,))
    timer.start()
    try:
        with caplog.at_level(logging.INFO, logger="hogwild.coordinator"):
            worker_links.wait_ready(record, timeout=20, stopped=lambda: False)
    finally:
        timer.cancel()
        worker_links.channels[record.worker_id].close()
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"waiting for worker {record.worker_id} at {worker_server.address} to be "
               "ready (its health: NOT_SERVING)" in line for line in lines), lines
    assert any(line.startswith(f"worker {record.worker_id} ready after ") for line in lines)
