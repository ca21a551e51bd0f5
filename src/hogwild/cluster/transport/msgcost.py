"""What one delta message costs on this machine: encode, a gRPC call over loopback, decode.

``hogwild simulate --calibrate`` fits the simulator's cost model to it: a fixed cost per
message (``overhead``) and a cost per byte (``1 / bandwidth``), from the median round trip
of real ``PushDelta`` calls of a small and of a dense delta. The server is a real gRPC
server on 127.0.0.1 (a free port) whose handler decodes and checks each delta as a worker's
does, so the figure covers both ends of a message; plain text unless ``measure`` is given
the credentials of a process (then mutual TLS and the run token, as `hogwild run` uses).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from hogwild.cluster.transport.security import Security
from hogwild.cluster.transport.serving import bind, new_server
from hogwild.cluster.wire import pb, pb_grpc
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.model.compression import wire_bytes

ROUND_TRIPS = 30  # per size: the median of this many calls


@dataclass(frozen=True)
class MessageCost:
    """The fitted cost of one message: ``overhead`` seconds plus bytes / ``bandwidth``."""

    overhead: float
    bandwidth: float
    small_seconds: float   # the median call of a small delta
    dense_seconds: float   # ... and of a dense one of ``dense_entries`` entries
    dense_entries: int


class _Sink(pb_grpc.WorkerServicer):
    """Decodes each delta as a worker's intake does, then drops it."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def PushDelta(self, request: pb.Delta, context: Any) -> pb.Ack:
        decode_delta(request, self.dim)
        return pb.Ack()


def measure(dim: int, round_trips: int = ROUND_TRIPS,
            security: Security | None = None) -> MessageCost:
    """Time real PushDelta calls of a 16-entry and a ``dim``-entry delta over loopback
    (plain text, or with ``security``'s credentials on both ends)."""
    security = security if security is not None else Security()
    server = new_server(4, "calibrate", security)
    pb_grpc.add_WorkerServicer_to_server(_Sink(dim), server)  # type: ignore[no-untyped-call]
    port = bind(server, "127.0.0.1", 0, security)
    server.start()
    try:
        with _channel(security, f"127.0.0.1:{port}") as channel:
            push = pb_grpc.WorkerStub(channel).PushDelta  # type: ignore[no-untyped-call]
            rng = np.random.default_rng(0)
            small = _median_call(push, dim, 16, rng, round_trips)
            dense = _median_call(push, dim, dim, rng, round_trips)
    finally:
        server.stop(0)
    # Per byte of payload as the codec sends each (the full one travels dense).
    per_byte = max(0.0, (dense - small) / max(1, wire_bytes(dim, dim) - wire_bytes(16, dim)))
    return MessageCost(overhead=small, bandwidth=1.0 / per_byte if per_byte > 0 else 1e12,
                       small_seconds=small, dense_seconds=dense, dense_entries=dim)


def _channel(security: Security, address: str) -> grpc.Channel:
    return security.channel(address) if security.tls else grpc.insecure_channel(address)


def _median_call(push: Any, dim: int, entries: int, rng: np.random.Generator,
                 round_trips: int) -> float:
    idx = np.sort(rng.choice(dim, size=min(entries, dim), replace=False)).astype(np.int32)
    val = rng.normal(0.0, 1e-3, idx.size).astype(np.float32)
    times = []
    for seq in range(1, round_trips + 2):
        began = time.perf_counter()
        header = DeltaHeader(run_id="calibration", worker_id=0, round=seq, seq=seq, dim=dim)
        for message in encode_delta_parts(header, idx, val):
            push(message, timeout=10.0)
        if seq > 1:  # the first call opens the connection
            times.append(time.perf_counter() - began)
    return statistics.median(times)
