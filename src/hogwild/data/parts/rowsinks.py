"""Where a worker's read of its ranges puts the rows it keeps: in memory, block by block."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from hogwild.base.regions import rows_array, rows_grown
from hogwild.data.csr import INDEX_DTYPE, INDPTR_DTYPE, LABEL_DTYPE, VALUE_DTYPE, CSRData
from hogwild.errors import DataError


class RowSink(Protocol):
    """Where :func:`read_ranges` puts the rows it keeps, block by block."""

    def add(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, mask: np.ndarray) -> None: ...

    def build(self, n_features: int) -> CSRData: ...


Kept = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _kept(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, labels: np.ndarray,
          mask: np.ndarray) -> Kept | None:
    """The rows of a parsed block where ``mask`` is true, as (row lengths, indices, values,
    labels); None when there are none. Every row kept (a sampled plan's ranges): the block's
    own arrays, not copies."""
    if mask.all():
        if mask.shape[0] == 0:
            return None
        return np.diff(indptr), indices[:indptr[-1]], values[:indptr[-1]], labels
    rows = np.flatnonzero(mask)
    if rows.shape[0] == 0:
        return None
    nnz_mask = np.repeat(mask, np.diff(indptr))
    return (indptr[rows + 1] - indptr[rows], indices[nnz_mask], values[nnz_mask],
            labels[rows])


class RowParts:
    """Rows collected block by block in memory (raw labels)."""

    def __init__(self) -> None:
        self.lengths: list[np.ndarray] = []
        self.indices: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def add(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, mask: np.ndarray) -> None:
        """Keep the rows of a parsed block where ``mask`` is true."""
        kept = _kept(indptr, indices, values, labels, mask)
        if kept is not None:
            for into, part in zip((self.lengths, self.indices, self.values, self.labels), kept,
                                  strict=True):
                into.append(part)

    def build(self, n_features: int) -> CSRData:
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        return CSRData(indptr,
                       np.concatenate(self.indices) if self.indices else np.zeros(0, np.int32),
                       np.concatenate(self.values) if self.values else np.zeros(0, np.float32),
                       np.concatenate(self.labels).astype(np.float32) if self.labels
                       else np.zeros(0, np.float32), n_features)


class FilledRows:
    """Rows copied block by block into arrays of the planned size (raw labels): nothing held
    beside them and no concatenation, so the rows take their size once (pieces and their
    concatenation took it twice, and the pieces' freed heap stayed with the process).
    DataError as soon as the file holds more training rows or non-zeros than planned, unless
    ``grow`` (a sampled plan's estimates): then the rows' arrays grow in place (``resize``
    reallocates; a large block's pages are moved, not copied) and the non-zeros' are copied
    into larger ones (rare: the estimate has 2 % to spare). The non-zeros are in small pages
    (base.regions.rows_array); the part of them never written holds no memory."""

    def __init__(self, name: str, rows: int, nnz: int, grow: bool = False) -> None:
        self.name = name
        self.grow = grow
        self.indptr = np.zeros(rows + 1, dtype=INDPTR_DTYPE)
        self.indices = rows_array(nnz, INDEX_DTYPE)
        self.values = rows_array(nnz, VALUE_DTYPE)
        self.labels = np.empty(rows, dtype=LABEL_DTYPE)
        self.rows = 0
        self.nnz = 0

    def add(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, mask: np.ndarray) -> None:
        """Copy the rows of a parsed block where ``mask`` is true after those kept so far."""
        kept = _kept(indptr, indices, values, labels, mask)
        if kept is None:
            return
        lengths, kept_indices, kept_values, kept_labels = kept
        k, n = lengths.shape[0], kept_indices.shape[0]
        r0, z0 = self.rows, self.nnz
        if self.grow:
            self._room(r0 + k, z0 + n)
        elif r0 + k > self.labels.shape[0] or z0 + n > self.indices.shape[0]:
            raise DataError(f"{self.name} differs from the file the coordinator planned with: "
                            f"more than the planned {self.labels.shape[0]:,} training rows "
                            f"with {self.indices.shape[0]:,} non-zeros (shipping: local needs "
                            "every node to read the same file)")
        self.indices[z0:z0 + n] = kept_indices
        self.values[z0:z0 + n] = kept_values
        self.labels[r0:r0 + k] = kept_labels
        ends = self.indptr[r0 + 1:r0 + k + 1]
        np.cumsum(lengths, out=ends)
        ends += z0
        self.rows, self.nnz = r0 + k, z0 + n

    def _room(self, rows: int, nnz: int) -> None:
        """Grown arrays (nothing else views them) holding at least ``rows`` and ``nnz``."""
        if rows > self.labels.shape[0]:
            size = max(rows, self.labels.shape[0] * 5 // 4 + 1024)
            self.labels.resize(size, refcheck=False)
            self.indptr.resize(size + 1, refcheck=False)
        if nnz > self.indices.shape[0]:
            size = max(nnz, self.indices.shape[0] * 5 // 4 + 65536)
            self.indices = rows_grown(self.indices, size, self.nnz)
            self.values = rows_grown(self.values, size, self.nnz)

    def build(self, n_features: int) -> CSRData:
        """The rows kept (fewer than planned: read_ranges then says so)."""
        r, z = self.rows, self.nnz
        if self.grow:  # the rows' slack given back (in place, as they grew)
            self.indptr.resize(r + 1, refcheck=False)
            self.labels.resize(r, refcheck=False)
        return CSRData(self.indptr[:r + 1], self.indices[:z], self.values[:z], self.labels[:r],
                       n_features)
