"""Streamed loading of svmlight text (plain or gzip) and of its parsed-array cache.

The text never sits in memory whole: it is read in line-aligned blocks of ``block_bytes``
into one reusable buffer. Two passes: the first counts each row's colons (an upper bound
of its non-zeros, exact unless ``qid:`` tokens appear), which sizes the output arrays
once; the second parses each block (one piece per thread) and copies its rows straight to
their final places, so a shuffled load (rows in ``shuffle_order(n, seed)``, what the
training split wants) costs no second copy of the data. Peak memory is the result plus a
block or two. The parsed blocks can be appended to a cache (see hogwild.data.cache), which a
later load reads block by block the same way, checking every block before it is used.
"""

from __future__ import annotations

import io
import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hogwild.data import _rowcopy as rc
from hogwild.data import _textparse as kp
from hogwild.data._threads import default_threads, run_parallel
from hogwild.data.cache import CachedArrays, CacheWriter
from hogwild.data.csr import CSRData, _check_structure
from hogwild.data.labelcheck import LabelWatch
from hogwild.data.split import shuffle_order
from hogwild.errors import DataError, DataFormatError

log = logging.getLogger(__name__)

Readable = io.RawIOBase | io.BufferedIOBase

BLOCK_BYTES = 16 << 20
# Below this many bytes a block is parsed by one thread (thread start-up costs more).
_MIN_BYTES_PER_THREAD = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_STEP = 1 << 20  # compressed bytes read at a time


# ----------------------------------------------------------------------------- parsing
# The block parser lives here, below svmlight.py, because both the streamed loaders in this
# module and the whole-file reader in svmlight.py use it.

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
               threads: int | None = None, source: str = "<buffer>") -> ParsedText:
    """Parse svmlight text held in a uint8 array; DataFormatError names ``source`` and line."""
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
    n_threads = max(1, min(n_threads, body_end // _MIN_BYTES_PER_THREAD))
    points = _split_points(buf[:body_end], n_threads)
    # (buffer, start, end, offset of buffer[0] in the text) per piece
    pieces = [(buf, points[i], points[i + 1], 0) for i in range(n_threads)]
    if tail is not None:
        pieces.append((tail, 0, tail.shape[0], body_end))

    # Pass 1: upper bounds of rows and non-zeros per piece, so every piece writes its slice of
    # one set of output arrays and no concatenation copy is needed (bounds are exact unless
    # comments or qid tokens hold colons).
    counts = run_parallel(kp.count_marks, [(b, s, e) for b, s, e, _ in pieces])
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
    results = run_parallel(kp.parse_piece, jobs)
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


# ----------------------------------------------------------------------------- text blocks

@contextmanager
def data_file_errors(path: Path) -> Iterator[None]:
    """Turn an OSError of reading ``path`` (missing, a directory, not allowed, ...) into one
    DataError line naming it."""
    try:
        yield
    except FileNotFoundError as exc:
        raise DataError(f"data file not found: {path}") from exc
    except IsADirectoryError as exc:
        raise DataError(f"data path is a directory, not a file: {path}") from exc
    except PermissionError as exc:
        raise DataError(f"cannot read data file {path}: permission denied") from exc
    except OSError as exc:
        raise DataError(f"cannot read data file {path}: {exc.strerror or exc}") from exc


def is_gzip(path: Path) -> bool:
    """Whether ``path`` starts with the gzip magic bytes."""
    with data_file_errors(path), open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _aligned(fill: Callable[[np.ndarray, int, int], int], block: int) -> Iterator[np.ndarray]:
    """Blocks of text that end at a line end, from ``fill(buf, start, stop)`` (writes up to
    ``stop - start`` bytes at ``buf[start:]``, returns how many; 0 at the end). The last block
    gets a newline if the text lacks one. Each block is a view of one reused buffer, valid
    until the next one is asked for; a line longer than a block grows the buffer."""
    buf = np.empty(block + 1, dtype=np.uint8)
    carry = 0
    while True:
        cap = buf.shape[0] - 1
        filled = carry
        while filled < cap:
            k = fill(buf, filled, cap)
            if k == 0:
                break
            filled += k
        if filled < cap:  # end of the text
            if filled:
                if buf[filled - 1] != 10:
                    buf[filled] = 10
                    filled += 1
                yield buf[:filled]
            return
        cut = int(kp.last_line_end(buf, filled))
        if cut == 0:  # no line end in a full buffer: a very long line
            bigger = np.empty(2 * cap + 1, dtype=np.uint8)
            bigger[:filled] = buf[:filled]
            buf = bigger
            carry = filled
            continue
        yield buf[:cut]
        carry = filled - cut
        buf[:carry] = buf[cut:filled]


def _plain_fill(f: Readable) -> Callable[[np.ndarray, int, int], int]:
    def fill(buf: np.ndarray, start: int, stop: int) -> int:
        return f.readinto(buf.data[start:stop]) or 0
    return fill


def _gunzip(f: Readable, source: str) -> Iterator[bytes]:
    """Decompressed pieces of gzip data (every member; zero padding after the last one is
    allowed), reading the compressed file a piece at a time."""
    d = zlib.decompressobj(wbits=31)
    data = f.read(_GZIP_STEP)
    while True:
        try:
            out = d.decompress(data)
        except zlib.error as exc:
            raise DataError(f"{source}: cannot decompress: {exc}") from exc
        if out:
            yield out
        if d.eof:
            data = d.unused_data
            if len(data) < 2:
                data += f.read(_GZIP_STEP)
            if not data:
                return
            if data[:2] == _GZIP_MAGIC:
                d = zlib.decompressobj(wbits=31)
                continue
            while data:
                if data.strip(b"\0"):
                    raise DataError(f"{source}: cannot decompress: data after the gzip stream")
                data = f.read(_GZIP_STEP)
            return
        data = f.read(_GZIP_STEP)
        if not data:
            raise DataError(f"{source}: cannot decompress: truncated gzip data")


class _Gunzipper:
    """Decompresses on a thread of its own (zlib releases the GIL) a few pieces ahead of the
    parser, so inflating and parsing overlap on two cores; memory stays bounded."""

    def __init__(self, path: Path) -> None:
        self._pieces: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
        self._stop = threading.Event()
        self._pending = memoryview(b"")
        self._done = False
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._thread = threading.Thread(target=self._run, args=(str(path),), name="gunzip",
                                        daemon=True)
        self._thread.start()

    def _put(self, item: bytes | BaseException | None) -> None:
        while not self._stop.is_set():
            try:
                self._pieces.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _run(self, source: str) -> None:
        try:
            for piece in _gunzip(self._file, source):
                self._put(piece)
                if self._stop.is_set():
                    return
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def fill(self, buf: np.ndarray, start: int, stop: int) -> int:
        while not self._pending and not self._done:
            item = self._pieces.get()
            if item is None:
                self._done = True
            elif isinstance(item, BaseException):
                raise item
            else:
                self._pending = memoryview(item)
        n = min(stop - start, len(self._pending))
        if n:
            buf[start:start + n] = np.frombuffer(self._pending[:n], dtype=np.uint8)
            self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)
        self._file.close()


def text_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[np.ndarray]:
    """The text of ``path`` (gunzipped if it is gzip data) in line-aligned blocks."""
    with data_file_errors(path):
        if is_gzip(path):
            g = _Gunzipper(path)
            try:
                yield from _aligned(g.fill, block_bytes)
            finally:
                g.close()
        else:
            with open(path, "rb", buffering=0) as f:
                yield from _aligned(_plain_fill(f), block_bytes)


# ----------------------------------------------------------------------------- the result

@dataclass
class _Target:
    """Output arrays sized from the row lengths (or their upper bounds) of the whole input;
    input row g goes to output row pos_of[g]."""

    pos_of: np.ndarray
    start: np.ndarray      # int64 n_rows + 1: slot starts, then the row pointer
    length: np.ndarray     # int64 n_rows: real row lengths
    indices: np.ndarray
    values: np.ndarray
    labels: np.ndarray
    threads: int
    filled: list[int] = field(default_factory=lambda: [0])

    @classmethod
    def create(cls, caps: np.ndarray, seed: int | None, threads: int) -> _Target:
        n = int(caps.shape[0])
        start = np.zeros(n + 1, dtype=np.int64)
        if seed is None:
            pos_of = np.arange(n, dtype=np.int64)
            np.cumsum(caps, out=start[1:])
        else:
            order = shuffle_order(n, seed)
            pos_of = np.empty(n, dtype=np.int64)
            pos_of[order] = np.arange(n, dtype=np.int64)
            np.cumsum(caps[order], out=start[1:])
            del order
        total = int(start[-1])
        return cls(pos_of, start, np.zeros(n, dtype=np.int64),
                   np.empty(total, dtype=np.int32), np.empty(total, dtype=np.float32),
                   np.empty(n, dtype=np.float32), threads)

    def put(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, first_row: int, source: str) -> None:
        """Copy a block's rows (``first_row`` = their row number in the whole input)."""
        n = int(indptr.shape[0] - 1)
        pieces = max(1, min(self.threads, n // 2048))
        bounds = [n * i // pieces for i in range(pieces + 1)]
        bad = run_parallel(rc.scatter_rows, [
            (indptr, indices, values, labels, bounds[i], bounds[i + 1], first_row,
             self.pos_of, self.start, self.indices, self.values, self.labels, self.length)
            for i in range(pieces)])
        if sum(int(b) for b in bad):
            raise DataError(f"{source}: the file changed while it was read")

    def finish(self, n_features: int, label_note: str | None = None) -> CSRData:
        """The CSR result (gaps left by loose bounds closed, arrays trimmed in place)."""
        indptr, indices, values = self.start, self.indices, self.values
        nnz = int(indptr[-1])
        if int(self.length.sum()) != nnz:
            nnz = int(rc.close_gaps(indptr, self.length, indices, values))
            # shrink in place (realloc): the arrays own their memory and nothing views them
            indices.resize(nnz, refcheck=False)
            values.resize(nnz, refcheck=False)
        return CSRData(indptr, indices, values, self.labels, n_features, label_note)


# ----------------------------------------------------------------------------- text

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
    pieces = max(1, min(threads, n // _MIN_BYTES_PER_THREAD))
    points = [0]
    for i in range(1, pieces):
        points.append(int(kp.next_line_start(block, max(points[-1], n * i // pieces))))
    points.append(n)
    return points


def _count_pass(path: Path, block_bytes: int, threads: int) -> tuple[list[_Block], np.ndarray]:
    """First pass: per block its pieces, and every data row's non-zero bound (in file order)."""
    blocks: list[_Block] = []
    caps: list[np.ndarray] = []
    scratch = np.empty(0, dtype=np.int64)
    for block in text_blocks(path, block_bytes):
        points = _split(block, threads)
        # a row takes at least 2 bytes, so piece i's rows fit from points[i] // 2 + i on
        need = block.shape[0] // 2 + len(points)
        if scratch.shape[0] < need:
            scratch = np.empty(need, dtype=np.int64)
        jobs = [(block, points[i], points[i + 1], scratch, points[i] // 2 + i)
                for i in range(len(points) - 1)]
        got = run_parallel(kp.row_caps, jobs)
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
    t0 = time.perf_counter()
    blocks, caps = _count_pass(path, block_bytes, n_threads)
    target = _Target.create(caps, seed, n_threads)
    del caps
    limit = -1 if n_features is None else int(n_features)
    max_index = -1
    row_at = 0
    lines_before = 0
    scratch_rows = max((sum(b.rows) for b in blocks), default=0)
    scratch_nnz = max((sum(b.nnz) for b in blocks), default=0)
    s_indptr = np.empty(scratch_rows + len(blocks[0].rows) + 1 if blocks else 1, dtype=np.int64)
    s_indices = np.empty(scratch_nnz, dtype=np.int32)
    s_values = np.empty(scratch_nnz, dtype=np.float32)
    s_labels = np.empty(scratch_rows + 1, dtype=np.float64)
    watch = LabelWatch()
    it = text_blocks(path, block_bytes)
    for info in blocks:
        block = next(it, None)
        if block is None or block.shape[0] != info.nbytes:
            raise DataError(f"{source}: the file changed while it was read")
        points = info.points
        row_offs = np.concatenate([[0], np.cumsum(info.rows)]).astype(np.int64)
        nnz_offs = np.concatenate([[0], np.cumsum(info.nnz)]).astype(np.int64)
        jobs = [(block, points[i], points[i + 1], zero_based, limit, s_indptr, s_indices,
                 s_values, s_labels, int(row_offs[i]), int(nnz_offs[i]), info.nnz[i])
                for i in range(len(info.rows))]
        results = run_parallel(kp.parse_piece, jobs)
        for i, (n_rows, _, max_i, code, offset) in enumerate(results):
            if int(code) != kp.OK:
                line = lines_before + int(kp.count_newlines(block, int(offset))) + 1
                raise DataFormatError(source, line, kp.describe_error(block, int(offset), int(code)))
            if int(n_rows) != info.rows[i]:
                raise DataError(f"{source}: the file changed while it was read")
            max_index = max(max_index, int(max_i))
        for i, (n_rows, nnz_i, _, _, _) in enumerate(results):
            r0 = int(row_offs[i])
            z0 = int(nnz_offs[i])
            rows_i = int(n_rows)
            if rows_i == 0:
                continue
            # the piece's row pointer: its first row starts at z0 (pieces may leave gaps)
            indptr = s_indptr[r0:r0 + rows_i + 1].copy()
            indptr[0] = z0
            labels = s_labels[r0:r0 + rows_i]
            watch.add(labels, row_at)  # as read (float64), before float32 keeps them
            target.put(indptr, s_indices, s_values, labels, row_at, source)
            if cache is not None:
                cache.append(np.diff(indptr), s_indices[z0:z0 + int(nnz_i)],
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


# ----------------------------------------------------------------------------- cache

def cached_blocks(found: CachedArrays, block_nnz: int = BLOCK_BYTES // 8,
                  indptr: np.ndarray | None = None, start: int = 0,
                  stop: int | None = None) -> Iterator[tuple[int, CSRData]]:
    """Rows ``start:stop`` (default: all) of a cache found by hogwild.data.cache.find_cached,
    in file order, as (first row, block) pairs of about ``block_nnz`` non-zeros each (fresh
    arrays per block). Every block is checked (indices in range and increasing within rows,
    finite values and labels) before it is handed out; DataError if one fails or a file
    cannot be read. ``indptr``: the cache's row pointer, if already read."""
    n_features = found.max_index + 1
    where = str(found.where)
    if indptr is None:
        indptr = read_cached_indptr(found)
    stop = found.n_rows if stop is None else stop
    try:
        files = {name: found.open(name) for name in ("indices", "values", "labels")}
    except OSError as exc:
        raise DataError(f"cache {where}: {exc}") from exc
    try:
        r0 = start
        while r0 < stop:
            r1 = int(np.searchsorted(indptr, indptr[r0] + block_nnz, side="right")) - 1
            r1 = min(stop, max(r1, r0 + 1))
            a, b = int(indptr[r0]), int(indptr[r1])
            idx = _read(files["indices"], found.offsets["indices"], a, b, np.int32)
            val = _read(files["values"], found.offsets["values"], a, b, np.float32)
            lab = _read(files["labels"], found.offsets["labels"], r0, r1, np.float32)
            if idx is None or val is None or lab is None:
                raise DataError(f"cache {where}: a file is shorter than its header says")
            local = indptr[r0:r1 + 1] - a
            code, _ = _check_structure(local, idx, val, lab, n_features)
            if int(code) != 0:
                raise DataError(f"cache {where}: the rows from {r0} fail the check ({int(code)})")
            yield r0, CSRData(local, idx, val, lab, n_features)
            r0 = r1
    except OSError as exc:
        raise DataError(f"cache {where}: {exc}") from exc
    finally:
        for f in files.values():
            f.close()


def read_cached_indptr(found: CachedArrays) -> np.ndarray:
    """The row pointer of a cache (8 bytes per row), checked; DataError if it is damaged."""
    try:
        with found.open("indptr") as f:
            f.seek(found.offsets["indptr"])
            indptr = np.fromfile(f, dtype=np.int64, count=found.n_rows + 1)
    except OSError as exc:
        raise DataError(f"cache {found.where}: {exc}") from exc
    if indptr.shape[0] != found.n_rows + 1 or int(indptr[0]) != 0 \
            or int(indptr[-1]) != found.nnz or np.any(indptr[1:] < indptr[:-1]):
        raise DataError(f"cache {found.where}: damaged row pointer")
    return indptr


def load_cached(found: CachedArrays, *, seed: int | None = None, threads: int | None = None,
                block_nnz: int = BLOCK_BYTES // 8) -> CSRData | None:
    """The rows of a cache, read block by block (see cached_blocks) straight into their
    final places (shuffled by ``seed`` as in load_text); None if the cache turns out damaged
    (the caller re-parses)."""
    n_threads = max(1, threads if threads is not None else default_threads())
    try:
        indptr = read_cached_indptr(found)
        target = _Target.create(np.diff(indptr), seed, n_threads)
        for r0, block in cached_blocks(found, block_nnz, indptr):
            target.put(block.indptr, block.indices, block.values, block.labels, r0,
                       str(found.where))
    except DataError as exc:
        log.debug("ignoring unusable cache %s: %s", found.where, exc)
        return None
    return target.finish(found.max_index + 1, found.label_note)


def parse_to_cache(path: Path, cache: CacheWriter, *, zero_based: bool = False,
                   threads: int | None = None, block_bytes: int = BLOCK_BYTES) -> int:
    """Parse a svmlight file block by block into ``cache`` only (nothing is kept in memory:
    for data larger than memory); returns the number of rows. The caller commits."""
    source = str(path)
    rows = 0
    lines_before = 0
    watch = LabelWatch()
    for block in text_blocks(path, block_bytes):
        try:
            p = parse_text(block, zero_based=zero_based, threads=threads, source=source)
        except DataFormatError as exc:
            message = str(exc)[len(f"{exc.path}:{exc.line}: "):]
            raise DataFormatError(source, exc.line + lines_before, message) from None
        watch.add(p.labels, rows)
        cache.append(np.diff(p.indptr), p.indices, p.values, p.labels)
        cache.max_index = max(cache.max_index, p.max_index)
        rows += p.labels.shape[0]
        lines_before += int(np.count_nonzero(block == 10))
    if not cache.ok:
        raise DataError(f"{source}: could not write the parsed-array cache {cache.where}")
    cache.label_note = watch.note(source)
    return rows


def _read(f: Readable, offset: int, a: int, b: int, dtype: type) -> np.ndarray | None:
    out: np.ndarray = np.empty(b - a, dtype=dtype)
    f.seek(offset + a * out.itemsize)
    got = f.readinto(out.view(np.uint8).data)
    return out if got == out.nbytes else None
