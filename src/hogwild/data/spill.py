"""A part of the training rows parsed to disk and memory-mapped: a worker's rows out of core.

:class:`DiskParts` takes the place of the in-memory collector of ``data.ranges.read_ranges``
and shuffles the rows as well as a permutation in memory would, with a two-pass external
shuffle: each parsed block's kept rows are prepared (labels mapped, features renumbered),
each is given one of B buckets at random, and the block is appended to staging files sorted
by bucket. :meth:`DiskParts.build` then reads one bucket at a time (its pieces from every
block), shuffles its rows in memory and appends them to four ``.npy`` files, which it maps
and unlinks at once: nothing is left on disk once the process ends (a worker killed while it
writes leaves its directory, which the next worker there removes). Every
row lands at a uniformly random place, as with ``np.random.permutation`` over the whole
part, while memory holds one block or one bucket (about ``BUCKET_BYTES``).

The mapping is shared and writable (``w+``) though nothing writes to it after the layout:
the kernels then see ordinary arrays (a read-only array would need kernels compiled for it),
and the pages are file pages, clean once written, which the kernel drops under memory
pressure and reads again when the threads reach them. They count towards neither
RLIMIT_DATA nor a container's anonymous memory (a cgroup limit reclaims them); an
address-space limit (``ulimit -v``) must still cover the mapping. The disk holds the rows
twice while they are laid out.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from hogwild.data.csr import INDEX_DTYPE, INDPTR_DTYPE, LABEL_DTYPE, VALUE_DTYPE, CSRData
from hogwild.errors import DataError

log = logging.getLogger(__name__)

_STAGED = (("indices", INDEX_DTYPE), ("values", VALUE_DTYPE), ("labels", LABEL_DTYPE))
# Bytes of rows (indices and values) per bucket: what build() holds, twice, at a time.
BUCKET_BYTES = 16 << 20
MAX_BUCKETS = 1 << 12

# A piece of one bucket in the staging files: its first non-zero, first row, row lengths.
Piece = tuple[int, int, npt.NDArray[np.int64]]


class DiskParts:
    """Kept rows collected block by block into files under ``where``; :meth:`build` maps them.

    ``prepare`` turns a block of raw rows (the file's labels and feature ids) into trainable
    ones; ``expected_nnz`` (the planned non-zeros) sizes the buckets; ``seed`` fixes the
    shuffle."""

    def __init__(self, where: Path, n_features: int, prepare: Callable[[CSRData], CSRData],
                 seed: int, expected_nnz: int) -> None:
        try:
            where.mkdir(parents=True, exist_ok=True)
            remove_orphans(where)
            self.dir = Path(tempfile.mkdtemp(prefix=f"part-{os.getpid()}-", dir=where))
        except OSError as exc:
            raise DataError(f"out_of_core: cannot make a directory for this worker's rows "
                            f"under {where}: {exc.strerror or exc}") from None
        self.n_features = n_features
        self.prepare = prepare
        self.rng = np.random.default_rng(seed)
        self.buckets = int(min(MAX_BUCKETS, max(1, -(-8 * expected_nnz // BUCKET_BYTES))))
        self.pieces: list[list[Piece]] = [[] for _ in range(self.buckets)]
        self.rows = 0
        self.nnz = 0
        # Open across add() calls, closed by build() or abort().
        self.staging = {name: open(self.dir / f"stage-{name}", "wb")  # noqa: SIM115
                        for name, _ in _STAGED}

    def add(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, mask: np.ndarray) -> None:
        """Keep the rows of a parsed block where ``mask`` is true: prepared, given a bucket
        each, staged in bucket order."""
        rows = np.flatnonzero(mask)
        if rows.shape[0] == 0:
            return
        bucket = self.rng.integers(self.buckets, size=rows.shape[0])
        order = np.argsort(bucket, kind="stable")
        block = CSRData(indptr, indices, values, labels, self.n_features).take(rows[order])
        block = self.prepare(block)
        try:
            block.indices.tofile(self.staging["indices"])
            block.values.tofile(self.staging["values"])
            block.labels.tofile(self.staging["labels"])
        except OSError as exc:
            self.abort()
            raise self._full(exc) from None
        lengths = np.diff(block.indptr)
        start = 0
        for b, count in enumerate(np.bincount(bucket, minlength=self.buckets).tolist()):
            if count:
                self.pieces[b].append((self.nnz + int(block.indptr[start]), self.rows + start,
                                       lengths[start:start + count]))
                start += count
        self.rows += block.n_rows
        self.nnz += block.nnz

    def build(self, n_features: int) -> CSRData:
        """The staged rows, shuffled bucket by bucket, memory-mapped (files unlinked)."""
        for f in self.staging.values():
            f.close()
        try:
            arrays = self._lay_out()
        except OSError as exc:
            self.abort()
            raise self._full(exc) from None
        shutil.rmtree(self.dir, ignore_errors=True)  # the mappings stay valid
        log.debug("out of core: %s training rows (%s non-zeros, %.1f MB, %d buckets) mapped "
                  "from disk under %s", f"{self.rows:,}", f"{self.nnz:,}",
                  sum(a.nbytes for a in arrays) / 1e6, self.buckets, self.dir.parent)
        return CSRData(*arrays, n_features)

    def abort(self) -> None:
        """Remove everything written (the read failed)."""
        for f in self.staging.values():
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _lay_out(self) -> tuple[Any, Any, Any, Any]:
        indptr = _new_array(self.dir / "indptr.npy", INDPTR_DTYPE, self.rows + 1)
        out = {name: _new_array(self.dir / f"{name}.npy", dtype, self.nnz if name != "labels"
                                else self.rows) for name, dtype in _STAGED}
        indptr[0] = 0
        row = nnz = 0
        readers = {name: open(self.dir / f"stage-{name}", "rb")  # noqa: SIM115 (closed below)
                   for name, _ in _STAGED}
        try:
            for pieces in self.pieces:
                if not pieces:
                    continue
                bucket = self._bucket(pieces, readers).take(
                    self.rng.permutation(sum(p[2].shape[0] for p in pieces)))
                k, n = bucket.n_rows, bucket.nnz
                out["indices"][nnz:nnz + n] = bucket.indices
                out["values"][nnz:nnz + n] = bucket.values
                out["labels"][row:row + k] = bucket.labels
                indptr[row + 1:row + k + 1] = bucket.indptr[1:] + nnz
                row += k
                nnz += n
        finally:
            for f in readers.values():
                f.close()
        self.pieces = []
        for name, _ in _STAGED:
            (self.dir / f"stage-{name}").unlink()
        for array in (indptr, *out.values()):
            if isinstance(array, np.memmap):
                array.flush()
        return indptr, out["indices"], out["values"], out["labels"]

    def _bucket(self, pieces: list[Piece], readers: Mapping[str, BinaryIO]) -> CSRData:
        """One bucket's rows, in staging order, read from its pieces."""
        lengths = np.concatenate([p[2] for p in pieces])
        indptr = np.zeros(lengths.shape[0] + 1, dtype=INDPTR_DTYPE)
        np.cumsum(lengths, out=indptr[1:])
        parts: dict[str, list[np.ndarray]] = {name: [] for name, _ in _STAGED}
        for first_nnz, first_row, piece in pieces:
            n = int(piece.sum())
            for name, dtype in _STAGED:
                count, first = (piece.shape[0], first_row) if name == "labels" else (n, first_nnz)
                f = readers[name]
                f.seek(first * np.dtype(dtype).itemsize)
                parts[name].append(np.fromfile(f, dtype=dtype, count=count))
        return CSRData(indptr, np.concatenate(parts["indices"]), np.concatenate(parts["values"]),
                       np.concatenate(parts["labels"]), self.n_features)

    def _full(self, exc: OSError) -> DataError:
        try:
            free = f"; {shutil.disk_usage(self.dir.parent).free / 1e6:,.1f} MB free there"
        except OSError:
            free = ""
        return DataError(f"out_of_core: cannot write this worker's rows under {self.dir.parent}: "
                         f"{exc.strerror or exc}{free} (the rows need about twice their size "
                         f"on disk while they are read: {self.nnz:,} non-zeros so far)")


def _new_array(path: Path, dtype: Any, length: int) -> Any:
    """A new ``.npy`` file of ``length`` items, mapped shared and writable (an empty array
    stays in memory: there is nothing to map). Its blocks are allocated before anything is
    written to the mapping: a full disk then fails here with ENOSPC, where a write to a
    mapped hole would kill the process with SIGBUS."""
    if length == 0:
        return np.zeros(0, dtype=dtype)
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(length,))
    with open(path, "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
    return array


def remove_orphans(where: Path) -> None:
    """Remove the directories under ``where`` of workers that ended while writing their rows
    (killed: a finished one leaves none); a directory names its process by pid."""
    for path in where.glob("part-*-*"):
        pid = path.name.split("-")[1]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        shutil.rmtree(path, ignore_errors=True)
        log.info("removed %s (%.1f MB) left by worker process %s, which ended while "
                 "writing its rows", path, size / 1e6, pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
