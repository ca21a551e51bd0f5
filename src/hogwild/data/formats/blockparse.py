"""svmlight text held in memory parsed into CSR arrays, one piece of it per thread."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hogwild.data._threads import Runner, default_threads, run_parallel
from hogwild.data.formats import _textparse as kp
from hogwild.errors import DataFormatError

# Below this many bytes a block is parsed by one thread (thread start-up costs more).
MIN_BYTES_PER_THREAD = 1 << 20

# The block parser sits below svmlight.py because both the streamed loaders and the
# whole-file reader in svmlight.py use it.


@dataclass(frozen=True)
class ParsedText:
    """Raw parser output: CSR arrays, labels as float64 (the label slot may hold doc ids)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    labels: np.ndarray
    max_index: int


def _split_points(buf: np.ndarray, n_pieces: int) -> list[int]:
    """Piece boundaries at line starts, near equal byte counts."""
    n = buf.shape[0]
    points = [0]
    for i in range(1, n_pieces):
        p = int(kp.next_line_start(buf, max(points[-1], (n * i) // n_pieces)))
        points.append(p)
    points.append(n)
    return points


def parse_text(buf: np.ndarray, *, zero_based: bool = False, n_features: int | None = None,
               threads: int | None = None, source: str = "<buffer>",
               run: Runner = run_parallel) -> ParsedText:
    """Parse svmlight text held in a uint8 array; DataFormatError names ``source`` and line.
    ``run``: how the pieces run side by side (a block loop passes its KernelThreads')."""
    buf = np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1)
    if not buf.flags.writeable:
        # Read-only buffers (np.frombuffer of bytes) would make numba compile every kernel a
        # second time for that array type; a memcpy costs far less than that.
        buf = buf.copy()
    n = buf.shape[0]
    # The kernel relies on a newline ending every piece. If the text lacks a final newline,
    # its last line is parsed from a small copy that has one.
    body_end = n
    tail: np.ndarray | None = None
    if n and buf[n - 1] != 10:
        body_end = n - 1
        while body_end > 0 and buf[body_end - 1] != 10:
            body_end -= 1
        tail = np.empty(n - body_end + 1, dtype=np.uint8)
        tail[:-1] = buf[body_end:]
        tail[-1] = 10
    n_threads = threads if threads is not None else default_threads()
    n_threads = max(1, min(n_threads, body_end // MIN_BYTES_PER_THREAD))
    points = _split_points(buf[:body_end], n_threads)
    # (buffer, start, end, offset of buffer[0] in the text) per piece
    pieces = [(buf, points[i], points[i + 1], 0) for i in range(n_threads)]
    if tail is not None:
        pieces.append((tail, 0, tail.shape[0], body_end))

    # Pass 1: upper bounds of rows and non-zeros per piece, so every piece writes its slice of
    # one set of output arrays and no concatenation copy is needed (bounds are exact unless
    # comments or qid tokens hold colons).
    counts = run(kp.count_marks, [(b, s, e) for b, s, e, _ in pieces])
    row_caps = [int(nl) + 1 for nl, _ in counts]
    nnz_caps = [int(nc) for _, nc in counts]
    row_offs = np.concatenate([[0], np.cumsum(row_caps)]).astype(np.int64)
    nnz_offs = np.concatenate([[0], np.cumsum(nnz_caps)]).astype(np.int64)
    total_rows = int(row_offs[-1])
    total_nnz = int(nnz_offs[-1])
    indptr = np.empty(total_rows + 1, dtype=np.int64)
    indices = np.empty(total_nnz, dtype=np.int32)
    values = np.empty(total_nnz, dtype=np.float32)
    labels = np.empty(total_rows, dtype=np.float64)
    limit = -1 if n_features is None else int(n_features)

    # Pass 2: parse. Each piece's indptr entries are global offsets into its own nnz slice.
    jobs = [(b, s, e, zero_based, limit, indptr, indices, values, labels,
             int(row_offs[i]), int(nnz_offs[i]), nnz_caps[i])
            for i, (b, s, e, _) in enumerate(pieces)]
    results = run(kp.parse_piece, jobs)
    for (b, _, _, base), (_, _, _, code, offset) in zip(pieces, results):
        if int(code) != kp.OK:
            line = int(kp.count_newlines(buf, base)) + int(kp.count_newlines(b, int(offset))) + 1
            raise DataFormatError(source, line, kp.describe_error(b, int(offset), int(code)))

    # Compact the pieces when a bound was loose (a no-op in the usual case).
    indptr[0] = 0
    row_at = 0
    nnz_at = 0
    max_index = -1
    for i, (rows_i, nnz_i, max_i, _, _) in enumerate(results):
        rows_i = int(rows_i)
        nnz_i = int(nnz_i)
        max_index = max(max_index, int(max_i))
        r0 = int(row_offs[i])
        z0 = int(nnz_offs[i])
        if r0 != row_at or z0 != nnz_at:
            indptr[row_at + 1:row_at + rows_i + 1] = indptr[r0 + 1:r0 + rows_i + 1] - (z0 - nnz_at)
            labels[row_at:row_at + rows_i] = labels[r0:r0 + rows_i]
            indices[nnz_at:nnz_at + nnz_i] = indices[z0:z0 + nnz_i]
            values[nnz_at:nnz_at + nnz_i] = values[z0:z0 + nnz_i]
        row_at += rows_i
        nnz_at += nnz_i
    indptr = _trim(indptr, row_at + 1)
    labels = _trim(labels, row_at)
    indices = _trim(indices, nnz_at)
    values = _trim(values, nnz_at)
    return ParsedText(indptr, indices, values, labels, max_index)


def _trim(a: np.ndarray, n: int) -> np.ndarray:
    """``a[:n]``, copied when that frees a noticeable share of memory."""
    if n == a.shape[0]:
        return a
    if n < 0.9 * a.shape[0]:
        return a[:n].copy()
    return a[:n]
