"""svmlight/LIBSVM text files (plain or .gz): a multi-threaded compiled reader and a writer."""

from __future__ import annotations

import gzip
import logging
import os
import time
from pathlib import Path
from typing import Any, Union

import numpy as np

from hogwild.base.atomic import atomic_open
from hogwild.data._threads import default_threads
from hogwild.data.csr import CSRData
from hogwild.data.formats import _textformat as fmt
from hogwild.data.formats.blockparse import ParsedText, parse_text
from hogwild.data.formats.cache import CacheWriter, cache_path, find_cached
from hogwild.data.formats.cacheblocks import load_cached
from hogwild.data.formats.stream import load_text
from hogwild.data.formats.textblocks import data_file_errors
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.errors import DataError

__all__ = [
    "ParsedText",
    "PathLike",
    "default_threads",
    "parse_file",
    "parse_svmlight_buffer",
    "parse_text",
    "read_bytes",
    "read_svmlight",
    "write_svmlight",
]

PathLike = Union[str, "os.PathLike[str]"]
log = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"


def parse_svmlight_buffer(buf: np.ndarray, *, zero_based: bool = False,
                          n_features: int | None = None, threads: int | None = None,
                          source: str = "<buffer>") -> CSRData:
    """Parse svmlight text (uint8 array) into CSRData; n_features defaults to max index + 1."""
    p = parse_text(buf, zero_based=zero_based, n_features=n_features, threads=threads,
                   source=source)
    labels = p.labels.astype(np.float32)
    if labels.shape[0] and not np.isfinite(labels).all():  # pragma: no cover - kernel checks
        raise DataError(f"{source}: a label does not fit float32")
    nf = int(n_features) if n_features is not None else p.max_index + 1
    watch = LabelWatch()
    watch.add(p.labels, 0)
    return CSRData(p.indptr, p.indices, p.values, labels, nf, watch.note(source))


def read_bytes(path: PathLike) -> np.ndarray:
    """The text contents of ``path`` as a uint8 array, gunzipped if it is gzip data."""
    path = Path(path)
    with data_file_errors(path), open(path, "rb", buffering=0) as f:
        head = f.read(2)
        if head == _GZIP_MAGIC:
            f.seek(0)
            raw = f.read()
            try:
                return np.frombuffer(gzip.decompress(raw), dtype=np.uint8)
            except (OSError, EOFError, ValueError) as exc:
                raise DataError(f"{path}: cannot decompress: {exc}") from exc
        size = os.fstat(f.fileno()).st_size
        buf = np.empty(size, dtype=np.uint8)
        buf[:len(head)] = np.frombuffer(head, dtype=np.uint8)
        view = buf.data
        got = len(head)
        while got < size:
            k = f.readinto(view[got:])
            if not k:
                break
            got += k
        return buf[:got]


def read_svmlight(path: PathLike, *, n_features: int | None = None, zero_based: bool = False,
                  cache: bool = True, cache_dir: PathLike | None = None,
                  threads: int | None = None, shuffle_seed: int | None = None) -> CSRData:
    """Read a svmlight/LIBSVM file (plain or gzip) into CSRData, streaming it in blocks.

    Labels may be +-1, 0/1 or real numbers; ``#`` comments, ``qid:`` tokens and blank lines
    are skipped; feature ids are 1-based unless ``zero_based``. ``n_features`` (default:
    largest id seen) must exceed every id, else DataFormatError names the line. An empty
    file gives 0 rows. Rows come in file order, or in ``shuffle_order(n_rows,
    shuffle_seed)`` (placed directly, without a second copy). With ``cache`` the parsed
    arrays are kept under ``cache_dir`` (default: the user cache dir, see
    hogwild.data.formats.cache) and reused while the file's path, size and mtime are unchanged.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"data file not found: {path}")
    if not path.is_file():
        raise DataError(f"data path is not a file: {path}")
    where = cache_path(path, Path(cache_dir) if cache_dir is not None else None) if cache \
        else None
    t0 = time.perf_counter()
    if where is not None:
        # The checksums are computed while the arrays are read, not in a pass of their own.
        found = find_cached(path, where, zero_based=zero_based, check_content=False)
        if found is not None and (n_features is None or found.max_index < int(n_features)):
            data = load_cached(found, seed=shuffle_seed, threads=threads, source=path)
            if data is not None:
                log.info("%s: %s rows read from the data cache %s in %.2fs", path,
                         f"{data.n_rows:,}", where, time.perf_counter() - t0)
                return data if n_features is None else data.with_n_features(int(n_features))
        # Too small an n_features parses again below, so that the error names the line.
    if where is None:
        return load_text(path, zero_based=zero_based, n_features=n_features,
                         seed=shuffle_seed, threads=threads)
    # The cache keeps what the file holds (n_features = largest id + 1); widen afterwards.
    writer = CacheWriter(path, where, zero_based=zero_based)
    try:
        data = load_text(path, zero_based=zero_based, seed=shuffle_seed, threads=threads,
                         cache=writer)
    except BaseException:
        writer.abort()
        raise
    saved = writer.commit()
    log.info("%s: %s rows parsed in %.2fs%s", path, f"{data.n_rows:,}",
             time.perf_counter() - t0,
             f"; parsed arrays cached in {saved}" if saved else "")
    if n_features is not None and n_features != data.n_features:
        if data.max_index() >= int(n_features):
            return load_text(path, zero_based=zero_based, n_features=n_features,
                             seed=shuffle_seed, threads=threads)
        data = data.with_n_features(int(n_features))
    return data


def parse_file(path: PathLike, *, zero_based: bool = False, n_features: int | None = None,
               threads: int | None = None) -> CSRData:
    """Parse a svmlight file (plain or gzip) without any cache, rows in file order."""
    return load_text(Path(path), zero_based=zero_based, n_features=n_features,
                     threads=threads)


def write_svmlight(data: CSRData, path: PathLike, *, zero_based: bool = False,
                   digits: int = 9) -> None:
    """Write ``data`` as svmlight text (gzip if the name ends in .gz), atomically.

    Feature ids are written 1-based unless ``zero_based``. With the default 9 significant
    digits every float32 value reads back exactly; fewer digits give smaller, lossy files.
    """
    if not 1 <= digits <= 17:
        raise ValueError(f"digits must be in 1..17, got {digits}")
    path = Path(path)
    base = 0 if zero_based else 1
    # Format in row blocks of bounded size so memory stays ~64 MB whatever the data size.
    per_row = fmt.MAX_VALUE_BYTES + 1
    per_nnz = fmt.MAX_INDEX_BYTES + fmt.MAX_VALUE_BYTES
    budget = 64 << 20
    with atomic_open(path) as raw:
        out: Any = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) \
            if path.name.endswith(".gz") else raw
        r = 0
        while r < data.n_rows:
            r1 = r + 1
            size = per_row + per_nnz * int(data.indptr[r1] - data.indptr[r])
            # grow the block geometrically while it fits the budget
            step = 1
            while r1 < data.n_rows:
                r2 = min(data.n_rows, r1 + step)
                extra = per_row * (r2 - r1) + per_nnz * int(data.indptr[r2] - data.indptr[r1])
                if size + extra > budget:
                    break
                size += extra
                r1 = r2
                step *= 2
            buf = np.empty(size, dtype=np.uint8)
            n = fmt.format_rows(data.indptr, data.indices, data.values, data.labels, r, r1,
                                base, digits, buf)
            out.write(buf[:n].data)
            r = r1
        if out is not raw:
            out.close()
