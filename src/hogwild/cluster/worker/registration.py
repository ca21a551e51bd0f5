"""A worker's registration with its coordinator: the address it advertises, and the retries."""

from __future__ import annotations

import socket
import threading
import time

import grpc

from hogwild.cluster.transport.mismatch import diagnose_tls, explain_token
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import pb, pb_grpc
from hogwild.config import Settings
from hogwild.errors import QUARANTINED_PREFIX, ClusterError, ConfigError, Quarantined

# Answers that no retry changes: the coordinator saw the request and refused it.
_REFUSALS = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED,
             grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
             grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.ALREADY_EXISTS)


def routable_host(coordinator: str) -> str:
    """The local IP address that routes to ``coordinator`` (host:port): what peers can reach."""
    host, _, port = coordinator.rpartition(":")
    host = host.strip("[]")
    if host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, int(port)))  # UDP connect: picks a route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def register_with(settings: Settings, security: Security, request: pb.RegisterRequest,
                  stop: threading.Event) -> pb.RegisterReply | None:
    """The coordinator's answer to ``request``, retried with backoff (the coordinator may
    still be starting) until connect_timeout; None if ``stop`` was set first (SIGTERM).
    ConfigError (at the first failed call) when TLS or the run token differ on the two
    sides, naming the setting; ClusterError if it refused, or could not be reached in
    time."""
    address = settings.coordinator_address
    deadline = time.monotonic() + settings.connect_timeout
    backoff = 0.1
    with security.channel(address) as channel:
        stub = pb_grpc.CoordinatorStub(channel)  # type: ignore[no-untyped-call]
        while True:
            try:
                reply: pb.RegisterReply = stub.Register(request, timeout=settings.rpc_timeout)
                return reply
            except grpc.RpcError as exc:
                code = exc.code()
                details = exc.details() or ""
                if (code == grpc.StatusCode.PERMISSION_DENIED
                        and details.startswith(QUARANTINED_PREFIX)):
                    raise Quarantined(details[len(QUARANTINED_PREFIX):]) from None
                _check_mismatch(settings, address, code, details)
                if code in _REFUSALS:
                    raise ClusterError(f"the coordinator at {address} refused the "
                                       f"registration: {exc.details()}") from None
                if stop.is_set():
                    return None
                if time.monotonic() + backoff > deadline:
                    raise ClusterError(
                        f"cannot reach the coordinator at {address} within connect_timeout="
                        f"{settings.connect_timeout:g}s ({code.name}: {exc.details()})") from None
                stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)


def _check_mismatch(settings: Settings, address: str, code: grpc.StatusCode,
                    details: str) -> None:
    """ConfigError when a failed Register shows settings that can never work together: no
    retry changes them, so the worker says which at once (not after connect_timeout)."""
    server = f"the coordinator at {address}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        line = explain_token(details, settings, server)
        if line is not None:
            raise ConfigError("auth_token_file", line)
    elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
        found = diagnose_tls(address, settings, server)
        if found is not None:
            raise ConfigError(*found)
