"""A part of the training rows parsed to disk and memory-mapped: a worker's rows out of core.

:class:`DiskParts` takes the place of the in-memory collector of ``data.ranges.read_ranges``:
each parsed block's kept rows are shuffled, prepared (labels mapped, features renumbered) and
appended to staging files under a private directory. :meth:`DiskParts.build` then lays the
blocks out in a seeded random order in four ``.npy`` files (one sequential copy), maps them
and unlinks them at once, so nothing is left on disk once the process ends, however it ends.

The mapping is shared and writable (``r+``) though nothing writes to it: the kernels then
see ordinary arrays (a read-only array would need kernels compiled for it), and the pages
are file pages, clean once written, which the kernel drops under memory pressure and reads
again when the threads reach them. They count towards neither RLIMIT_DATA nor a
container's anonymous memory (a cgroup limit reclaims them); an address-space limit
(``ulimit -v``) must still cover the mapping. Memory held: one block while reading, and 8
bytes per row until the layout is written.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.data.csr import INDEX_DTYPE, INDPTR_DTYPE, LABEL_DTYPE, VALUE_DTYPE, CSRData
from hogwild.errors import DataError

log = logging.getLogger(__name__)

_STAGED = (("indices", INDEX_DTYPE), ("values", VALUE_DTYPE), ("labels", LABEL_DTYPE))


class DiskParts:
    """Kept rows collected block by block into files under ``where``; :meth:`build` maps them.

    ``prepare`` turns a block of raw rows (the file's labels and feature ids) into trainable
    ones; ``seed`` fixes the shuffle within blocks and the order of the blocks."""

    def __init__(self, where: Path, n_features: int, prepare: Callable[[CSRData], CSRData],
                 seed: int) -> None:
        try:
            where.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix="part-", dir=where))
        except OSError as exc:
            raise DataError(f"out_of_core: cannot make a directory for this worker's rows "
                            f"under {where}: {exc.strerror or exc}") from None
        self.n_features = n_features
        self.prepare = prepare
        self.rng = np.random.default_rng(seed)
        # Per block: its first non-zero and first row in the staging files, its row lengths.
        self.blocks: list[tuple[int, int, npt.NDArray[np.int64]]] = []
        self.rows = 0
        self.nnz = 0
        # Open across add() calls, closed by build() or abort().
        self.staging = {name: open(self.dir / f"stage-{name}", "wb")  # noqa: SIM115
                        for name, _ in _STAGED}

    def add(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, mask: np.ndarray) -> None:
        """Keep the rows of a parsed block where ``mask`` is true: shuffled, prepared, staged."""
        rows = np.flatnonzero(mask)
        if rows.shape[0] == 0:
            return
        rows = rows[self.rng.permutation(rows.shape[0])]
        block = CSRData(indptr, indices, values, labels, self.n_features).take(rows)
        block = self.prepare(block)
        try:
            block.indices.tofile(self.staging["indices"])
            block.values.tofile(self.staging["values"])
            block.labels.tofile(self.staging["labels"])
        except OSError as exc:
            self.abort()
            raise self._full(exc) from None
        self.blocks.append((self.nnz, self.rows, np.diff(block.indptr)))
        self.rows += block.n_rows
        self.nnz += block.nnz

    def build(self, n_features: int) -> CSRData:
        """The staged rows, blocks in a seeded random order, memory-mapped (files unlinked)."""
        for f in self.staging.values():
            f.close()
        try:
            arrays = self._lay_out()
        except OSError as exc:
            self.abort()
            raise self._full(exc) from None
        shutil.rmtree(self.dir, ignore_errors=True)  # the mappings stay valid
        log.debug("out of core: %s training rows (%s non-zeros, %.1f MB) mapped from disk "
                 "under %s", f"{self.rows:,}", f"{self.nnz:,}",
                 sum(a.nbytes for a in arrays) / 1e6, self.dir.parent)
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
        for b in self.rng.permutation(len(self.blocks)):
            first_nnz, first_row, lengths = self.blocks[int(b)]
            k, n = int(lengths.shape[0]), int(lengths.sum())
            for name, dtype in _STAGED:
                count, first, at = (k, first_row, row) if name == "labels" else (n, first_nnz, nnz)
                out[name][at:at + count] = np.fromfile(
                    self.dir / f"stage-{name}", dtype=dtype, count=count,
                    offset=first * np.dtype(dtype).itemsize)
            np.cumsum(lengths, out=indptr[row + 1:row + k + 1])
            indptr[row + 1:row + k + 1] += nnz
            row += k
            nnz += n
        self.blocks = []
        for name, _ in _STAGED:
            (self.dir / f"stage-{name}").unlink()
        for array in (indptr, *out.values()):
            if isinstance(array, np.memmap):
                array.flush()
        return indptr, out["indices"], out["values"], out["labels"]

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
    stays in memory: there is nothing to map)."""
    if length == 0:
        return np.zeros(0, dtype=dtype)
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(length,))
