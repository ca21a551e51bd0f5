"""Streamed two-pass loading of svmlight text (plain or gzip) into CSR arrays.

The text never sits in memory whole: it is read in line-aligned blocks of ``block_bytes``
into one reusable buffer. Two passes: the first counts each row's colons (an upper bound
of its non-zeros, exact unless ``qid:`` tokens appear), which sizes the output arrays
once; the second parses each block (one piece per thread) and copies its rows straight to
their final places, so a shuffled load (rows in ``shuffle_order(n, seed)``, what the
training split wants) costs no second copy of the data. Peak memory is the result plus a
block or two. The parsed blocks can be appended to a cache (see hogwild.data.formats.cache), which a
later load reads block by block the same way (hogwild.data.formats.cacheblocks), checking every
block before it is used.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hogwild.base.regions import region_array
from hogwild.data._threads import KernelThreads, default_threads
from hogwild.data.csr import CSRData
from hogwild.data.formats import _textparse as kp
from hogwild.data.formats.blockparse import MIN_BYTES_PER_THREAD
from hogwild.data.formats.cache import CacheWriter
from hogwild.data.formats.placement import RowTarget
from hogwild.data.formats.textblocks import BLOCK_BYTES, text_blocks
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.errors import DataError, DataFormatError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Block:
    """What the first pass learnt about one block."""

    nbytes: int
    points: list[int]        # piece boundaries (line starts)
    rows: list[int]          # data rows per piece
    nnz: list[int]           # non-zero upper bound per piece
    lines: int               # newlines in the block


def _split(block: np.ndarray, threads: int) -> list[int]:
    n = block.shape[0]
    pieces = max(1, min(threads, n // MIN_BYTES_PER_THREAD))
    points = [0]
    for i in range(1, pieces):
        points.append(int(kp.next_line_start(block, max(points[-1], n * i // pieces))))
    points.append(n)
    return points


def count_pass(path: Path, block_bytes: int, pool: KernelThreads,
               threads: int) -> tuple[list[_Block], np.ndarray]:
    """First pass: per block its pieces, and every data row's non-zero bound (in file order);
    the pieces run on ``pool``."""
    blocks: list[_Block] = []
    caps: list[np.ndarray] = []
    scratch = region_array(0, np.int64)
    for block in text_blocks(path, block_bytes):
        points = _split(block, threads)
        # a row takes at least 2 bytes, so piece i's rows fit from points[i] // 2 + i on
        need = block.shape[0] // 2 + len(points)
        if scratch.shape[0] < need:
            scratch = region_array(need, np.int64)
        jobs = [(block, points[i], points[i + 1], scratch, points[i] // 2 + i)
                for i in range(len(points) - 1)]
        got = pool.run(kp.row_caps, jobs)
        rows, nnz, lines = [], [], 0
        for (_, _, _, _, base), (n_rows, n_lines) in zip(jobs, got):
            piece = scratch[base:base + int(n_rows)]
            caps.append(piece.copy())
            rows.append(int(n_rows))
            nnz.append(int(piece.sum()))
            lines += int(n_lines)
        blocks.append(_Block(int(block.shape[0]), points, rows, nnz, lines))
    all_caps = np.concatenate(caps) if caps else np.zeros(0, dtype=np.int64)
    return blocks, all_caps


def _parse_and_place(target: RowTarget, block: np.ndarray, p0: int, p1: int,
                     zero_based: bool, limit: int, s_indptr: np.ndarray, s_indices: np.ndarray,
                     s_values: np.ndarray, s_labels: np.ndarray, r0: int, z0: int, cap: int,
                     rows: int, first_row: int) -> tuple[int, int, int, int, int, bool]:
    """One thread's piece of a block: parse it into the scratch arrays, then copy its rows to
    their final places (no barrier between the two). ``bad``: the rows differ from what the
    first pass counted (the file changed)."""
    n_rows, nnz, max_i, code, offset = kp.parse_piece(
        block, p0, p1, zero_based, limit, s_indptr, s_indices, s_values, s_labels, r0, z0, cap)
    bad = int(code) == kp.OK and int(n_rows) != rows
    if int(code) == kp.OK and not bad and n_rows:
        # the piece's row pointer: its first row starts at z0 (pieces may leave gaps, and the
        # slot before it is the previous piece's, written by another thread)
        indptr = s_indptr[r0:r0 + int(n_rows) + 1].copy()
        indptr[0] = z0
        bad = target.place(indptr, s_indices, s_values, s_labels[r0:r0 + int(n_rows)], 0,
                           int(n_rows), first_row) > 0
    return int(n_rows), int(nnz), int(max_i), int(code), int(offset), bad


def load_text(path: Path, *, zero_based: bool = False, n_features: int | None = None,
              seed: int | None = None, threads: int | None = None,
              cache: CacheWriter | None = None, block_bytes: int = BLOCK_BYTES) -> CSRData:
    """Parse a svmlight file (plain or gzip) in two streamed passes.

    Rows come out in file order, or in ``shuffle_order(n_rows, seed)`` when ``seed`` is
    given. ``n_features`` (default: largest id + 1) must exceed every id, else
    DataFormatError names the line. With ``cache`` the parsed rows are appended to it in file
    order (the caller commits it)."""
    source = str(path)
    n_threads = max(1, threads if threads is not None else default_threads())
    with KernelThreads(n_threads, "parse") as pool:
        t0 = time.perf_counter()
        blocks, caps = count_pass(path, block_bytes, pool, n_threads)
        target = RowTarget.create(caps, seed, n_threads)
        del caps
        limit = -1 if n_features is None else int(n_features)
        max_index = -1
        row_at = 0
        lines_before = 0
        scratch_rows = max((sum(b.rows) for b in blocks), default=0)
        scratch_nnz = max((sum(b.nnz) for b in blocks), default=0)
        # the scratch arrays live in regions of their own (see base.regions)
        s_indptr = region_array(scratch_rows + len(blocks[0].rows) + 1 if blocks else 1,
                                np.int64)
        s_indices = region_array(scratch_nnz, np.int32)
        s_values = region_array(scratch_nnz, np.float32)
        s_labels = region_array(scratch_rows + 1, np.float64)
        watch = LabelWatch()
        it = text_blocks(path, block_bytes)
        for info in blocks:
            block = next(it, None)
            if block is None or block.shape[0] != info.nbytes:
                raise DataError(f"{source}: the file changed while it was read")
            points = info.points
            row_offs = np.concatenate([[0], np.cumsum(info.rows)]).astype(np.int64)
            nnz_offs = np.concatenate([[0], np.cumsum(info.nnz)]).astype(np.int64)
            jobs = [(target, block, points[i], points[i + 1], zero_based, limit, s_indptr,
                     s_indices, s_values, s_labels, int(row_offs[i]), int(nnz_offs[i]), info.nnz[i],
                     info.rows[i], row_at + int(row_offs[i]))
                    for i in range(len(info.rows))]
            results = pool.run(_parse_and_place, jobs)
            for n_rows, _, max_i, code, offset, bad in results:
                # The first pass's counts bound every row's entries: more means the file changed.
                if bad or code == kp.CAPACITY:
                    raise DataError(f"{source}: the file changed while it was read")
                if code != kp.OK:
                    line = lines_before + int(kp.count_newlines(block, int(offset))) + 1
                    raise DataFormatError(source, line, kp.describe_error(block, int(offset), int(code)))
                max_index = max(max_index, int(max_i))
            for i, (n_rows, nnz_i, _, _, _, _) in enumerate(results):
                r0 = int(row_offs[i])
                z0 = int(nnz_offs[i])
                rows_i = int(n_rows)
                if rows_i == 0:
                    continue
                labels = s_labels[r0:r0 + rows_i]
                watch.add(labels, row_at)  # as read (float64), before float32 keeps them
                if cache is not None:
                    lengths = np.diff(s_indptr[r0:r0 + rows_i + 1])
                    lengths[0] = s_indptr[r0 + 1] - z0  # the piece's first row starts at z0
                    cache.append(lengths, s_indices[z0:z0 + int(nnz_i)],
                                 s_values[z0:z0 + int(nnz_i)], labels)
                row_at += rows_i
            lines_before += info.lines
        if next(it, None) is not None:
            raise DataError(f"{source}: the file changed while it was read")
        nf = int(n_features) if n_features is not None else max_index + 1
        note = watch.note(source)
        data = target.finish(nf, note)
        log.debug("%s: parsed %d rows in %.2fs", source, data.n_rows, time.perf_counter() - t0)
        if cache is not None:
            cache.max_index = max_index
            cache.label_note = note
        return data
