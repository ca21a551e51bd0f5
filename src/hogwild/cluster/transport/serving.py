"""Server plumbing shared by the coordinator and the worker: thread pool, exclusive binding."""

from __future__ import annotations

import logging
import socket
from concurrent import futures

import grpc

from hogwild.base.hosts import is_loopback
from hogwild.cluster.transport.malformed import MalformedGate
from hogwild.cluster.transport.security import Security
from hogwild.errors import ClusterError

log = logging.getLogger("hogwild.protocol")

# gRPC's Python servers set SO_REUSEPORT by default, so a second server on a busy port binds
# silently and the kernel splits connections between them.
SERVER_OPTIONS = (("grpc.so_reuseport", 0),)


def new_server(max_workers: int, thread_name_prefix: str, security: Security) -> grpc.Server:
    """A gRPC server on its own thread pool (handlers block on model locks, never on I/O),
    alone on its port, behind the token gate when there is a token. Unparsable request bytes
    get INVALID_ARGUMENT (the gate runs after the token's, so a caller without the token is
    refused before its bytes are read)."""
    return grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                  thread_name_prefix=thread_name_prefix),
                       interceptors=(*security.server_interceptors(), MalformedGate()),
                       options=SERVER_OPTIONS)


def bind(server: grpc.Server, host: str, port: int, security: Security,
         warn_plain: bool = True) -> int:
    """Listen on host:port (0 = any free port) with the process's credentials; the bound
    port, or ClusterError naming the port (in use, or not allowed). Plain text on anything but
    loopback is logged as a warning unless ``warn_plain`` is off."""
    if port:
        _probe_port(host, port)
    target = f"{host}:{port}"
    try:
        if security.tls:
            bound = int(server.add_secure_port(target, security.server_credentials()))
        else:
            bound = int(server.add_insecure_port(target))
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise ClusterError(f"cannot listen on {target}: the port is in use or not allowed")
    if warn_plain and not security.tls and not is_loopback(host):
        log.warning("listening on %s:%d in plain text (%s): anyone who can reach this port can "
                    "read the traffic%s; set tls_ca, tls_cert and tls_key for mutual TLS",
                    host, bound, security.describe(),
                    "" if security.token else " and act as any node")
    return bound


def _probe_port(host: str, port: int) -> None:
    """ClusterError if another socket listens on host:port (checked with a socket of our own
    first, so the failure is one line rather than gRPC's core log)."""
    name = host.strip("[]")
    family = socket.AF_INET6 if ":" in name else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # SO_REUSEADDR as gRPC sets it: a port in TIME_WAIT is free, a listening one is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((name, port))
    except socket.gaierror:
        return  # an unresolvable host: gRPC's own bind reports it
    except OSError as exc:
        raise ClusterError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

