"""The parsed-array cache read back block by block (each block checked), and filled from text."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.data._threads import KernelThreads, default_threads
from hogwild.data.csr import CSRData, check_structure
from hogwild.data.formats.blockparse import parse_text
from hogwild.data.formats.cache import ARRAYS, CachedArrays, CacheWriter, new_hasher, warn_damaged
from hogwild.data.formats.placement import RowTarget
from hogwild.data.formats.textblocks import BLOCK_BYTES, Readable, text_blocks
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.errors import DataError, DataFormatError

log = logging.getLogger(__name__)


def cached_blocks(found: CachedArrays, block_nnz: int = BLOCK_BYTES // 8,
                  indptr: np.ndarray | None = None, start: int = 0,
                  stop: int | None = None) -> Iterator[tuple[int, CSRData]]:
    """Rows ``start:stop`` (default: all) of a cache found by hogwild.data.formats.cache.find_cached,
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
            code, _ = check_structure(local, idx, val, lab, n_features)
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
                block_nnz: int = BLOCK_BYTES // 8, source: Path | str = "") -> CSRData | None:
    """The rows of a cache, read block by block (see cached_blocks) straight into their
    final places (shuffled by ``seed`` as in load_text); None if the cache turns out damaged
    (the caller re-parses). Checksums that find_cached left ``unchecked`` are computed on
    the blocks as they are read (they cover every array's data, in order, once): a
    mismatch is warned about as find_cached does (naming ``source``) and gives None."""
    n_threads = max(1, threads if threads is not None else default_threads())
    hashers = {name: new_hasher() for name in found.unchecked}
    try:
        indptr = read_cached_indptr(found)
        if hashers:
            hashers["indptr"].update(indptr.data)
        with KernelThreads(n_threads, "place") as pool:
            target = RowTarget.create(np.diff(indptr), seed, n_threads, pool.run)
            _place_blocks(found, block_nnz, indptr, target, hashers)
    except DataError as exc:
        log.debug("ignoring unusable cache %s: %s", found.where, exc)
        return None
    for name in ARRAYS:
        if name in hashers and hashers[name].hexdigest() != found.unchecked[name]:
            warn_damaged(found.where, name, source)
            return None
    return target.finish(found.max_index + 1, found.label_note)


def _place_blocks(found: CachedArrays, block_nnz: int, indptr: np.ndarray, target: RowTarget,
                  hashers: dict[str, Any]) -> None:
    """Copy the cache's blocks into ``target``, hashing them on the way where asked."""
    for r0, block in cached_blocks(found, block_nnz, indptr):
        if hashers:
            hashers["indices"].update(block.indices.data)
            hashers["values"].update(block.values.data)
            hashers["labels"].update(block.labels.data)
        target.put(block.indptr, block.indices, block.values, block.labels, r0,
                   str(found.where))


def parse_to_cache(path: Path, cache: CacheWriter, *, zero_based: bool = False,
                   threads: int | None = None, block_bytes: int = BLOCK_BYTES) -> int:
    """Parse a svmlight file block by block into ``cache`` only (nothing is kept in memory:
    for data larger than memory); returns the number of rows. The caller commits."""
    source = str(path)
    rows = 0
    lines_before = 0
    watch = LabelWatch()
    with KernelThreads(threads if threads is not None else default_threads(), "parse") as pool:
        for block in text_blocks(path, block_bytes):
            try:
                p = parse_text(block, zero_based=zero_based, threads=threads, source=source,
                               run=pool.run)
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
