"""A channel opened to a peer that restarted at the same address reaches it at once."""

from __future__ import annotations

import socket
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hogwild.cluster.transport.health import LIVENESS, HealthReporter, serve_health_only
from hogwild.cluster.transport.security import Security


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check(channel: grpc.Channel, timeout: float) -> grpc.StatusCode:
    try:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=LIVENESS), timeout=timeout)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_a_restarted_peer_is_reached_without_the_old_channels_backoff() -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    security = Security()
    old = security.channel(address)
    # The peer is dead for a while: the old channel's connection attempts fail and back off.
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:
        assert _check(old, 0.5) == grpc.StatusCode.UNAVAILABLE
        time.sleep(0.2)
    reporter = HealthReporter([])
    server, _ = serve_health_only(reporter, "127.0.0.1", port)
    try:
        # A destination opened for the restarted peer (PeerJoined) must not inherit that
        # backoff: before, it shared the old connection and failed fast for seconds, so
        # the peer was dropped again as unreachable.
        fresh = security.channel(address)
        began = time.monotonic()
        code = _check(fresh, 1.5)
        while code == grpc.StatusCode.UNAVAILABLE and time.monotonic() - began < 1.5:
            time.sleep(0.05)
            code = _check(fresh, 1.5)
        assert code == grpc.StatusCode.OK, f"{code} after {time.monotonic() - began:.2f}s"
        fresh.close()
    finally:
        old.close()
        server.stop(0)
