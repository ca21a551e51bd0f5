"""Chunked streams: a CSR shard (coordinator -> worker) and a weight vector (worker -> coordinator).

Each message holds at most ``chunk_bytes`` of payload with its crc32; the stream ends with a
message carrying a digest chaining every chunk's (array, offset, length, crc32) in order, so a
reordered, missing or altered chunk is caught before the arrays are used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.arrays import (
    RAW,
    ArrayAssembler,
    ArrayCodec,
    iter_array_chunks,
    new_digest,
)
from hogwild.cluster.wire.codec import check_version
from hogwild.data.csr import CSRData
from hogwild.errors import DataError, InvalidMessage

_SHARD_FIELDS: tuple[tuple[int, str, type[np.generic]], ...] = (
    (pb.ShardChunk.FIELD_INDPTR, "indptr", np.int64),
    (pb.ShardChunk.FIELD_INDICES, "indices", np.int32),
    (pb.ShardChunk.FIELD_VALUES, "values", np.float32),
    (pb.ShardChunk.FIELD_LABELS, "labels", np.float32),
)
# A shard larger than this is refused before anything is allocated (2^31 non-zeros).
MAX_NNZ = 1 << 31


def shard_chunks(data: CSRData, run_id: str, worker_id: int, chunk_bytes: int,
                 shard_index: int = 0, shard_count: int = 1,
                 codec: ArrayCodec = RAW) -> Iterator[pb.ShardChunk]:
    """The messages that ship ``data`` to one worker: its four arrays in chunks, then a
    closing message with the summary and the whole-shard digest."""
    n_rows = int(data.indptr.shape[0] - 1)
    nnz = int(data.indices.shape[0])
    digest = new_digest()
    first = True
    for code, name, _dtype in _SHARD_FIELDS:
        for offset, payload, crc, raw in iter_array_chunks(getattr(data, name), chunk_bytes,
                                                           codec):
            digest.update(code, offset, len(raw), crc)
            chunk = pb.ShardChunk(
                protocol_version=PROTOCOL_VERSION, run_id=run_id, worker_id=worker_id,
                field=code, offset=offset, payload=payload, crc32=crc)  # type: ignore[arg-type]
            if first:
                chunk.n_rows, chunk.nnz, chunk.n_features = n_rows, nnz, int(data.n_features)
                chunk.shard_index, chunk.shard_count = shard_index, shard_count
                first = False
            yield chunk
    yield pb.ShardChunk(
        protocol_version=PROTOCOL_VERSION, run_id=run_id, worker_id=worker_id, is_last=True,
        n_rows=n_rows, nnz=nnz, n_features=int(data.n_features), shard_digest=digest.digest(),
        shard_index=shard_index, shard_count=shard_count)


@dataclass
class ReceivedShard:
    """A shard rebuilt from its stream, with what the wire carried."""

    data: CSRData
    digest: bytes
    bytes_received: int
    shard_index: int
    shard_count: int


def check_shard_chunk(chunk: pb.ShardChunk, run_id: str | None, worker_id: int | None,
                      closed: bool) -> None:
    """The checks every shard-stream chunk passes: version, run, addressee, and nothing after
    the closing message (InvalidMessage / StaleOrUnknown otherwise)."""
    check_version(chunk.protocol_version, "shard chunk")
    if run_id is not None and chunk.run_id != run_id:
        raise InvalidMessage(f"shard chunk for run {chunk.run_id!r}, not this one")
    if worker_id is not None and chunk.worker_id != worker_id:
        raise InvalidMessage(f"shard chunk for worker {chunk.worker_id}, this is {worker_id}")
    if closed:
        raise InvalidMessage("shard chunk after the closing message")


def receive_shard(chunks: Iterable[pb.ShardChunk], run_id: str | None = None,
                  worker_id: int | None = None) -> ReceivedShard:
    """Rebuild a shard from :func:`shard_chunks` messages; InvalidMessage on any fault
    (checksum, order, sizes, digest, CSR structure), StaleOrUnknown on a version mismatch.

    ``run_id`` / ``worker_id``, when given, must match every chunk.
    """
    assemblers: dict[int, ArrayAssembler] | None = None
    digest = new_digest()
    received = 0
    n_rows = nnz = n_features = 0
    shard_index = shard_count = 0
    closing: pb.ShardChunk | None = None
    for chunk in chunks:
        check_shard_chunk(chunk, run_id, worker_id, closed=closing is not None)
        if assemblers is None:
            n_rows, nnz, n_features = int(chunk.n_rows), int(chunk.nnz), int(chunk.n_features)
            shard_index, shard_count = int(chunk.shard_index), int(chunk.shard_count)
            if nnz > MAX_NNZ or n_rows > MAX_NNZ or n_features < 1:
                raise InvalidMessage(
                    f"shard declares {n_rows} rows, {nnz} non-zeros, {n_features} features")
            lengths = {"indptr": n_rows + 1, "indices": nnz, "values": nnz, "labels": n_rows}
            assemblers = {code: ArrayAssembler(f"shard {name}", dtype, lengths[name])
                          for code, name, dtype in _SHARD_FIELDS}
        if chunk.is_last:
            closing = chunk
            continue
        target = assemblers.get(chunk.field)
        if target is None:
            raise InvalidMessage(f"shard chunk with unknown field {chunk.field}")
        raw = chunk.payload.data  # read once: every read of a bytes field copies it
        target.add(int(chunk.offset), chunk.payload, int(chunk.crc32), raw)
        digest.update(chunk.field, int(chunk.offset), len(raw), int(chunk.crc32))
        received += len(raw)
    if assemblers is None or closing is None:
        raise InvalidMessage("shard stream ended before its closing message")
    if (closing.n_rows, closing.nnz, closing.n_features) != (n_rows, nnz, n_features):
        raise InvalidMessage("shard closing message disagrees with the first chunk's summary")
    missing = [a.name for a in assemblers.values() if not a.complete]
    if missing:
        raise InvalidMessage(f"shard stream ended with incomplete arrays: {', '.join(missing)}")
    final = digest.digest()
    if final != closing.shard_digest:
        raise InvalidMessage("shard digest mismatch: the stream was altered or reordered")
    arrays = {name: assemblers[code].array for code, name, _ in _SHARD_FIELDS}
    data = CSRData(arrays["indptr"], arrays["indices"], arrays["values"], arrays["labels"],
                   n_features)
    try:
        data.validate()
    except DataError as exc:  # structure a kernel must never see
        raise InvalidMessage(f"shard is not a valid CSR matrix: {exc}") from None
    return ReceivedShard(data, final, received, shard_index, shard_count)


# ------------------------------------------------------------------------- weight stream


@dataclass
class FinalState:
    """A worker's final weights and counters, as streamed by GetFinalState."""

    worker_id: int
    weights: npt.NDArray[np.float64]
    rounds: int = 0
    examples: int = 0
    deltas_sent: int = 0
    applied_from: dict[int, int] = field(default_factory=dict)
    acked_by: dict[int, int] = field(default_factory=dict)
    dropped_peers: list[int] = field(default_factory=list)
    acked_by_coordinator: int = 0
    max_staleness: int = 0
    timings: dict[str, tuple[float, int]] = field(default_factory=dict)
    bytes_sent: int = 0
    bytes_to_coordinator: int = 0


def state_chunks(state: FinalState, run_id: str, chunk_bytes: int,
                 codec: ArrayCodec = RAW) -> Iterator[pb.StateChunk]:
    """The weight vector in chunks (counters on the first), then the closing checksum."""
    digest = new_digest()
    dim = int(state.weights.shape[0])
    first = True
    for offset, payload, crc, raw in iter_array_chunks(state.weights, chunk_bytes, codec):
        digest.update(0, offset, len(raw), crc)
        chunk = pb.StateChunk(protocol_version=PROTOCOL_VERSION, run_id=run_id,
                              worker_id=state.worker_id, offset=offset, weights=payload,
                              crc32=crc, dim=dim)
        if first:
            _put_counters(chunk, state)
            first = False
        yield chunk
    yield pb.StateChunk(protocol_version=PROTOCOL_VERSION, run_id=run_id,
                        worker_id=state.worker_id, dim=dim, is_last=True,
                        digest=digest.digest())


def _put_counters(chunk: pb.StateChunk, state: FinalState) -> None:
    chunk.rounds, chunk.examples, chunk.deltas_sent = state.rounds, state.examples, \
        state.deltas_sent
    chunk.applied_from.extend(pb.PeerCount(worker_id=k, count=v)
                              for k, v in sorted(state.applied_from.items()))
    chunk.acked_by.extend(pb.PeerCount(worker_id=k, count=v)
                          for k, v in sorted(state.acked_by.items()))
    chunk.dropped_peers.extend(sorted(state.dropped_peers))
    chunk.acked_by_coordinator = state.acked_by_coordinator
    chunk.max_staleness = state.max_staleness
    chunk.timings.extend(pb.Timing(name=name, seconds=seconds, count=count)
                         for name, (seconds, count) in sorted(state.timings.items()))
    chunk.bytes_sent = state.bytes_sent
    chunk.bytes_to_coordinator = state.bytes_to_coordinator


def receive_state(chunks: Iterable[pb.StateChunk], dim: int,
                  run_id: str | None = None) -> FinalState:
    """Rebuild a :class:`FinalState`; InvalidMessage on any fault (dim, checksums, digest)."""
    assembler = ArrayAssembler("weights", np.float64, dim)
    digest = new_digest()
    state: FinalState | None = None
    closed = False
    for chunk in chunks:
        check_version(chunk.protocol_version, "state chunk")
        if run_id is not None and chunk.run_id != run_id:
            raise InvalidMessage(f"state chunk for run {chunk.run_id!r}, expected {run_id!r}")
        if chunk.dim != dim:
            raise InvalidMessage(f"state chunk declares dim {chunk.dim}, expected {dim}")
        if closed:
            raise InvalidMessage("state chunk after the closing message")
        if chunk.is_last:
            if state is None or chunk.digest != digest.digest():
                raise InvalidMessage("final state digest mismatch")
            closed = True
            continue
        if state is None:
            state = FinalState(
                worker_id=int(chunk.worker_id), weights=assembler.array, rounds=int(chunk.rounds),
                examples=int(chunk.examples), deltas_sent=int(chunk.deltas_sent),
                applied_from={p.worker_id: int(p.count) for p in chunk.applied_from},
                acked_by={p.worker_id: int(p.count) for p in chunk.acked_by},
                dropped_peers=list(chunk.dropped_peers),
                acked_by_coordinator=int(chunk.acked_by_coordinator),
                max_staleness=int(chunk.max_staleness),
                timings={t.name: (float(t.seconds), int(t.count)) for t in chunk.timings},
                bytes_sent=int(chunk.bytes_sent),
                bytes_to_coordinator=int(chunk.bytes_to_coordinator))
        raw = chunk.weights.data
        assembler.add(int(chunk.offset), chunk.weights, int(chunk.crc32), raw)
        digest.update(0, int(chunk.offset), len(raw), int(chunk.crc32))
    if state is None or not closed or not assembler.complete:
        raise InvalidMessage("final state stream ended early")
    return state

