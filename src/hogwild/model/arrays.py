"""Validation of CSR inputs and weight vectors before they reach the compiled kernels."""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from hogwild.data.transform.reorder import count_features
from hogwild.errors import DataError


class CSRLike(Protocol):
    """Anything with the fields of ``hogwild.data.csr.CSRData``."""

    @property
    def indptr(self) -> npt.NDArray[np.integer]: ...
    @property
    def indices(self) -> npt.NDArray[np.integer]: ...
    @property
    def values(self) -> npt.NDArray[np.floating]: ...
    @property
    def labels(self) -> npt.NDArray[np.floating]: ...
    @property
    def n_features(self) -> int: ...


class CSRArrays(NamedTuple):
    """The arrays the kernels take, with the dtypes they were compiled for; ``weights``: the
    rows' weights (float32, finite and >= 0, checked by CSRData), or None: unweighted."""

    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int32]
    values: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32]
    weights: npt.NDArray[np.float32] | None = None

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0] - 1)


# Largest feature index of an index array (by identity) whose smallest is >= 0, so that the
# O(nnz) range scan runs once per data set rather than once per epoch. Entries die with their
# array. Index arrays are treated as immutable once handed to the model (as CSRData's are).
_max_index_cache: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}
_cache_lock = threading.Lock()


def _index_range(indices: npt.NDArray[np.int32]) -> tuple[int, int]:
    if indices.shape[0] == 0:
        return 0, -1
    key = id(indices)
    with _cache_lock:
        hit = _max_index_cache.get(key)
    if hit is not None and hit[0]() is indices:
        return 0, hit[1]
    lo, hi = int(indices.min()), int(indices.max())
    if lo >= 0:
        def forget(_ref: weakref.ref[np.ndarray], k: int = key) -> None:
            _max_index_cache.pop(k, None)

        try:
            ref = weakref.ref(indices, forget)
        except TypeError:  # not weak-referenceable: just do not cache
            return lo, hi
        with _cache_lock:
            _max_index_cache[key] = (ref, hi)
    return lo, hi


# Per-feature row counts of an index array (by identity), computed once per data set for
# the trainer's check that buffered features are ranked by frequency.
_counts_cache: dict[int, tuple[weakref.ref[np.ndarray], npt.NDArray[np.int64]]] = {}


def feature_counts(indices: npt.NDArray[np.int32], n_features: int) -> npt.NDArray[np.int64]:
    """How many stored entries each feature id in [0, n_features) has (for rows without
    repeated ids: its document frequency). Indices must be in range (see csr_arrays).
    Cached per index array, like the range check."""
    key = id(indices)
    with _cache_lock:
        hit = _counts_cache.get(key)
    if hit is not None and hit[0]() is indices and hit[1].shape[0] == n_features:
        return hit[1]
    counts = np.zeros(n_features, dtype=np.int64)
    count_features(indices, counts)

    def forget(_ref: weakref.ref[np.ndarray], k: int = key) -> None:
        _counts_cache.pop(k, None)

    try:
        ref = weakref.ref(indices, forget)
    except TypeError:
        return counts
    with _cache_lock:
        _counts_cache[key] = (ref, counts)
    return counts


def csr_arrays(data: CSRLike, n_features: int) -> CSRArrays:
    """Check ``data`` against a model of ``n_features`` features and return kernel-ready arrays.

    Arrays already in the kernel dtypes are used as they are (no copy). Raises DataError if a
    kernel could read out of bounds: inconsistent lengths, row pointers out of range, or
    feature indices outside [0, n_features).
    """
    indptr = np.ascontiguousarray(data.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(data.indices, dtype=np.int32)
    values = np.ascontiguousarray(data.values, dtype=np.float32)
    labels = np.ascontiguousarray(data.labels, dtype=np.float32)
    if indptr.ndim != 1 or indptr.shape[0] < 1:
        raise DataError("indptr must be a 1-D array of n_rows + 1 row pointers")
    n_rows = indptr.shape[0] - 1
    if labels.shape != (n_rows,):
        raise DataError(f"{labels.shape[0]} labels for {n_rows} rows")
    if indices.ndim != 1 or values.shape != indices.shape:
        raise DataError(f"{indices.shape[0]} indices but {values.shape[0]} values")
    if int(data.n_features) > n_features:
        raise DataError(f"data has {data.n_features} features, the model only {n_features}")
    if n_rows > 0 and (
        indptr[0] < 0 or indptr[-1] > indices.shape[0] or np.any(np.diff(indptr) < 0)
    ):
        raise DataError("row pointers are not non-decreasing within [0, nnz]")
    lo, hi = _index_range(indices)
    if lo < 0 or hi >= n_features:
        raise DataError(f"feature index out of range [0, {n_features}): min {lo}, max {hi}")
    weights = getattr(data, "weights", None)
    if weights is not None:
        weights = np.ascontiguousarray(weights, dtype=np.float32)
        if weights.shape != (n_rows,):
            raise DataError(f"{weights.shape[0]} row weights for {n_rows} rows")
    return CSRArrays(indptr, indices, values, labels, weights)


def new_weights(n_features: int) -> npt.NDArray[np.float64]:
    """A zero model: ``n_features`` weights followed by the bias."""
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    return np.zeros(n_features + 1, dtype=np.float64)


def check_weights(
    w: npt.NDArray[np.float64], n_features: int | None = None, *, writeable: bool = True
) -> npt.NDArray[np.float64]:
    """Return ``w`` itself if it is a usable model vector (1-D float64, C-contiguous, length
    n_features + 1 when given, writeable when asked); ValueError otherwise. Never copies:
    threads share this array."""
    if not isinstance(w, np.ndarray) or w.dtype != np.float64 or w.ndim != 1:
        raise ValueError("w must be a 1-D float64 numpy array")
    if w.shape[0] < 2 or (n_features is not None and w.shape[0] != n_features + 1):
        want = "at least 2" if n_features is None else f"n_features + 1 = {n_features + 1}"
        raise ValueError(f"w must have {want} entries, got {w.shape[0]}")
    if not w.flags.c_contiguous:
        raise ValueError("w must be C-contiguous")
    if writeable and not w.flags.writeable:
        raise ValueError("w must be writeable")
    return w
