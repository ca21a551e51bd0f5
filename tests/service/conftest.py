"""Fixtures that start one real gRPC server in this process on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from hogwild import config
from hogwild.cluster.coordinator.server import create_server as create_coordinator
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.transport.health import HealthReporter
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import pb_grpc
from hogwild.cluster.worker import WorkerNode
from hogwild.cluster.worker import create_server as create_worker
from hogwild.config import Settings

# The key the test's Configure message gives its fictitious peer (Peer.receive_key).
PEER_KEY = "test-peer-key"


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
    # Calls as worker 0 (the tests register it), with its sender key.
    channel = Security().channel(f"127.0.0.1:{port}", sender_key=state.roster.worker_key(0))
    try:
        yield CoordinatorServer(server, port, state, health, channel,
                                pb_grpc.CoordinatorStub(channel))
    finally:
        # Ends the health watchdog too: a test that watched a clock must not leave a thread
        # that reports a stall into a later test's log.
        health.shutdown()
        channel.close()
        server.stop(grace=None).wait(5)


@dataclass
class WorkerServer:
    server: grpc.Server
    port: int
    node: WorkerNode
    health: HealthReporter
    channel: grpc.Channel
    stub: Any            # calls as the coordinator
    peer_stub: Any       # calls as the peer whose key is PEER_KEY

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def worker_server(coordinator_server: CoordinatorServer) -> Iterator[WorkerServer]:
    """A worker server registered with the in-process coordinator (not configured yet)."""
    settings = loopback_settings(coordinator_address=coordinator_server.address, workers=2)
    server, port, node, health = create_worker(settings)
    server.start()
    address = f"127.0.0.1:{port}"
    channel = peer_channel = None
    try:
        node.register(port)
        channel = Security().channel(address, sender_key=node.coordinator_key)
        peer_channel = Security().channel(address, sender_key=PEER_KEY)
        yield WorkerServer(server, port, node, health, channel, pb_grpc.WorkerStub(channel),
                           pb_grpc.WorkerStub(peer_channel))
    finally:
        node.ending.request_stop("test over")
        health.shutdown()
        node.close()
        for open_channel in (channel, peer_channel):
            if open_channel is not None:
                open_channel.close()
        server.stop(grace=None).wait(5)
