"""A svmlight training file read by byte ranges of its text: a local path, bundled:NAME, or an
fsspec URL (s3://, gs://, http(s)://, file://, memory://, ...), plain or gzip.

Used by ``shipping: local``, where the coordinator scans the file and every worker reads its
own ranges of it; both sides go through this one reader, so they agree on every byte offset.
gzip data cannot seek: a range of it is reached by inflating (and dropping) what comes before.
fsspec is imported only when a URL is given (``pip install '.[remote]'`` from a clone).
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.data.formats.textblocks import line_aligned
from hogwild.data.sources import BUNDLED_DIR, BUNDLED_FEATURES
from hogwild.data.urls import is_url
from hogwild.errors import DataError

_GZIP_MAGIC = b"\x1f\x8b"
# Text bytes dropped at a time while skipping to a range of gzip data.
_SKIP_BYTES = 1 << 22


def local_source_error(spec: str) -> str | None:
    """Why ``spec`` cannot be read by byte ranges (a message), or None if it can: a svmlight
    file path, an fsspec URL, or ``bundled:NAME``."""
    spec = spec.strip()
    if is_url(spec):
        return None
    scheme, sep, rest = spec.partition(":")
    if sep and scheme == "bundled":
        name, _, part = rest.partition("/")
        if name in BUNDLED_FEATURES and part in ("", "train", "test"):
            return None
        return f"unknown bundled data set {rest!r}"
    if sep and scheme in ("synthetic", "lyrl2004", "csv", "parquet", "arrow") \
            and not Path(spec).exists():
        return (f"{scheme}: data is built by the coordinator and cannot be read in parts; "
                "give a svmlight file or a parquet: source (a path or URL every node can "
                "read)")
    return None


def bundled_path(spec: str) -> Path | None:
    """The installed file of ``bundled:NAME[/part]``, None for any other source."""
    scheme, sep, rest = spec.strip().partition(":")
    if not sep or scheme != "bundled" or Path(spec).exists():
        return None
    name, _, part = rest.partition("/")
    return BUNDLED_DIR / f"{name}.{part or 'train'}.libsvm.gz"


def bundled_features(spec: str) -> int | None:
    """The fixed feature count of a bundled data set (its train and test files agree)."""
    scheme, sep, rest = spec.strip().partition(":")
    if not sep or scheme != "bundled" or Path(spec).exists():
        return None
    return BUNDLED_FEATURES.get(rest.partition("/")[0])


def canonical(spec: str) -> str:
    """The name every node is told to read: URLs and bundled: as given, local paths made
    absolute (a shared volume is mounted at the same place on every node)."""
    spec = spec.strip()
    if is_url(spec) or bundled_path(spec) is not None:
        return spec
    return str(Path(spec).expanduser().absolute())


class TextFile:
    """One data file opened for reading its text (gunzipped if it is gzip data) by ranges.

    ``size`` is the file's size as stored; ``gzip`` whether it is gzip data."""

    def __init__(self, spec: str) -> None:
        self.spec = spec.strip()
        self.name = self.spec
        self._raw: Any = None
        self._text: Any = None
        path = bundled_path(self.spec)
        try:
            if is_url(self.spec):
                self._raw, self.size = _open_url(self.spec)
            else:
                path = path if path is not None else Path(self.spec).expanduser()
                if not path.exists():
                    raise DataError(f"data file not found: {self.spec}")
                if not path.is_file():
                    raise DataError(f"data path is not a file: {self.spec}")
                self._raw = open(path, "rb")  # noqa: SIM115 - closed by close()
                self.size = path.stat().st_size
            self.gzip = self._raw.read(2) == _GZIP_MAGIC
            self._raw.seek(0)
        except PermissionError as exc:
            self.close()
            raise DataError(f"cannot read data file {self.spec}: permission denied") from exc
        except OSError as exc:
            self.close()
            raise DataError(f"cannot read data file {self.spec}: {exc}") from exc
        except BaseException:
            self.close()
            raise
        self._text = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzip else self._raw

    def close(self) -> None:
        for f in (self._text, self._raw):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        self._text = self._raw = None

    def _seek(self, offset: int) -> None:
        f = self._text
        if not self.gzip:
            f.seek(offset)
            return
        # GzipFile.seek inflates from the start (backwards) or from here (forwards).
        if offset < f.tell():
            f.seek(0)
        scratch = bytearray(min(_SKIP_BYTES, max(1, offset - f.tell())))
        view = memoryview(scratch)
        while f.tell() < offset:
            got = f.readinto(view[:min(len(scratch), offset - f.tell())])
            if not got:
                break

    def reader(self, start: int, stop: int | None,
               digest: Any = None) -> tuple[Callable[[np.ndarray, int, int], int], list[int]]:
        """A fill function (for hogwild.data.formats.textblocks.line_aligned) reading text bytes
        ``[start, stop)`` (``stop`` None: to the end), and a one-item list counting the bytes
        it has read. Every byte read is fed to ``digest`` (a hashlib-style object: update()) first."""
        self._wrap(self._seek, start)
        count = [0]
        limit = None if stop is None else max(0, stop - start)
        f = self._text

        def fill(buf: np.ndarray, a: int, b: int) -> int:
            want = b - a if limit is None else min(b - a, limit - count[0])
            if want <= 0:
                return 0
            view = buf.data[a:a + want]
            got = self._wrap(f.readinto, view) or 0
            if digest is not None and got:
                digest.update(view[:got])
            count[0] += got
            return int(got)

        return fill, count

    def skim(self, start: int, stop: int, digest: Any) -> int:
        """Feed the text bytes ``[start, stop)`` to ``digest`` without keeping them; returns
        how many there were (fewer at the end of the text)."""
        if stop <= start:
            return 0
        fill, count = self.reader(start, stop, digest)
        buf = np.empty(min(stop - start, _SKIP_BYTES), dtype=np.uint8)
        while fill(buf, 0, buf.shape[0]):
            pass
        return count[0]

    def blocks(self, start: int, stop: int | None, block_bytes: int,
               digest: Any = None) -> Iterator[tuple[np.ndarray, int]]:
        """Line-aligned blocks of the text ``[start, stop)``, each with how many of its bytes
        came from the file (the last block of a file without a final newline gets one more).
        ``start`` must be a line start and ``stop`` a line end or the end of the text."""
        fill, count = self.reader(start, stop, digest)
        taken = 0
        for block in line_aligned(fill, block_bytes):
            n = int(block.shape[0])
            real = min(n, count[0] - taken)
            taken += n
            yield block, real

    def _wrap(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DataError(f"{self.spec}: cannot decompress: {exc}") from exc
        except OSError as exc:
            raise DataError(f"cannot read data file {self.spec}: {exc}") from exc


def _open_url(url: str) -> tuple[io.IOBase, int]:
    """(binary file object, size) of an fsspec URL."""
    try:
        import fsspec
    except ImportError:
        raise DataError(f"{url}: reading URLs needs fsspec (pip install '.[remote]' from a clone, or pip install fsspec, "
                        "plus the backend of the scheme, e.g. s3fs or gcsfs)") from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise DataError(f"{url}: no fsspec file system for this URL ({exc})") from None
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise DataError(f"data file not found: {url}") from None
    if info.get("type") == "directory":
        raise DataError(f"data path is not a file: {url}")
    f = fs.open(path, "rb")
    size = info.get("size")
    if size is None:  # some HTTP servers do not say
        size = f.size if getattr(f, "size", None) is not None else -1
    return f, int(size)
