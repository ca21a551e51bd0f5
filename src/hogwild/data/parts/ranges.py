"""Row ranges of one training file for workers that read their own rows (``shipping: local``).

The coordinator streams the file once, block by block, and keeps none of its training rows:
only the held-out (validation, test) rows, each feature's document frequency over the training
rows, the label values, where every G-th row starts (with its line and the training rows and
non-zeros before it; G doubles to keep at most a few 65,536 of these), and an xxh3-128 digest
per MiB of text. Memory: the held-out rows, O(n_features), a block or two, 16 bytes per MiB.

* Split: row r (0-based data row of the file) is held out when ``split_u(seed, r)`` (a
  splitmix64 hash mapped to [0, 1)) is below ``test_fraction + val_fraction``: a test row
  below ``test_fraction``, else a validation row. Any node computes it from (seed, r) alone,
  so no list of held-out rows is ever shipped; the shares are those fractions in expectation.
* Ranges: once the row count is known, the rows are cut into ``workers x PIECES_PER_WORKER``
  ranges of equal row counts (to within G rows) at row starts; a seeded permutation deals
  them to the workers, so each worker reads several ranges spread over the file (a file
  sorted by label still gives every worker a mix).
* A worker reads its ranges (:func:`read_ranges`), hashing them and the bytes around them up
  to the digest chunks' edges, parses, drops the held-out rows, and refuses with one line if
  the file's size, a range's digest, its row count or its non-zeros differ from the plan: a
  different file at the same path never trains.

A file too large to scan is planned from a bounded sample instead (data/parts/sampleplan.py): its
ranges are byte ranges, read whole, and checked by the text around their ends.
"""

from __future__ import annotations

import itertools
import logging
import time
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.base.jit import njit
from hogwild.data._threads import KernelThreads, Runner, default_threads
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.memory import PER_ID, check_fits, ids_blamed, physical_memory
from hogwild.data.formats.svmlight import parse_text
from hogwild.data.formats.textblocks import BLOCK_BYTES
from hogwild.data.formats.textsource import TextFile
from hogwild.data.parts.rowsinks import FilledRows, RowParts, RowSink
from hogwild.data.parts.textspans import (
    DIGEST_CHUNK,
    ChunkDigests,
    chunk_span,
    ends_digest,
    parsed_span,
    range_digest,
)
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.errors import DataError, DataFormatError

log = logging.getLogger(__name__)

PIECES_PER_WORKER = 8
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Most label values collected while scanning (more can only be a regression target).
MAX_LABEL_VALUES = 1001


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
def _data_lines(b: Any, starts: Any, out: Any, lines: Any) -> int:  # pragma: no cover
    """Of the lines starting at ``starts`` in ``b``, those the parser turns into rows (not
    blank, not a comment): their offsets into ``out``, their 0-based line numbers in ``b`` into
    ``lines``; returns how many. Each line must end with a newline."""
    row = 0
    for i in range(starts.shape[0]):
        pos = starts[i]
        c = b[pos]
        while c == 32 or c == 9 or c == 13:
            pos += 1
            c = b[pos]
        if c != 10 and c != 35:
            out[row] = starts[i]
            lines[row] = i
            row += 1
    return row


def _row_starts(block: npt.NDArray[np.uint8], rows: int
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """(offset, 0-based line) of each of the ``rows`` data rows of ``block`` (whole lines, the
    last ending with a newline), and its number of lines. The newlines are found by numpy's
    vectorised compare (3-4 GB/s here); a compiled loop then looks at each line's first bytes
    only: a byte-by-byte loop over the text cost a fifth of the scan."""
    newlines = np.flatnonzero(block == 10)
    starts = np.empty(newlines.shape[0], dtype=np.int64)
    if starts.shape[0]:
        starts[0] = 0
        starts[1:] = newlines[:-1] + 1
    offsets = np.empty(rows, dtype=np.int64)
    lines = np.empty(rows, dtype=np.int64)
    if int(_data_lines(block, starts, offsets, lines)) != rows:  # pragma: no cover
        raise DataError("row boundaries disagree with the parser")
    return offsets, lines, int(newlines.shape[0])


# ----------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Range:
    """Rows ``first_row .. first_row + rows - 1`` of the file, at text bytes
    ``[byte_start, byte_end)``. In a plan from a sample (data/parts/sampleplan.py) only the bytes
    are known: the row fields are 0, the training counts estimates, and ``digest`` is that of
    the text around the range's two ends (textspans.ends_digest)."""

    first_row: int
    rows: int
    byte_start: int
    byte_end: int
    first_line: int
    train_rows: int
    train_nnz: int
    digest: bytes
    # Parquet (data/parts/rowgroups.py): rows ``group_row ..`` of row group ``group`` of
    # ``file`` (under the data set's root); ``digest``: the group's layout's.
    file: str = ""
    group: int = -1
    group_row: int = 0


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
    label_note: str | None = None      # a label float32 does not keep (see data.labelcheck)
    # A plan from a sample: the held-out rows are those of these text windows, read by the
    # coordinator alone (no worker range holds them); the counts are estimates.
    sampled: bool = False
    windows: list[tuple[int, int]] = field(default_factory=list)
    sample_rows: int = 0               # data rows the coordinator read (the windows')

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


class _Checkpoints:
    """Where every G-th data row starts (G doubles whenever more than ``cap`` are kept), with
    the line number and the training rows and non-zeros before it: the candidate range
    boundaries of a file whose row count is not known until its end."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.stride = 1
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.count = 0

    def add(self, rows: np.ndarray, offsets: np.ndarray, lines: np.ndarray,
            train_before: np.ndarray, nnz_before: np.ndarray) -> None:
        """Offer every row of a block (each array one entry per row); keeps those on stride."""
        sel = np.flatnonzero(rows % self.stride == 0)
        if sel.shape[0]:
            self.parts.append((rows[sel], offsets[sel], lines[sel], train_before[sel],
                               nnz_before[sel]))
            self.count += int(sel.shape[0])
        if self.count > self.cap:
            merged = self.arrays()
            while self.count > self.cap:
                self.stride *= 2
                self.count = int(np.count_nonzero(merged[0] % self.stride == 0))
            keep = merged[0] % self.stride == 0
            self.parts = [tuple(a[keep] for a in merged)]

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(row, byte offset, line, training rows before, non-zeros before), row ascending."""
        if not self.parts:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(5))
        return tuple(np.concatenate([p[i] for p in self.parts]) for i in range(5))


def plan_file(source: str, *, workers: int, seed: int, val_fraction: float,
              test_fraction: float, zero_based: bool = False, n_features: int | None = None,
              classifier: bool = True, threads: int | None = None,
              block_bytes: int = BLOCK_BYTES, checkpoint_cap: int | None = None,
              bytes_per_id: int = 0) -> FilePlan:
    """Scan ``source`` (see hogwild.data.formats.textsource) once and plan its ranges for ``workers``.

    ``n_features`` (if given) must exceed every id, else DataFormatError names the line; a
    malformed line likewise. Range boundaries fall on every G-th row (G = 1 up to
    ``checkpoint_cap`` rows, default 64 per range and at least 65,536; then a power of two),
    so ranges are equal to within G rows. ``bytes_per_id``: what the job will keep per feature
    id besides the plan's own counts; an id whose arrays exceed the RAM is refused as soon as
    it is read (DataError naming it), before anything that large is allocated."""
    t0 = time.perf_counter()
    ram = physical_memory()
    # The counts grow by concatenation (old and new side by side): 16 bytes per id at most.
    per_id = 16 + max(0, bytes_per_id)
    n_threads = max(1, threads if threads is not None else default_threads())
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    holdout = val_fraction + test_fraction
    cap = checkpoint_cap if checkpoint_cap is not None else max(
        1 << 16, 64 * workers * PIECES_PER_WORKER)
    with closing(TextFile(source)) as f, KernelThreads(n_threads, "parse") as pool:
        name = f.name
        checkpoints = _Checkpoints(cap)
        chunks = ChunkDigests()
        df = np.zeros(0, dtype=np.int64)
        labels = np.zeros(0, dtype=np.float64)
        label_counts = np.zeros(0, dtype=np.int64)
        positive = 0
        max_index = -1
        watch = LabelWatch()
        val, test = RowParts(), RowParts()
        limit = None if n_features is None else int(n_features)
        row_at = lines_before = pos = 0
        train_total = nnz_total = 0
        for block, real in f.blocks(0, None, block_bytes):
            chunks.update(block[:real].data)
            try:
                p = parse_text(block, zero_based=zero_based, n_features=limit,
                               threads=n_threads, source=name, run=pool.run)
            except DataFormatError as exc:
                message = str(exc)[len(f"{exc.path}:{exc.line}: "):]
                raise DataFormatError(name, exc.line + lines_before, message) from None
            k = int(p.labels.shape[0])
            max_index = max(max_index, p.max_index)
            watch.add(p.labels, row_at)
            offsets, line_of, newlines = _row_starts(block, k)
            rows = np.arange(row_at, row_at + k, dtype=np.int64)
            u = split_u(seed, rows)
            is_test = u < test_fraction
            is_val = (u < holdout) & ~is_test
            train = ~(is_test | is_val)
            val.add(p.indptr, p.indices, p.values, p.labels, is_val)
            test.add(p.indptr, p.indices, p.values, p.labels, is_test)
            lengths = np.diff(p.indptr)
            kept = p.indices[np.repeat(train, lengths)]
            if p.max_index >= df.shape[0]:
                # A stray huge id makes every per-id array that long: refused here, by name,
                # rather than a machine swapping or a generic out-of-memory later.
                check_fits(name, p.max_index + 1, zero_based, per_id * (p.max_index + 1),
                           PER_ID, ram)
            if kept.shape[0]:
                top = int(kept.max()) + 1
                if top > df.shape[0]:
                    with ids_blamed(name, top, zero_based, per_id * top, PER_ID, nnz_total):
                        df = grown(df, top)
                df += np.bincount(kept, minlength=df.shape[0])
            # Labels as every CSRData holds them (float32), so that the classes found here
            # match the rows' labels wherever they are compared.
            labels32 = p.labels.astype(np.float32)
            if classifier and labels.shape[0] <= MAX_LABEL_VALUES:
                labels, label_counts = _merge_labels(labels, label_counts, labels32, train)
            positive += int(np.count_nonzero(labels32[train] > 0))
            # Candidate boundaries: where rows start, their lines, the counts before them.
            line_of += lines_before + 1
            t = train.astype(np.int64)
            z = lengths * t
            checkpoints.add(rows, pos + offsets, line_of, train_total + np.cumsum(t) - t,
                            nnz_total + np.cumsum(z) - z)
            train_total += int(t.sum())
            nnz_total += int(z.sum())
            row_at += k
            lines_before += newlines
            pos += real
        total = row_at
        if total == 0:
            raise DataError(f"{name}: no data rows")
        digests = chunks.finish()
        # Boundaries: the equal-size cut of range_bounds, each moved down to a checkpoint.
        cp_rows, cp_bytes, cp_lines, cp_train, cp_nnz = checkpoints.arrays()
        stride = checkpoints.stride
        bounds = range_bounds(total, workers)
        at = [int(b) // stride for b in bounds[:-1]]
        if any(a >= b for a, b in itertools.pairwise(at)):  # pragma: no cover - cap >= 64 x
            raise DataError(f"{name}: {total} rows cannot be cut into {len(at)} ranges")
        starts = [int(cp_bytes[i]) for i in at] + [pos]
        first_rows = [int(cp_rows[i]) for i in at] + [total]
        before_train = [int(cp_train[i]) for i in at] + [train_total]
        before_nnz = [int(cp_nnz[i]) for i in at] + [nnz_total]
        ranges = []
        for q, i in enumerate(at):
            c0, c1 = chunk_span(starts[q], starts[q + 1])
            ranges.append(Range(
                first_rows[q], first_rows[q + 1] - first_rows[q], starts[q], starts[q + 1],
                int(cp_lines[i]), before_train[q + 1] - before_train[q],
                before_nnz[q + 1] - before_nnz[q],
                range_digest(digests[16 * c0:16 * c1])))
        width = max_index + 1 if limit is None else limit
        plan = FilePlan(
            source=name, file_size=f.size, gzip=f.gzip, text_bytes=pos, total_rows=total,
            max_index=max_index, ranges=ranges, assignment=deal(len(ranges), workers, seed),
            df=df, labels=labels, label_counts=label_counts, positive_train=positive,
            val=val.build(width), test=test.build(width), label_note=watch.note(name))
    plan.seconds = time.perf_counter() - t0
    log.info("%s: planned %d ranges over %s rows (%s text bytes) in %.2fs", name, len(ranges),
             f"{total:,}", f"{pos:,}", plan.seconds)
    return plan


def grown(counts: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.int64]:
    """``counts`` extended with zeros to ``size`` entries: the allocation a huge id makes."""
    return np.concatenate([counts, np.zeros(size - counts.shape[0], dtype=np.int64)])


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
    text_bytes: int = 0    # the whole text (gunzipped); 0 = unknown
    # A plan from a sample: every row of a range is trained on, and a range is checked by
    # the text around its ends (its rows are counted by the reader, not checked).
    sampled: bool = False
    # "" (svmlight text) or "parquet" (data/parts/rowgroups.py: ``source`` is the directory the
    # files are under, ``columns`` the fitted column mapping as JSON).
    format: str = ""
    columns: str = ""


def read_ranges(spec: LocalSpec, ranges: list[Range], *, threads: int | None = None,
                block_bytes: int = BLOCK_BYTES, sink: RowSink | None = None) -> CSRData:
    """The training rows of ``ranges`` (held-out rows dropped), in file order, with the raw
    labels. DataError (one line) if the file is not the one planned: another size, or a
    range whose digest, row count or non-zeros differ; DataFormatError names file and line.

    Each range is checked by the digests of the DIGEST_CHUNK-byte chunks it overlaps, so the
    bytes before and after it up to the chunk edges are read (and hashed, not parsed) too.
    ``sink``: where the kept rows go (default: arrays in memory); the rows it builds are
    returned."""
    n_threads = max(1, threads if threads is not None else default_threads())
    planned_rows = sum(r.train_rows for r in ranges)
    planned_nnz = sum(r.train_nnz for r in ranges)
    with closing(TextFile(spec.source)) as f, KernelThreads(n_threads, "parse") as pool:
        name = f.name
        # A sampled plan's counts are estimates: 2 % more, grown in place if need be.
        parts: RowSink = sink if sink is not None else FilledRows(
            name, planned_rows * 51 // 50 + 16, planned_nnz * 51 // 50 + 1024, grow=True) \
            if spec.sampled else FilledRows(name, planned_rows, planned_nnz)
        # A size of 0 in the plan, or -1 here: a server that does not say (the digests and
        # counts below still decide).
        if spec.file_size > 0 and f.size >= 0 and f.size != spec.file_size:
            raise DataError(f"{name} differs from the file the coordinator planned with: "
                            f"{f.size:,} bytes here, {spec.file_size:,} there (shipping: local "
                            "needs every node to read the same file)")
        for r in sorted(ranges, key=lambda x: x.byte_start):
            if spec.sampled:
                _read_sampled(f, spec, r, parts, block_bytes, n_threads, pool.run)
                continue
            c0, c1 = chunk_span(r.byte_start, r.byte_end)
            digest = ChunkDigests(c0 * DIGEST_CHUNK)
            f.skim(c0 * DIGEST_CHUNK, r.byte_start, digest)
            row_at = 0
            line = r.first_line
            got = 0
            for block, real in f.blocks(r.byte_start, r.byte_end, block_bytes, digest):
                got += real
                try:
                    p = parse_text(block, zero_based=spec.zero_based, n_features=spec.n_features,
                                   threads=n_threads, source=name, run=pool.run)
                except DataFormatError as exc:
                    message = str(exc)[len(f"{exc.path}:{exc.line}: "):]
                    raise DataFormatError(name, exc.line + line - 1, message) from None
                k = int(p.labels.shape[0])
                keep = ~held_out(spec.split_seed, spec.holdout, r.first_row + row_at, k)
                parts.add(p.indptr, p.indices, p.values, p.labels, keep)
                row_at += k
                line += int(np.count_nonzero(block == 10))
            end = c1 * DIGEST_CHUNK if spec.text_bytes <= 0 else min(c1 * DIGEST_CHUNK,
                                                                      spec.text_bytes)
            f.skim(r.byte_end, end, digest)
            got_digest = range_digest(digest.finish())
            if got_digest != r.digest or row_at != r.rows or got != r.byte_end - r.byte_start:
                raise DataError(
                    f"{name} differs from the file the coordinator planned with: rows "
                    f"{r.first_row:,}..{r.first_row + r.rows - 1:,} (bytes {r.byte_start:,}.."
                    f"{r.byte_end:,}) read {row_at:,} row(s) with digest {got_digest.hex()[:12]}, "
                    f"planned {r.rows:,} with {r.digest.hex()[:12]} (shipping: local needs every "
                    "node to read the same file)")
    data = parts.build(spec.n_features)
    if not spec.sampled and (data.n_rows != planned_rows or data.nnz != planned_nnz):
        raise DataError(f"{name}: read {data.n_rows:,} training rows with {data.nnz:,} "
                        f"non-zeros, planned {planned_rows:,} with {planned_nnz:,} (another "
                        "split seed or file?)")
    return data


def _read_sampled(f: TextFile, spec: LocalSpec, r: Range, parts: RowSink, block_bytes: int,
                  threads: int, run: Runner) -> None:
    """Every row of range ``r`` of a plan from a sample into ``parts``, after checking the
    text around its ends against the coordinator's."""
    if ends_digest(f, r.byte_start, r.byte_end) != r.digest:
        raise DataError(f"{f.name} differs from the file the coordinator planned with: the "
                        f"text around bytes {r.byte_start:,} and {r.byte_end:,} is not what it "
                        "read there (shipping: local needs every node to read the same file)")
    for p in parsed_span(f, r.byte_start, r.byte_end, zero_based=spec.zero_based, run=run,
                         n_features=spec.n_features, threads=threads, block_bytes=block_bytes):
        parts.add(p.indptr, p.indices, p.values, p.labels,
                  np.ones(p.labels.shape[0], dtype=np.bool_))
