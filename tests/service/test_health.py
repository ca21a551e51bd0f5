"""Health of a real server: readiness ("" and the named service) apart from liveness."""

from __future__ import annotations

import time

import pytest

from hogwild.protocol.health import LIVENESS, check

from .conftest import CoordinatorServer, WorkerServer


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
