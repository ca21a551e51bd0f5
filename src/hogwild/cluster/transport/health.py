"""grpc.health.v1 and server reflection: add them to a server, ask a server how it is."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from hogwild.cluster.wire import pb

if TYPE_CHECKING:
    from hogwild.config import Settings

log = logging.getLogger("hogwild.protocol")

COORDINATOR_SERVICE = pb.DESCRIPTOR.services_by_name["Coordinator"].full_name
WORKER_SERVICE = pb.DESCRIPTOR.services_by_name["Worker"].full_name

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNREACHABLE = "UNREACHABLE"
# Health service name for liveness probes: SERVING from the moment the server exists until the
# process exits (loading data, waiting for workers and draining included); NOT_SERVING only
# while a watched loop is stalled. Readiness probes use the overall status ("") instead.
LIVENESS = "liveness"
# How often the watchdog looks at the watched loop's clock.
WATCHDOG_PERIOD = 1.0

Clock = Callable[[], float | None]


class HealthReporter:
    """The health servicer of one server.

    Readiness: every named service and the server as a whole ("") move together between
    NOT_SERVING and SERVING (:meth:`set`). Liveness (:data:`LIVENESS`) is independent: it stays
    SERVING unless a loop registered with :meth:`watch` has not shown progress for its
    ``stall_after`` seconds (a wedged process, which a liveness probe should restart); a server
    whose thread pool or interpreter is wedged does not answer at all, which the probe's own
    deadline catches.
    """

    def __init__(self, services: Iterable[str]) -> None:
        self.servicer = health.HealthServicer()
        self.names = ("", *services)
        self._lock = threading.Lock()
        self._shut = False
        self._stalled = False
        self._watch: tuple[Clock, float] | None = None
        self._watchdog: threading.Thread | None = None
        self._closed = threading.Event()
        self.set(False)
        self.servicer.set(LIVENESS, SERVING)

    def set(self, serving: bool) -> None:
        """Readiness: SERVING or NOT_SERVING for "" and every named service (not liveness)."""
        status = SERVING if serving else NOT_SERVING
        with self._lock:
            if self._shut:
                return
            for name in self.names:
                self.servicer.set(name, status)

    def shutdown(self) -> None:
        """Readiness NOT_SERVING for good (later set() calls are ignored); liveness stays
        SERVING while the process drains, so a probe does not kill a clean shutdown."""
        with self._lock:
            for name in self.names:
                self.servicer.set(name, NOT_SERVING)
            self._shut = True
        self._closed.set()

    def watch(self, last_progress: Clock, stall_after: float) -> None:
        """Turn liveness NOT_SERVING while ``last_progress()`` (a time.monotonic() value, or
        None when nothing is being watched) is more than ``stall_after`` seconds old."""
        with self._lock:
            self._watch = (last_progress, stall_after)
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watchdog_loop,
                                                  name="health-watchdog", daemon=True)
                self._watchdog.start()

    def check_stall(self) -> bool:
        """Evaluate the watched clock now; True if liveness is NOT_SERVING because of it."""
        with self._lock:
            watch = self._watch
        stalled = False
        if watch is not None:
            clock, stall_after = watch
            last = clock()
            stalled = last is not None and time.monotonic() - last > stall_after
        if stalled != self._stalled:
            self._stalled = stalled
            if stalled:
                log.error("liveness: no progress for more than %.0fs; reporting NOT_SERVING",
                          watch[1] if watch else 0.0)
            self.servicer.set(LIVENESS, NOT_SERVING if stalled else SERVING)
        return stalled

    def _watchdog_loop(self) -> None:
        while not self._closed.wait(WATCHDOG_PERIOD):
            self.check_stall()


def stall_seconds(barrier_timeout: float, rpc_timeout: float) -> float:
    """How long a watched loop may go without progress before liveness fails: well above any
    single wait a healthy loop makes (each is bounded by these deadlines)."""
    return max(60.0, 3.0 * (barrier_timeout + rpc_timeout))


def add_health_and_reflection(server: grpc.Server, services: Iterable[str],
                              reflection_on: bool = False) -> HealthReporter:
    """Register grpc.health.v1 (readiness initially NOT_SERVING, liveness SERVING) and, if
    ``reflection_on``, server reflection for ``services`` (off by default: it hands anyone who
    reaches the port a map of the API)."""
    names = tuple(services)
    reporter = HealthReporter(names)
    health_pb2_grpc.add_HealthServicer_to_server(reporter.servicer, server)
    if reflection_on:
        reflection.enable_server_reflection(
            (*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return reporter


def serve_health_only(reporter: HealthReporter, host: str, port: int) -> tuple[grpc.Server, int]:
    """A second, started server answering grpc.health.v1 only, in plain text and without a
    token, on host:port: for probes that cannot present a certificate (Kubernetes' gRPC
    probes). It tells nothing but SERVING / NOT_SERVING."""
    # Here: `hogwild health`, a container's probe every few seconds, imports this module and
    # needs neither (the server side costs it about 30 ms to import).
    from hogwild.cluster.transport.security import Security
    from hogwild.cluster.transport.serving import bind, new_server

    server = new_server(2, "health", Security())
    health_pb2_grpc.add_HealthServicer_to_server(reporter.servicer, server)
    bound = bind(server, host, port, Security(), warn_plain=False)  # plain text on purpose
    server.start()
    return server, bound


def start_serving(server: grpc.Server, reporter: HealthReporter, settings: Settings,
                  role_log: logging.Logger) -> grpc.Server | None:
    """Start ``server``, after the plain-text probe server when ``health_port`` is set (that
    one is returned for the caller to stop), and log on ``role_log`` how both are reached."""
    from hogwild.cluster.transport.security import from_settings  # (as in serve_health_only)

    probes = None
    if settings.health_port is not None:
        probes, probe_port = serve_health_only(reporter, settings.bind_host, settings.health_port)
        role_log.info("health checks (plain text, health only) on port %d", probe_port)
    server.start()
    role_log.info("serving with %s", from_settings(settings).describe())
    return probes


def check(address: str, timeout: float = 3.0, service: str = "",
          channel_factory: Callable[[str], grpc.Channel] = grpc.insecure_channel) -> str:
    """The health status name of ``service`` at ``address`` ("SERVING", "NOT_SERVING",
    "SERVICE_UNKNOWN", ...) or "UNREACHABLE" if no answer came within ``timeout`` seconds.
    ``channel_factory`` opens the channel (a secure one for a TLS server)."""
    with channel_factory(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return UNREACHABLE
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
