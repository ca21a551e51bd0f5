"""Is the coordinator still there? A worker asks while it has nothing else to hear from it."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# A coordinator that refuses connections for this long is gone (its process ended); one that
# answers late is slow, not gone, and the RPC deadlines deal with it.
GONE_AFTER = 3.0
POLL_EVERY = 0.5


class CoordinatorWatch:
    """Health checks on one channel: how long the coordinator has refused every connection."""

    def __init__(self, address: str, timeout: float = 1.0,
                 open_channel: Callable[[str], grpc.Channel] = grpc.insecure_channel) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = open_channel(address)  # the node's credentials (TLS)
        self._stub = health_pb2_grpc.HealthStub(self._channel)
        self._refused_since: float | None = None
        self._last_poll = 0.0

    def poll(self) -> float:
        """Ask once (at most every POLL_EVERY seconds); seconds of refusal so far (0 = alive)."""
        now = time.monotonic()
        if now - self._last_poll >= POLL_EVERY:
            self._last_poll = now
            try:
                self._stub.Check(health_pb2.HealthCheckRequest(service=""),
                                 timeout=self.timeout)
                self._refused_since = None
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    if self._refused_since is None:
                        self._refused_since = now
                else:  # it answered something: the process is there
                    self._refused_since = None
        return 0.0 if self._refused_since is None else time.monotonic() - self._refused_since

    def gone(self, after: float = GONE_AFTER) -> bool:
        """True once the coordinator has refused connections for ``after`` seconds."""
        return self.poll() >= after

    def close(self) -> None:
        self._channel.close()
