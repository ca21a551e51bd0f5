"""CSRData: the compressed-sparse-row container every part of hogwild passes around."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.base.jit import njit
from hogwild.base.regions import rows_array, rows_grown
from hogwild.data._threads import default_threads, run_parallel
from hogwild.errors import DataError

INDPTR_DTYPE = np.int64
INDEX_DTYPE = np.int32
VALUE_DTYPE = np.float32
LABEL_DTYPE = np.float32
WEIGHT_DTYPE = np.float32

# Non-zeros per thread from which take() copies on several threads.
PARALLEL_TAKE_NNZ = 1 << 20


@njit(nogil=True, cache=True)
def _gather_rows(indptr: Any, indices: Any, values: Any, rows: Any, new_indptr: Any,
                 out_indices: Any, out_values: Any) -> None:  # pragma: no cover - compiled
    """Copy the given rows, in order, into preallocated output arrays."""
    for k in range(rows.shape[0]):
        r = rows[k]
        src = indptr[r]
        n = indptr[r + 1] - src
        dst = new_indptr[k]
        for j in range(n):
            out_indices[dst + j] = indices[src + j]
            out_values[dst + j] = values[src + j]


@njit(nogil=True, cache=True)
def check_structure(indptr: Any, indices: Any, values: Any, labels: Any,
                     n_features: int) -> Any:  # pragma: no cover - compiled
    """Return (code, position) of the first structural fault, or (0, -1) if there is none.

    Codes: 1 indptr decreases, 2 index out of range, 3 indices not strictly increasing,
    4 value not finite, 5 label not finite.
    """
    n_rows = indptr.shape[0] - 1
    for r in range(n_rows):
        a = indptr[r]
        b = indptr[r + 1]
        if b < a:
            return 1, r
        prev = -1
        for j in range(a, b):
            c = indices[j]
            if c < 0 or c >= n_features:
                return 2, j
            if c <= prev:
                return 3, j
            prev = c
            v = values[j]
            if not np.isfinite(v):
                return 4, j
        if not np.isfinite(labels[r]):
            return 5, r
    return 0, -1


def check_row_weights(weights: npt.ArrayLike, n_rows: int) -> np.ndarray:
    """``weights`` as a contiguous float32 vector of ``n_rows`` finite values >= 0, or a
    DataError naming the first bad row."""
    try:
        # A weight beyond float32 becomes inf here, which the check below names (numpy's
        # own overflow warning would only repeat it, without the row).
        with np.errstate(over="ignore"):
            w = np.ascontiguousarray(weights, dtype=WEIGHT_DTYPE)
    except (TypeError, ValueError):
        raise DataError("row weights must be numbers") from None
    if w.ndim != 1 or w.shape[0] != n_rows:
        raise DataError(f"row weights must be one per row: {n_rows} rows, weights of shape "
                        f"{w.shape}")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise DataError(f"weight of row {row} must be finite and >= 0, got {float(w[row])}")
    return w


@dataclass(frozen=True, eq=False)
class CSRData:
    """Rows of a sparse data set with their labels.

    ``indptr`` int64 (n_rows + 1, starts at 0), ``indices`` int32 0-based and strictly
    increasing within a row, ``values`` float32, ``labels`` float32. ``weights``: an
    optional float32 weight per row (finite, >= 0; None = every row weighs 1), by which the
    trainers scale the row's gradient; row selections carry it along. Construction coerces
    dtypes and checks lengths (O(1)) and the weights (O(n_rows)); :meth:`validate` runs the
    full check.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    labels: np.ndarray
    n_features: int
    # Set by the text parsers when a label does not survive float32 as written (see
    # hogwild.data.transform.labelcheck): a classifier refuses such data, a regression ignores it.
    label_note: str | None = None
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        # Coercion is a no-op (no copy) when the arrays already have the contract's dtypes.
        for name, dtype in (("indptr", INDPTR_DTYPE), ("indices", INDEX_DTYPE),
                            ("values", VALUE_DTYPE), ("labels", LABEL_DTYPE)):
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            if arr.ndim != 1:
                raise DataError(f"CSR {name} must be one-dimensional, got shape {arr.shape}")
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "n_features", int(self.n_features))
        if self.n_features < 0:
            raise DataError(f"n_features must be >= 0, got {self.n_features}")
        if self.indptr.shape[0] < 1:
            raise DataError("CSR indptr must hold at least one entry")
        if self.indices.shape[0] != self.values.shape[0]:
            raise DataError(f"CSR has {self.indices.shape[0]} indices but "
                            f"{self.values.shape[0]} values")
        if self.labels.shape[0] != self.indptr.shape[0] - 1:
            raise DataError(f"CSR has {self.indptr.shape[0] - 1} rows but "
                            f"{self.labels.shape[0]} labels")
        if int(self.indptr[0]) != 0 or int(self.indptr[-1]) != self.indices.shape[0]:
            raise DataError(f"CSR indptr must run from 0 to nnz={self.indices.shape[0]}, got "
                            f"{int(self.indptr[0])}..{int(self.indptr[-1])}")
        if self.weights is not None:
            object.__setattr__(self, "weights", check_row_weights(self.weights, self.n_rows))

    # --- sizes -------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        """Number of rows (examples)."""
        return int(self.indptr.shape[0] - 1)

    @property
    def nnz(self) -> int:
        """Number of stored non-zeros."""
        return int(self.indices.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (the four, and the row weights when there are some)."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.values.nbytes
                   + self.labels.nbytes + (0 if self.weights is None else self.weights.nbytes))

    def __repr__(self) -> str:
        return (f"CSRData(n_rows={self.n_rows}, n_features={self.n_features}, "
                f"nnz={self.nnz})")

    # --- row selection -----------------------------------------------------------------
    def take(self, rows: np.ndarray) -> CSRData:
        """The given rows in the given order, physically copied (repeats allowed)."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if rows.ndim != 1:
            raise IndexError(f"row selection must be one-dimensional, got shape {rows.shape}")
        if rows.shape[0] and (int(rows.min()) < 0 or int(rows.max()) >= self.n_rows):
            raise IndexError(f"row index out of range [0, {self.n_rows})")
        lengths = self.indptr[rows + 1] - self.indptr[rows]
        new_indptr = np.zeros(rows.shape[0] + 1, dtype=INDPTR_DTYPE)
        np.cumsum(lengths, out=new_indptr[1:])
        nnz = int(new_indptr[-1])
        out_indices = np.empty(nnz, dtype=INDEX_DTYPE)
        out_values = np.empty(nnz, dtype=VALUE_DTYPE)
        # A large selection is copied on every core, each thread a run of output rows (a
        # worker's shuffle of its 1M rows: 2.1 s on one thread, 1.0 s on two; bench/NOTES.md).
        pieces = max(1, min(default_threads(), nnz // PARALLEL_TAKE_NNZ))
        cuts = [rows.shape[0] * i // pieces for i in range(pieces + 1)]
        run_parallel(_gather_rows, [(self.indptr, self.indices, self.values, rows[a:b],
                                     new_indptr[a:b + 1], out_indices, out_values)
                                    for a, b in itertools.pairwise(cuts)], name="take")
        return CSRData(new_indptr, out_indices, out_values, self.labels[rows], self.n_features,
                       self.label_note, None if self.weights is None else self.weights[rows])

    def slice(self, start: int, stop: int) -> CSRData:
        """Contiguous rows ``start:stop`` (Python slice rules); arrays are views, indptr rebased."""
        start, stop, _ = slice(start, stop).indices(self.n_rows)
        stop = max(start, stop)
        a = int(self.indptr[start])
        b = int(self.indptr[stop])
        return CSRData(self.indptr[start:stop + 1] - a, self.indices[a:b], self.values[a:b],
                       self.labels[start:stop], self.n_features, self.label_note,
                       None if self.weights is None else self.weights[start:stop])

    def with_n_features(self, n: int) -> CSRData:
        """The same rows declared over ``n`` features; DataError if an index is ``>= n``."""
        n = int(n)
        if n < 0:
            raise DataError(f"n_features must be >= 0, got {n}")
        if self.nnz and int(self.indices.max()) >= n:
            raise DataError(f"feature index {int(self.indices.max())} does not fit "
                            f"n_features={n}")
        return CSRData(self.indptr, self.indices, self.values, self.labels, n, self.label_note,
                       self.weights)

    def with_weights(self, weights: npt.ArrayLike | None) -> CSRData:
        """The same rows with these row weights (None: unweighted); DataError when they are
        not one finite value >= 0 per row."""
        return CSRData(self.indptr, self.indices, self.values, self.labels, self.n_features,
                       self.label_note, None if weights is None else np.asarray(weights))

    def max_index(self) -> int:
        """Largest stored feature index, or -1 if there are no non-zeros."""
        return int(self.indices.max()) if self.nnz else -1

    # --- checks ------------------------------------------------------------------------
    def validate(self) -> None:
        """Full structural check (monotone indptr, indices in range and strictly increasing
        per row, finite values and labels); raises DataError naming the first fault."""
        code, pos = check_structure(self.indptr, self.indices, self.values, self.labels,
                                     self.n_features)
        code = int(code)
        pos = int(pos)
        if code == 0:
            return
        if code == 1:
            raise DataError(f"CSR indptr decreases at row {pos}")
        if code == 5:
            raise DataError(f"label of row {pos} is not finite")
        row = int(np.searchsorted(self.indptr, pos, side="right")) - 1
        if code == 2:
            raise DataError(f"row {row}: feature index {int(self.indices[pos])} outside "
                            f"[0, {self.n_features})")
        if code == 3:
            raise DataError(f"row {row}: feature indices not strictly increasing at "
                            f"{int(self.indices[pos])}")
        raise DataError(f"row {row}: value of feature {int(self.indices[pos])} is not finite")

    # --- scipy interop -----------------------------------------------------------------
    def to_scipy(self) -> Any:
        """A ``scipy.sparse.csr_matrix`` sharing (where scipy allows) the arrays."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.values, self.indices, self.indptr),
                             shape=(self.n_rows, self.n_features))

    @classmethod
    def from_scipy(cls, X: Any, y: Any, weights: npt.ArrayLike | None = None) -> CSRData:
        """Build from any scipy sparse matrix (or dense array), a label vector and optional
        row weights."""
        import scipy.sparse as sp

        m = sp.csr_matrix(X)
        if not m.has_canonical_format:
            m = m.copy()
            m.sum_duplicates()  # also sorts the indices of each row
        labels = np.asarray(y, dtype=LABEL_DTYPE).ravel()
        return cls(np.asarray(m.indptr, dtype=INDPTR_DTYPE),
                   np.asarray(m.indices, dtype=INDEX_DTYPE),
                   np.asarray(m.data, dtype=VALUE_DTYPE), labels, int(m.shape[1]),
                   weights=None if weights is None else np.asarray(weights))


def concat_rows(parts: Iterable[CSRData], n_features: int, rows: int = 0,
                nnz: int = 0) -> CSRData:
    """The rows of ``parts`` one after another, over ``n_features`` (row weights kept when
    a part has them, 1 filled in for the parts without).

    Each part is copied as it comes into arrays of ``rows`` and ``nnz`` (estimates are
    enough): given a generator, the parts never live beside the result. A worker gathering
    its 5M rows of Parquet as a list and concatenating it peaked at 9.5 GB for 3.1 GB of
    rows. The rows' arrays grow and are trimmed in place (``resize`` reallocates: a large
    block's pages are remapped, not copied); the non-zeros are in small pages
    (base.regions.rows_array), copied into larger ones when they grow, and their part never
    written holds no memory."""
    indptr = np.zeros(rows + 1, INDPTR_DTYPE)
    indices = rows_array(nnz, INDEX_DTYPE)
    values = rows_array(nnz, VALUE_DTYPE)
    labels = np.empty(rows, LABEL_DTYPE)
    weights: np.ndarray | None = None
    r = z = 0
    for part in parts:
        k, n = part.n_rows, part.nnz
        if r + k > labels.shape[0]:
            size = max(r + k, labels.shape[0] * 5 // 4 + 1024)
            labels.resize(size, refcheck=False)
            indptr.resize(size + 1, refcheck=False)
            if weights is not None:
                weights.resize(size, refcheck=False)
        if z + n > indices.shape[0]:
            size = max(z + n, indices.shape[0] * 3 // 2 + 65536)
            indices, values = rows_grown(indices, size, z), rows_grown(values, size, z)
        if part.weights is not None and weights is None:
            weights = np.ones(labels.shape[0], WEIGHT_DTYPE)
        indices[z:z + n] = part.indices
        values[z:z + n] = part.values
        labels[r:r + k] = part.labels
        indptr[r + 1:r + k + 1] = part.indptr[1:] + z
        if weights is not None:
            weights[r:r + k] = 1.0 if part.weights is None else part.weights
        r, z = r + k, z + n
    for array, size in ((labels, r), (indptr, r + 1), (weights, r)):
        if array is not None and array.shape[0] != size:
            array.resize(size, refcheck=False)
    return CSRData(indptr, indices[:z], values[:z], labels, n_features, None, weights)
