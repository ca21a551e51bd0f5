"""Fixtures that start one real gRPC server in this process on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from hogwild import config
from hogwild.config import Settings
from hogwild.coordinator import RunState
from hogwild.coordinator import create_server as create_coordinator
from hogwild.protocol import pb_grpc
from hogwild.protocol.health import HealthReporter
from hogwild.worker import WorkerNode
from hogwild.worker import create_server as create_worker


def loopback_settings(**overrides: Any) -> Settings:
    base = {"bind_host": "127.0.0.1", "coordinator_port": 0, "worker_port": 0,
            "workers": 1, "rpc_timeout": 5.0, "connect_timeout": 5.0, "barrier_timeout": 2.0}
    base.update(overrides)
    return config.load(None, {}, base)


@dataclass
class CoordinatorServer:
    server: grpc.Server
    port: int
    state: RunState
    health: HealthReporter
    channel: grpc.Channel
    stub: Any

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def coordinator_server() -> Iterator[CoordinatorServer]:
    settings = loopback_settings(workers=2)
    server, port, state, health = create_coordinator(settings)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield CoordinatorServer(server, port, state, health, channel,
                                pb_grpc.CoordinatorStub(channel))
    finally:
        channel.close()
        server.stop(grace=None).wait(5)


@dataclass
class WorkerServer:
    server: grpc.Server
    port: int
    node: WorkerNode
    health: HealthReporter
    channel: grpc.Channel
    stub: Any

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def worker_server(coordinator_server: CoordinatorServer) -> Iterator[WorkerServer]:
    """A worker server registered with the in-process coordinator (not configured yet)."""
    settings = loopback_settings(coordinator_address=coordinator_server.address, workers=2)
    server, port, node, health = create_worker(settings)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        node.register(port)
        yield WorkerServer(server, port, node, health, channel, pb_grpc.WorkerStub(channel))
    finally:
        node.request_stop("test over")
        node.close()
        channel.close()
        server.stop(grace=None).wait(5)
