"""Server plumbing shared by the coordinator and the worker: thread pool, binding."""

from __future__ import annotations

from concurrent import futures

import grpc

from hogwild.errors import ClusterError


def new_server(max_workers: int, thread_name_prefix: str) -> grpc.Server:
    """A gRPC server on its own thread pool (handlers block on model locks, never on I/O)."""
    return grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                  thread_name_prefix=thread_name_prefix))


def bind(server: grpc.Server, host: str, port: int) -> int:
    """Listen on host:port (0 = any free port); the bound port, or ClusterError naming it."""
    bound = int(server.add_insecure_port(f"{host}:{port}"))
    if bound == 0:
        raise ClusterError(f"cannot listen on {host}:{port}")
    return bound
