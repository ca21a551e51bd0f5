"""A data file's text (plain, or gzip inflated on a thread of its own) in line-aligned blocks."""

from __future__ import annotations

import io
import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hogwild.base.regions import region_array
from hogwild.data.formats import _textparse as kp
from hogwild.errors import DataError

Readable = io.RawIOBase | io.BufferedIOBase

BLOCK_BYTES = 8 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_STEP = 1 << 20  # compressed bytes read at a time


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


def line_aligned(fill: Callable[[np.ndarray, int, int], int], block: int) -> Iterator[np.ndarray]:
    """Blocks of text that end at a line end, from ``fill(buf, start, stop)`` (writes up to
    ``stop - start`` bytes at ``buf[start:]``, returns how many; 0 at the end). The last block
    gets a newline if the text lacks one. Each block is a view of one reused buffer, valid
    until the next one is asked for; a line longer than a block grows the buffer."""
    buf = region_array(block + 1, np.uint8)  # reused, then freed whole (base.regions)
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
            bigger = region_array(2 * cap + 1, np.uint8)
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
                yield from line_aligned(g.fill, block_bytes)
            finally:
                g.close()
        else:
            with open(path, "rb", buffering=0) as f:
                yield from line_aligned(_plain_fill(f), block_bytes)
