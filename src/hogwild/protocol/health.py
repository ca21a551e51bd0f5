"""grpc.health.v1 and server reflection: add them to a server, ask a server how it is."""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from hogwild.protocol import pb

COORDINATOR_SERVICE = pb.DESCRIPTOR.services_by_name["Coordinator"].full_name
WORKER_SERVICE = pb.DESCRIPTOR.services_by_name["Worker"].full_name

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNREACHABLE = "UNREACHABLE"


class HealthReporter:
    """The health servicer of one server: every named service and the server as a whole ("")
    move together between NOT_SERVING and SERVING."""

    def __init__(self, services: Iterable[str]) -> None:
        self.servicer = health.HealthServicer()
        self.names = ("", *services)
        self.set(False)

    def set(self, serving: bool) -> None:
        status = SERVING if serving else NOT_SERVING
        for name in self.names:
            self.servicer.set(name, status)

    def shutdown(self) -> None:
        """NOT_SERVING for good: watchers are told, later set() calls are ignored."""
        self.servicer.enter_graceful_shutdown()


def add_health_and_reflection(server: grpc.Server, services: Iterable[str]) -> HealthReporter:
    """Register grpc.health.v1 (initially NOT_SERVING) and reflection for ``services``."""
    names = tuple(services)
    reporter = HealthReporter(names)
    health_pb2_grpc.add_HealthServicer_to_server(reporter.servicer, server)
    reflection.enable_server_reflection(
        (*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return reporter


def check(address: str, timeout: float = 3.0, service: str = "") -> str:
    """The health status name of ``service`` at ``address`` ("SERVING", "NOT_SERVING",
    "SERVICE_UNKNOWN", ...) or "UNREACHABLE" if no answer came within ``timeout`` seconds."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return UNREACHABLE
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
