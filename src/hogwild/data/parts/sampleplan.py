"""A plan of byte ranges from a bounded sample, for a training file too large to scan (``shipping: local``).

The coordinator's full scan (data/parts/ranges.py) reads every byte, so its start-up grows with
the data. This plan reads a bounded part instead, whatever the file's size:

* Ranges: the text is cut into ``workers x PIECES_PER_WORKER`` pieces of equal bytes, each
  cut moved to the next line start (a few bytes read per cut). A worker reads its ranges
  whole and counts their rows itself; it checks each by the text around the range's ends
  (textspans.ends_digest) and the file's size, so a different file at the same path is
  refused.
* Held-out rows: the rows of K text windows spread evenly over the file, together
  ``val_fraction + test_fraction`` of its bytes but at most HOLDOUT_BYTES, read by the
  coordinator alone and cut out of the workers' ranges. Among them a row is a test row when
  its split hash (by its place among the windows' rows) falls below the test share. So on a
  large file fewer rows than the fractions ask are held out: the log says how many.
* The sample: the windows' rows (SAMPLE_BYTES of windows, not held out, when nothing is)
  give the label values, each feature's document frequency (the feature order) and the
  rows and non-zeros per byte, from which each range's counts are estimated until the
  workers report them.

The width of the feature space cannot come from a sample (an id it does not see may be the
largest): the caller gives it, and a worker refuses an id at or above it, naming the line.
"""

from __future__ import annotations

import itertools
import logging
import time
from contextlib import closing

import numpy as np

from hogwild.data._threads import default_threads
from hogwild.data.csr import CSRData
from hogwild.data.formats.textblocks import BLOCK_BYTES
from hogwild.data.formats.textsource import TextFile
from hogwild.data.parts.ranges import (
    MAX_LABEL_VALUES,
    PIECES_PER_WORKER,
    FilePlan,
    Range,
    split_u,
)
from hogwild.data.parts.rowsinks import RowParts
from hogwild.data.parts.textspans import ends_digest, line_start, parsed_span
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.errors import DataError

log = logging.getLogger(__name__)

# The most text held out, and the sample read when nothing is: what the coordinator reads.
HOLDOUT_BYTES = 64 << 20
SAMPLE_BYTES = 16 << 20
# local_plan auto samples plain text from this size on (smaller files are scanned: exact).
AUTO_SAMPLE_BYTES = 1 << 30
# Windows: at most this many, each at least this long (short windows cost a read each).
MAX_WINDOWS = 64
MIN_WINDOW_BYTES = 64 << 10


def deal_by_bytes(ranges: list[Range], workers: int, seed: int) -> list[list[int]]:
    """Ranges per worker, each list in file order: in a seeded random order, each range goes
    to the worker holding the fewest bytes so far (windows cut some pieces in two, so the
    ranges differ in size; every worker ends within one range's bytes of the others)."""
    order = np.random.default_rng([seed, 0x42595445]).permutation(len(ranges))
    held = [0] * workers
    out: list[list[int]] = [[] for _ in range(workers)]
    for i in order:
        w = min(range(workers), key=lambda k: (held[k], k))
        out[w].append(int(i))
        held[w] += ranges[int(i)].byte_end - ranges[int(i)].byte_start
    return [sorted(x) for x in out]


def _windows(f: TextFile, size: int, want: float) -> list[tuple[int, int]]:
    """Up to MAX_WINDOWS line-aligned text windows of ``want`` bytes in all, spread evenly."""
    k = max(1, min(MAX_WINDOWS, int(want // MIN_WINDOW_BYTES)))
    width = want / k
    out: list[tuple[int, int]] = []
    for j in range(k):
        centre = (j + 0.5) * size / k
        a = line_start(f, int(centre - width / 2), size)
        b = line_start(f, int(centre + width / 2), size)
        if b <= a:
            continue
        if out and a <= out[-1][1]:  # (windows only touch when lines are long)
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _cut(pieces: list[tuple[int, int]], windows: list[tuple[int, int]]
         ) -> list[tuple[int, int]]:
    """The parts of ``pieces`` outside every window (all sorted, line-aligned)."""
    out = []
    for a, b in pieces:
        at = a
        for wa, wb in windows:
            if wb <= at or wa >= b:
                continue
            if wa > at:
                out.append((at, wa))
            at = max(at, wb)
        if at < b:
            out.append((at, b))
    return out


def plan_sampled(source: str, *, workers: int, seed: int, val_fraction: float,
                 test_fraction: float, n_features: int, zero_based: bool = False,
                 classifier: bool = True, threads: int | None = None,
                 block_bytes: int = BLOCK_BYTES, holdout_bytes: int = HOLDOUT_BYTES,
                 sample_bytes: int = SAMPLE_BYTES) -> FilePlan:
    """Plan ``source`` (plain svmlight text, not gzip) for ``workers`` from a bounded sample.

    ValueError for gzip text (it cannot be read from a byte offset) or for too few lines to
    give every worker a range; DataFormatError (file and line) for a malformed line of the
    sample or an id at or above ``n_features``."""
    t0 = time.perf_counter()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    n_threads = max(1, threads if threads is not None else default_threads())
    holdout = val_fraction + test_fraction
    with closing(TextFile(source)) as f:
        name, size = f.name, f.size
        if f.gzip:
            raise ValueError(f"{name} is gzip data, which cannot be read from a byte offset")
        if size <= 0:
            raise DataError(f"{name}: no data rows")
        want = min(holdout_bytes, holdout * size) if holdout > 0 else min(sample_bytes, size)
        windows = _windows(f, size, want)
        n = workers * PIECES_PER_WORKER
        cuts = sorted({line_start(f, size * i // n, size) for i in range(n)} | {size})
        pieces = [(a, b) for a, b in itertools.pairwise(cuts) if b > a]
        spans = _cut(pieces, windows) if holdout > 0 else pieces
        if len(spans) < workers:
            raise ValueError(f"{name} has too few lines to give {workers} workers a range each")
        sample = RowParts()
        watch = LabelWatch()
        max_index, read, row_at = -1, 0, 0
        for a, b in windows:
            for p in parsed_span(f, a, b, zero_based=zero_based, n_features=n_features,
                                 threads=n_threads, block_bytes=block_bytes):
                watch.add(p.labels, row_at)
                row_at += int(p.labels.shape[0])
                max_index = max(max_index, p.max_index)
                sample.add(p.indptr, p.indices, p.values, p.labels,
                           np.ones(p.labels.shape[0], dtype=np.bool_))
            read += b - a
        rows = sample.build(n_features)
        if rows.n_rows == 0:
            raise DataError(f"{name}: no data rows in the {len(windows)} sampled window(s) of "
                            "its text")
        per_byte_rows, per_byte_nnz = rows.n_rows / read, rows.nnz / read
        ranges = [Range(0, 0, a, b, 0, round((b - a) * per_byte_rows),
                        round((b - a) * per_byte_nnz), ends_digest(f, a, b))
                  for a, b in spans]
    labels32 = rows.labels.astype(np.float32)
    values, counts = np.unique(labels32.astype(np.float64), return_counts=True)
    if not classifier or values.shape[0] > MAX_LABEL_VALUES:
        values, counts = np.zeros(0), np.zeros(0, dtype=np.int64)
    trained = sum(r.train_rows for r in ranges)
    positive = round(trained * float(np.count_nonzero(labels32 > 0)) / rows.n_rows)
    df = np.bincount(rows.indices, minlength=n_features).astype(np.int64)
    val, test = split_holdout(rows, seed, test_fraction / holdout if holdout > 0 else None)
    plan = FilePlan(
        source=name, file_size=size, gzip=False, text_bytes=size,
        total_rows=trained + (rows.n_rows if holdout > 0 else 0), max_index=max_index,
        ranges=ranges, assignment=deal_by_bytes(ranges, workers, seed), df=df,
        labels=values, label_counts=counts.astype(np.int64), positive_train=positive,
        val=val, test=test, label_note=watch.note(name), sampled=True,
        windows=windows if holdout > 0 else [], sample_rows=rows.n_rows)
    plan.seconds = time.perf_counter() - t0
    log.info("%s: planned %d byte ranges of %s bytes from a sample of %d window(s), %s rows "
             "(%s bytes), in %.2fs", name, len(ranges), f"{size:,}", len(windows),
             f"{rows.n_rows:,}", f"{read:,}", plan.seconds)
    return plan


def split_holdout(rows: CSRData, seed: int, test_share: float | None
              ) -> tuple[CSRData, CSRData]:
    """(validation, test) rows of the windows (``test_share`` None: nothing is held out)."""
    if test_share is None:
        empty = rows.take(np.zeros(0, dtype=np.int64))
        return empty, empty
    is_test = split_u(seed, np.arange(rows.n_rows, dtype=np.int64)) < test_share
    return rows.take(np.flatnonzero(~is_test)), rows.take(np.flatnonzero(is_test))
