"""Row ranges of one training file for workers that read their own rows (``shipping: local``).

The coordinator streams the file twice and keeps none of its training rows. Pass 1 counts the
data rows. Pass 2 parses block by block and keeps only what a plan needs: the held-out
(validation, test) rows, each feature's document frequency over the training rows, the label
values, and for each range its byte offsets, first line, training rows and non-zeros, and the
blake2b digest of its text. Memory: the held-out rows, O(n_features), a block or two.

* Split: row r (0-based data row of the file) is held out when ``split_u(seed, r)`` (a
  splitmix64 hash mapped to [0, 1)) is below ``test_fraction + val_fraction``: a test row
  below ``test_fraction``, else a validation row. Any node computes it from (seed, r) alone,
  so no list of held-out rows is ever shipped; the shares are those fractions in expectation.
* Ranges: the rows are cut into ``workers x PIECES_PER_WORKER`` ranges of equal row counts at
  row starts; a seeded permutation deals them to the workers, so each worker reads several
  ranges spread over the file (a file sorted by label still gives every worker a mix).
* A worker reads its ranges (:func:`read_ranges`), hashes every byte it reads, parses, drops
  the held-out rows, and refuses with one line if the file's size, a range's digest, its row
  count or its non-zeros differ from the plan: a different file at the same path never trains.
"""

from __future__ import annotations

import logging
import time
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from hogwild.data import _textparse as kp
from hogwild.data._threads import default_threads, run_parallel
from hogwild.data.csr import CSRData
from hogwild.data.stream import BLOCK_BYTES
from hogwild.data.svmlight import parse_text
from hogwild.data.textsource import TextFile, new_digest
from hogwild.errors import DataError, DataFormatError

log = logging.getLogger(__name__)

PIECES_PER_WORKER = 8
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Most label values collected while scanning (more can only be a regression target).
_MAX_LABEL_VALUES = 1001


# ----------------------------------------------------------------------------- the split

def _splitmix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        out: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
        return out


def split_u(seed: int, rows: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The split value in [0, 1) of each data row number (a hash of seed and row)."""
    key = _splitmix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    r = np.asarray(rows, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = _splitmix(r ^ key)
    u: npt.NDArray[np.float64] = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return u


def held_out(seed: int, holdout: float, first_row: int, n: int) -> npt.NDArray[np.bool_]:
    """Which of the rows ``first_row .. first_row + n - 1`` are held out (not trained on)."""
    return split_u(seed, np.arange(first_row, first_row + n, dtype=np.int64)) < holdout


# ----------------------------------------------------------------------------- kernels

@njit(nogil=True, cache=True)
def _row_starts(b: Any, end: int, out: Any) -> Any:  # pragma: no cover - compiled
    """The offset of the line of every data row in ``b[:end]`` (the lines the parser turns
    into rows: not blank, not a comment), into ``out``; returns how many. ``b[end - 1]``
    must be a newline."""
    pos = 0
    row = 0
    while pos < end:
        line = pos
        c = b[pos]
        while c == 32 or c == 9 or c == 13:
            pos += 1
            c = b[pos]
        if c != 10 and c != 35:
            out[row] = line
            row += 1
        while b[pos] != 10:
            pos += 1
        pos += 1
    return row


def _count_rows(block: np.ndarray, threads: int) -> int:
    """Data rows in a line-aligned block (the parser's definition)."""
    n = int(block.shape[0])
    pieces = max(1, min(threads, n >> 20))
    points = [0]
    for i in range(1, pieces):
        points.append(int(kp.next_line_start(block, max(points[-1], n * i // pieces))))
    points.append(n)
    scratch = np.empty(n // 2 + pieces + 1, dtype=np.int64)
    got = run_parallel(kp.row_caps, [(block, points[i], points[i + 1], scratch, points[i] // 2 + i)
                                     for i in range(pieces)])
    return sum(int(rows) for rows, _ in got)


# ----------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Range:
    """Rows ``first_row .. first_row + rows - 1`` of the file, at text bytes
    ``[byte_start, byte_end)``."""

    first_row: int
    rows: int
    byte_start: int
    byte_end: int
    first_line: int
    train_rows: int
    train_nnz: int
    digest: bytes


@dataclass
class FilePlan:
    """What the coordinator learnt from scanning a training file (no training rows kept)."""

    source: str
    file_size: int
    gzip: bool
    text_bytes: int
    total_rows: int
    max_index: int
    ranges: list[Range]
    assignment: list[list[int]]        # worker -> indices into ranges, in file order
    df: npt.NDArray[np.int64]          # document frequency over the training rows
    labels: npt.NDArray[np.float64]    # distinct label values (classifiers), ascending
    label_counts: npt.NDArray[np.int64]  # training rows per value of ``labels``
    positive_train: int                # training rows with a label > 0
    val: CSRData                       # held-out rows, raw labels, file order
    test: CSRData
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def train_rows(self) -> int:
        return sum(r.train_rows for r in self.ranges)

    @property
    def train_nnz(self) -> int:
        return sum(r.train_nnz for r in self.ranges)

    def worker_ranges(self, worker: int) -> list[Range]:
        return [self.ranges[i] for i in self.assignment[worker]]


def range_bounds(total_rows: int, workers: int) -> list[int]:
    """Row numbers where the ranges start, then ``total_rows``: ``workers x k`` ranges of
    equal size (k = PIECES_PER_WORKER, fewer for tiny files)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if total_rows < workers:
        raise DataError(f"{total_rows} data row(s) cannot be divided among {workers} workers")
    count = workers * max(1, min(PIECES_PER_WORKER, total_rows // workers))
    return [total_rows * i // count for i in range(count + 1)]


def deal(n_ranges: int, workers: int, seed: int) -> list[list[int]]:
    """Ranges per worker: a seeded permutation dealt round-robin, each list in file order."""
    order = np.random.default_rng([seed, 0x52414E47]).permutation(n_ranges)
    return [sorted(int(i) for i in order[w::workers]) for w in range(workers)]


class _Parts:
    """Held-out rows collected block by block (raw labels)."""

    def __init__(self) -> None:
        self.lengths: list[np.ndarray] = []
        self.indices: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def add(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, rows: np.ndarray) -> None:
        if rows.shape[0] == 0:
            return
        lengths = indptr[rows + 1] - indptr[rows]
        nnz_mask = np.repeat(np.isin(np.arange(indptr.shape[0] - 1), rows),
                             np.diff(indptr))
        self.lengths.append(lengths)
        self.indices.append(indices[nnz_mask])
        self.values.append(values[nnz_mask])
        self.labels.append(labels[rows])

    def build(self, n_features: int) -> CSRData:
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        return CSRData(indptr,
                       np.concatenate(self.indices) if self.indices else np.zeros(0, np.int32),
                       np.concatenate(self.values) if self.values else np.zeros(0, np.float32),
                       np.concatenate(self.labels).astype(np.float32) if self.labels
                       else np.zeros(0, np.float32), n_features)


def plan_file(source: str, *, workers: int, seed: int, val_fraction: float,
              test_fraction: float, zero_based: bool = False, n_features: int | None = None,
              classifier: bool = True, threads: int | None = None,
              block_bytes: int = BLOCK_BYTES) -> FilePlan:
    """Scan ``source`` (see hogwild.data.textsource) and plan its ranges for ``workers``.

    ``n_features`` (if given) must exceed every id, else DataFormatError names the line; a
    malformed line likewise. DataError if the file changes between the two passes."""
    t0 = time.perf_counter()
    n_threads = max(1, threads if threads is not None else default_threads())
    holdout = val_fraction + test_fraction
    with closing(TextFile(source)) as f:
        name = f.name
        # Pass 1: data rows per block.
        block_rows: list[int] = []
        for block, _ in f.blocks(0, None, block_bytes):
            block_rows.append(_count_rows(block, n_threads))
        total = sum(block_rows)
        if total == 0:
            raise DataError(f"{name}: no data rows")
        bounds = range_bounds(total, workers)
        n_ranges = len(bounds) - 1
        starts = np.full(n_ranges, -1, dtype=np.int64)
        lines = np.zeros(n_ranges, dtype=np.int64)
        train_rows = np.zeros(n_ranges, dtype=np.int64)
        train_nnz = np.zeros(n_ranges, dtype=np.int64)
        digests: list[bytes] = []
        df = np.zeros(0, dtype=np.int64)
        labels = np.zeros(0, dtype=np.float64)
        label_counts = np.zeros(0, dtype=np.int64)
        positive = 0
        max_index = -1
        val, test = _Parts(), _Parts()
        limit = None if n_features is None else int(n_features)
        # Pass 2: parse, keep only what the plan needs.
        row_at = 0
        lines_before = 0
        pos = 0
        current = -1           # the range whose bytes are being hashed
        hasher = new_digest()
        it = iter(block_rows)
        bounds_arr = np.asarray(bounds, dtype=np.int64)
        for block, real in f.blocks(0, None, block_bytes):
            expect = next(it, None)
            try:
                p = parse_text(block, zero_based=zero_based, n_features=limit,
                               threads=n_threads, source=name)
            except DataFormatError as exc:
                message = str(exc)[len(f"{exc.path}:{exc.line}: "):]
                raise DataFormatError(name, exc.line + lines_before, message) from None
            k = int(p.labels.shape[0])
            if expect is None or k != expect:
                raise DataError(f"{name}: the file changed while it was read")
            max_index = max(max_index, p.max_index)
            offsets = np.empty(k, dtype=np.int64)
            if int(_row_starts(block, block.shape[0], offsets)) != k:  # pragma: no cover
                raise DataError(f"{name}: row boundaries disagree with the parser")
            rows = np.arange(row_at, row_at + k, dtype=np.int64)
            u = split_u(seed, rows)
            is_test = u < test_fraction
            is_val = (u < holdout) & ~is_test
            train = ~(is_test | is_val)
            val.add(p.indptr, p.indices, p.values, p.labels, np.flatnonzero(is_val))
            test.add(p.indptr, p.indices, p.values, p.labels, np.flatnonzero(is_test))
            lengths = np.diff(p.indptr)
            kept = p.indices[np.repeat(train, lengths)]
            if kept.shape[0]:
                top = int(kept.max()) + 1
                if top > df.shape[0]:
                    df = np.concatenate([df, np.zeros(top - df.shape[0], dtype=np.int64)])
                df += np.bincount(kept, minlength=df.shape[0])
            piece = np.searchsorted(bounds_arr, rows, side="right") - 1
            train_rows += np.bincount(piece[train], minlength=n_ranges)
            train_nnz += np.bincount(piece[train], weights=lengths[train],
                                     minlength=n_ranges).astype(np.int64)
            # Labels as every CSRData holds them (float32), so that the classes found here
            # match the rows' labels wherever they are compared.
            labels32 = p.labels.astype(np.float32)
            if classifier and labels.shape[0] <= _MAX_LABEL_VALUES:
                labels, label_counts = _merge_labels(labels, label_counts, labels32, train)
            positive += int(np.count_nonzero(labels32[train] > 0))
            # Ranges that start in this block, and the digest of every range's bytes.
            seg = 0
            first = int(np.searchsorted(bounds_arr, row_at, side="left"))
            for q in range(first, n_ranges):
                if bounds[q] >= row_at + k:
                    break
                off = int(offsets[bounds[q] - row_at])
                starts[q] = pos + off
                lines[q] = lines_before + int(kp.count_newlines(block, off)) + 1
                if current >= 0:
                    hasher.update(block[seg:off].data)
                    digests.append(hasher.digest())
                    hasher = new_digest()
                current, seg = q, off
            if current >= 0:
                hasher.update(block[seg:real].data)
            row_at += k
            lines_before += int(np.count_nonzero(block == 10))
            pos += real
        if next(it, None) is not None or row_at != total:
            raise DataError(f"{name}: the file changed while it was read")
        digests.append(hasher.digest())
        ends = np.append(starts[1:], pos)
        ranges = [Range(bounds[q], bounds[q + 1] - bounds[q], int(starts[q]), int(ends[q]),
                        int(lines[q]), int(train_rows[q]), int(train_nnz[q]), digests[q])
                  for q in range(n_ranges)]
        width = max_index + 1 if limit is None else limit
        plan = FilePlan(
            source=name, file_size=f.size, gzip=f.gzip, text_bytes=pos, total_rows=total,
            max_index=max_index, ranges=ranges, assignment=deal(n_ranges, workers, seed),
            df=df, labels=labels, label_counts=label_counts, positive_train=positive,
            val=val.build(width), test=test.build(width))
    plan.seconds = time.perf_counter() - t0
    log.info("%s: planned %d ranges over %s rows (%s text bytes) in %.2fs", name, n_ranges,
             f"{total:,}", f"{pos:,}", plan.seconds)
    return plan


def _merge_labels(values: np.ndarray, counts: np.ndarray, labels: np.ndarray,
                  train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct label values of every row so far, with their training-row counts."""
    new, inverse = np.unique(labels.astype(np.float64), return_inverse=True)
    new_counts = np.bincount(inverse[train], minlength=new.shape[0]).astype(np.int64)
    merged = np.union1d(values, new)
    out = np.zeros(merged.shape[0], dtype=np.int64)
    out[np.searchsorted(merged, values)] += counts
    out[np.searchsorted(merged, new)] += new_counts
    return merged, out


# ----------------------------------------------------------------------------- a worker's rows

@dataclass(frozen=True)
class LocalSpec:
    """How a worker reads its rows: the file as planned and the split."""

    source: str
    file_size: int
    n_features: int
    zero_based: bool
    split_seed: int
    holdout: float


def read_ranges(spec: LocalSpec, ranges: list[Range], *, threads: int | None = None,
                block_bytes: int = BLOCK_BYTES) -> CSRData:
    """The training rows of ``ranges`` (held-out rows dropped), in file order, with the raw
    labels. DataError (one line) if the file is not the one planned: another size, or a
    range whose digest, row count or non-zeros differ; DataFormatError names file and line."""
    n_threads = max(1, threads if threads is not None else default_threads())
    parts = _Parts()
    with closing(TextFile(spec.source)) as f:
        name = f.name
        # A size of 0 in the plan, or -1 here: a server that does not say (the digests and
        # counts below still decide).
        if spec.file_size > 0 and f.size >= 0 and f.size != spec.file_size:
            raise DataError(f"{name} differs from the file the coordinator planned with: "
                            f"{f.size:,} bytes here, {spec.file_size:,} there (shipping: local "
                            "needs every node to read the same file)")
        for r in sorted(ranges, key=lambda x: x.byte_start):
            digest = new_digest()
            row_at = 0
            line = r.first_line
            for block, _ in f.blocks(r.byte_start, r.byte_end, block_bytes, digest):
                try:
                    p = parse_text(block, zero_based=spec.zero_based,
                                   n_features=spec.n_features, threads=n_threads, source=name)
                except DataFormatError as exc:
                    message = str(exc)[len(f"{exc.path}:{exc.line}: "):]
                    raise DataFormatError(name, exc.line + line - 1, message) from None
                k = int(p.labels.shape[0])
                keep = np.flatnonzero(~held_out(spec.split_seed, spec.holdout,
                                                r.first_row + row_at, k))
                parts.add(p.indptr, p.indices, p.values, p.labels, keep)
                row_at += k
                line += int(np.count_nonzero(block == 10))
            got_digest = digest.digest()
            if got_digest != r.digest or row_at != r.rows:
                raise DataError(
                    f"{name} differs from the file the coordinator planned with: rows "
                    f"{r.first_row:,}..{r.first_row + r.rows - 1:,} (bytes {r.byte_start:,}.."
                    f"{r.byte_end:,}) read {row_at:,} row(s) with digest {got_digest.hex()[:12]}, "
                    f"planned {r.rows:,} with {r.digest.hex()[:12]} (shipping: local needs every "
                    "node to read the same file)")
    data = parts.build(spec.n_features)
    planned_rows = sum(r.train_rows for r in ranges)
    planned_nnz = sum(r.train_nnz for r in ranges)
    if data.n_rows != planned_rows or data.nnz != planned_nnz:
        raise DataError(f"{name}: read {data.n_rows:,} training rows with {data.nnz:,} "
                        f"non-zeros, planned {planned_rows:,} with {planned_nnz:,} (another "
                        "split seed or file?)")
    return data
