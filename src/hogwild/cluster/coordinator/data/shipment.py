"""Shipping a worker its training rows: a shard streamed in chunks, or (shipping local) the
plan of its ranges, which the worker reads itself; either way checked by digest."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.localstream import local_chunks
from hogwild.cluster.wire.streams import shard_chunks
from hogwild.config import Settings
from hogwild.errors import ClusterError

if TYPE_CHECKING:
    from hogwild.cluster.coordinator.data.localplan import LocalShipping

# Shipping and final-state deadlines grow with the payload (loopback does ~1 GB/s; allow 10 MB/s).
SLOW_LINK_BYTES_PER_S = 10e6
# shipping local: a worker reads and parses its rows within this rate (parsing runs at
# 100+ MB/s per core; gzip inflates at 200+ MB/s).
SLOW_READ_BYTES_PER_S = 5e6
# A shipment failing with one of these found no worker of this run at the address: nothing
# listens (a process that died after it registered), it does not answer in time, it serves
# something else, or the process there is not the registrant (no key, no token of this run).
# Its place can go to another worker. Any other code came from the registered worker itself
# (e.g. its copy of the data differs): another worker would not fare better.
NO_ANSWER = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED, grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
})


class NoAnswer(ClusterError):
    """The registered worker's address did not answer the shipment as that worker."""


@dataclass
class Shipment:
    worker_id: int
    rows: int
    nbytes: int
    seconds: float
    plan_bytes: int = 0  # shipping local: the ranges and feature order sent instead of rows


def ship(stub: Any, record: WorkerRecord, data: Any, count: int, settings: Settings,
         run_id: str, local: LocalShipping | None) -> Shipment:
    """Send worker ``record`` its part ``data`` (a shard, or with ``local`` its ranges) of
    ``count`` through ``stub``; ClusterError if it fails or arrives otherwise than sent
    (NoAnswer when nobody of this run answers at its address)."""
    closing: list[pb.ShardChunk] = []
    wid = record.worker_id
    if local is not None:  # a plan of ranges: the worker reads (and checks) them
        stream = local_chunks(data, local.order, run_id, wid, settings.chunk_bytes, wid, count)
        timeout = settings.rpc_timeout + local.text_bytes(wid) / SLOW_READ_BYTES_PER_S
    else:
        stream = shard_chunks(data, run_id, wid, settings.chunk_bytes, wid, count)
        timeout = settings.rpc_timeout + data.nbytes / SLOW_LINK_BYTES_PER_S

    def chunks() -> Iterator[pb.ShardChunk]:
        for chunk in stream:
            if chunk.is_last:
                closing.append(chunk)
            yield chunk

    t0 = time.perf_counter()
    try:
        ack = stub.ReceiveShard(chunks(), timeout=timeout)
    except grpc.RpcError as exc:
        if exc.code() in NO_ANSWER:
            raise NoAnswer(f"worker {wid} at {record.address} did not answer: "
                           f"{exc.code().name} {exc.details()}") from None
        if local is not None:
            raise ClusterError(f"worker {wid} at {record.address} cannot load its rows: "
                               f"{exc.code().name} {exc.details()}") from None
        raise ClusterError(f"cannot ship shard {wid} to {record.address}: "
                           f"{exc.code().name} {exc.details()}") from None
    seconds = time.perf_counter() - t0
    if not closing or ack.shard_digest != closing[0].shard_digest:
        raise ClusterError(f"worker {wid} received a different shard (digest mismatch)")
    if local is not None:
        if local.plan.sampled:  # the worker counts its ranges' rows: the first count holds
            local.count(wid, int(ack.n_rows), int(ack.nnz))
        rows, nnz = local.train_rows(wid), local.train_nnz(wid)
        if (int(ack.n_rows), int(ack.nnz)) != (rows, nnz):
            was = ("its place's first shipment counted" if local.plan.sampled
                   else "planned")
            raise ClusterError(f"worker {wid} loaded {ack.n_rows} rows with {ack.nnz} "
                               f"non-zeros, {was} {rows} with {nnz}")
        return Shipment(wid, rows, 0, seconds, plan_bytes=int(ack.bytes_received))
    return Shipment(wid, data.n_rows, int(ack.bytes_received), seconds)
