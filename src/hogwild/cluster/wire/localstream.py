"""The ReceiveShard stream of ``shipping: local``: where a worker reads its own rows.

The first message carries a :class:`pb.LocalSource` (the file, its size, the split, the
worker's ranges with their digests); the messages carry the feature order (int32,
new_id_of_old, in chunks: it can exceed one message) instead of rows, and the last one the
stream digest, exactly as a shard stream (hogwild.cluster.wire.streams).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.arrays import ArrayAssembler, iter_array_chunks, new_digest
from hogwild.cluster.wire.streams import check_shard_chunk
from hogwild.data.parts.ranges import LocalSpec, Range
from hogwild.data.parts.textspans import DIGEST_CHUNK
from hogwild.errors import InvalidMessage

_ORDER = pb.ShardChunk.FIELD_FEATURE_ORDER
# A feature order longer than this is refused before anything is allocated (int32 ids).
_MAX_FEATURES = 1 << 31
# The longest column mapping (JSON) a plan carries: it travels in the stream's first message,
# beside a chunk of the feature order, within gRPC's 4 MiB a message.
MAX_COLUMNS_JSON = 2 << 20


def local_source(spec: LocalSpec, ranges: list[Range], *, classes: tuple[float, ...] | None,
                 total_rows: int, gzip: bool, shuffle_seed: int) -> pb.LocalSource:
    """The message describing one worker's part of a planned file."""
    return pb.LocalSource(
        path=spec.source, file_size=max(spec.file_size, 0), gzip=gzip,
        n_features=spec.n_features, zero_based=spec.zero_based, total_rows=total_rows,
        split_seed=spec.split_seed, holdout=spec.holdout, classes=list(classes or ()),
        shuffle_seed=shuffle_seed, text_bytes=spec.text_bytes, digest_chunk=DIGEST_CHUNK,
        sampled=spec.sampled, format=spec.format, columns=spec.columns,
        ranges=[pb.LocalRange(first_row=r.first_row, rows=r.rows, byte_start=r.byte_start,
                              byte_end=r.byte_end, first_line=r.first_line,
                              train_rows=r.train_rows, train_nnz=r.train_nnz, digest=r.digest,
                              file=r.file, group=max(r.group, 0), group_row=r.group_row)
                for r in ranges])


def local_chunks(source: pb.LocalSource, order: npt.NDArray[np.int32], run_id: str,
                 worker_id: int, chunk_bytes: int, shard_index: int = 0,
                 shard_count: int = 1) -> Iterator[pb.ShardChunk]:
    """The messages telling one worker what to read: the source on the first, the feature
    order in chunks, then the closing digest."""
    digest = new_digest()
    first = True
    n_rows = sum(r.train_rows for r in source.ranges)
    nnz = sum(r.train_nnz for r in source.ranges)
    for offset, payload, crc, raw in iter_array_chunks(np.asarray(order, dtype=np.int32),
                                                       chunk_bytes):
        digest.update(_ORDER, offset, len(raw), crc)
        chunk = pb.ShardChunk(protocol_version=PROTOCOL_VERSION, run_id=run_id,
                              worker_id=worker_id, field=_ORDER, offset=offset,
                              payload=payload, crc32=crc)
        if first:
            chunk.n_rows, chunk.nnz, chunk.n_features = n_rows, nnz, int(source.n_features)
            chunk.shard_index, chunk.shard_count = shard_index, shard_count
            chunk.local.CopyFrom(source)
            first = False
        yield chunk
    yield pb.ShardChunk(protocol_version=PROTOCOL_VERSION, run_id=run_id, worker_id=worker_id,
                        is_last=True, n_rows=n_rows, nnz=nnz,
                        n_features=int(source.n_features), shard_digest=digest.digest(),
                        shard_index=shard_index, shard_count=shard_count)


@dataclass
class LocalPlan:
    """A received local plan: what to read and the feature order to renumber it with."""

    spec: LocalSpec
    ranges: list[Range]
    classes: tuple[float, ...] | None
    order: npt.NDArray[np.int32]
    shuffle_seed: int
    total_rows: int
    digest: bytes
    bytes_received: int
    shard_index: int
    shard_count: int


def receive_local(chunks: Iterable[pb.ShardChunk], run_id: str | None = None,
                  worker_id: int | None = None) -> LocalPlan:
    """Rebuild a :class:`LocalPlan` from :func:`local_chunks` messages; InvalidMessage on any
    fault (checksums, order, digest, an inconsistent source)."""
    digest = new_digest()
    assembler: ArrayAssembler | None = None
    source: pb.LocalSource | None = None
    closing: pb.ShardChunk | None = None
    received = 0
    index = count = 0
    for chunk in chunks:
        check_shard_chunk(chunk, run_id, worker_id, closed=closing is not None)
        if source is None:
            if not chunk.HasField("local"):
                raise InvalidMessage("local shard stream without its source")
            source = chunk.local
            n = int(source.n_features)
            if not 1 <= n < _MAX_FEATURES:
                raise InvalidMessage(f"local source declares {n} features")
            assembler = ArrayAssembler("feature order", np.int32, n)
            index, count = int(chunk.shard_index), int(chunk.shard_count)
        if chunk.is_last:
            closing = chunk
            continue
        if chunk.field != _ORDER:
            raise InvalidMessage(f"local shard chunk with field {chunk.field}")
        assert assembler is not None
        raw = chunk.payload.data
        assembler.add(int(chunk.offset), chunk.payload, int(chunk.crc32), raw)
        digest.update(chunk.field, int(chunk.offset), len(raw), int(chunk.crc32))
        received += len(raw)
    if source is None or assembler is None or closing is None:
        raise InvalidMessage("local shard stream ended before its closing message")
    if not assembler.complete:
        raise InvalidMessage("local shard stream ended with an incomplete feature order")
    final = digest.digest()
    if final != closing.shard_digest:
        raise InvalidMessage("shard digest mismatch: the stream was altered or reordered")
    return LocalPlan(_spec(source), _ranges(source), _classes(source), assembler.array,
                     int(source.shuffle_seed), int(source.total_rows), final, received,
                     index, count)


def _spec(m: pb.LocalSource) -> LocalSpec:
    if not m.path:
        raise InvalidMessage("local source without a path")
    if not (math.isfinite(m.holdout) and 0.0 <= m.holdout < 1.0):
        raise InvalidMessage(f"local source holdout {m.holdout!r} is not in [0, 1)")
    if m.digest_chunk != DIGEST_CHUNK:
        raise InvalidMessage(f"local source digest chunks of {m.digest_chunk} bytes, this "
                             f"worker checks {DIGEST_CHUNK}")
    if m.format not in ("", "parquet"):
        raise InvalidMessage(f"local source in format {m.format!r}, which this worker does "
                             "not read")
    if (m.format == "parquet") != bool(m.columns) or len(m.columns) > MAX_COLUMNS_JSON:
        raise InvalidMessage("local source with a column mapping that does not match its "
                             "format")
    return LocalSpec(source=m.path, file_size=int(m.file_size), n_features=int(m.n_features),
                     zero_based=bool(m.zero_based), split_seed=int(m.split_seed),
                     holdout=float(m.holdout), text_bytes=int(m.text_bytes),
                     sampled=bool(m.sampled), format=m.format, columns=m.columns)


def _ranges(m: pb.LocalSource) -> list[Range]:
    out = []
    for r in m.ranges:
        # (a sampled plan's ranges know their bytes only: their counts are estimates)
        rows_wrong = not m.sampled and (r.train_rows > r.rows
                                        or r.first_row + r.rows > m.total_rows)
        if r.byte_end < r.byte_start or rows_wrong or len(r.digest) != 16 \
                or (m.format == "parquet") != bool(r.file) or not _relative(r.file):
            raise InvalidMessage(f"local range at row {r.first_row} is inconsistent")
        out.append(Range(int(r.first_row), int(r.rows), int(r.byte_start), int(r.byte_end),
                         int(r.first_line), int(r.train_rows), int(r.train_nnz),
                         bytes(r.digest), file=r.file,
                         group=int(r.group) if r.file else -1, group_row=int(r.group_row)))
    if not out:
        raise InvalidMessage("local source without any range")
    for spans in (sorted((r.first_row, r.first_row + r.rows) for r in out),
                  sorted((r.byte_start, r.byte_end) for r in out)):
        if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
            raise InvalidMessage("local ranges overlap")
    return out


def _relative(name: str) -> bool:
    """Whether a Parquet piece's file stays under the source's directory (or is none)."""
    return not name.startswith("/") and ".." not in name.split("/") and "\\" not in name \
        and "://" not in name


def _classes(m: pb.LocalSource) -> tuple[float, ...] | None:
    if not m.classes:
        return None
    if len(m.classes) != 2 or not all(math.isfinite(c) for c in m.classes) \
            or m.classes[0] >= m.classes[1]:
        raise InvalidMessage(f"local source classes {list(m.classes)} are not two ascending "
                             "label values")
    return (float(m.classes[0]), float(m.classes[1]))
