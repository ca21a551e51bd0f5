"""Feature renumbering by document frequency, so the most frequent features get the smallest ids.

Why: HOGWILD! threads that share one weight vector contend for the cache lines of the most
frequent features. With those features numbered 0..K-1 and each row's indices sorted, the SGD
kernel finds a row's frequent features as a prefix of the row (one compare per non-zero) and
can keep them in a per-thread buffer (see ``hogwild.model.kernels``). Renumbering changes no
prediction: the margin is a sum over (index, value) pairs, and the weights are mapped back to
the original ids before a model is saved.

A permutation is held as ``new_id_of_old`` (int32, length n_features): feature ``f`` of the
input data becomes feature ``new_id_of_old[f]``. The bias, stored after the features in a
weight vector, never moves.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from hogwild.data.csr import INDEX_DTYPE, CSRData
from hogwild.errors import DataError

I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]

# Rows per parallel piece below which renumbering runs on one thread.
_MIN_ROWS_PER_THREAD = 50_000


def document_frequency(data: CSRData) -> npt.NDArray[np.int64]:
    """Number of rows holding each feature (rows store a feature at most once)."""
    return np.bincount(data.indices, minlength=data.n_features).astype(np.int64, copy=False)


def frequency_order(data: CSRData) -> I32:
    """``new_id_of_old``: features by descending document frequency in ``data`` (ties by id)."""
    df = document_frequency(data)
    # Stable sort of the negated counts keeps equal counts in id order.
    old_by_rank = np.argsort(-df, kind="stable")
    new_id_of_old = np.empty(data.n_features, dtype=np.int32)
    new_id_of_old[old_by_rank] = np.arange(data.n_features, dtype=np.int32)
    return new_id_of_old


def identity_order(n_features: int) -> I32:
    """The permutation that keeps every id."""
    return np.arange(n_features, dtype=np.int32)


def check_order(new_id_of_old: npt.ArrayLike, n_features: int) -> I32:
    """``new_id_of_old`` as an int32 array if it is a permutation of range(n_features);
    DataError otherwise."""
    order = np.ascontiguousarray(new_id_of_old, dtype=np.int32)
    if order.ndim != 1 or order.shape[0] != n_features:
        raise DataError(f"feature order has shape {order.shape}, expected ({n_features},)")
    if n_features and (int(order.min()) < 0 or int(order.max()) >= n_features
                       or np.any(np.bincount(order, minlength=n_features) != 1)):
        raise DataError(f"feature order is not a permutation of 0..{n_features - 1}")
    return order


@njit(nogil=True, cache=True)
def _renumber_rows(r0: int, r1: int, indptr: Any, indices: Any, value_bits: Any,
                   new_id_of_old: Any, out_indices: Any,
                   out_value_bits: Any) -> None:  # pragma: no cover - compiled
    """Map the indices of rows r0:r1 and sort each row by new index.

    Each (new index, value) pair is packed into one int64 (index in the high half, the
    float32's bits in the low half) so that one in-place sort of a scratch slice orders a row
    without allocating per row.
    """
    longest = 0
    for r in range(r0, r1):
        longest = max(longest, indptr[r + 1] - indptr[r])
    keys = np.empty(longest, dtype=np.int64)
    low = np.int64(0xFFFFFFFF)
    for r in range(r0, r1):
        a = indptr[r]
        n = indptr[r + 1] - a
        for k in range(n):
            keys[k] = (np.int64(new_id_of_old[indices[a + k]]) << 32) | (
                np.int64(value_bits[a + k]) & low)
        row = keys[:n]
        row.sort()
        for k in range(n):
            key = row[k]
            out_indices[a + k] = np.int32(key >> 32)
            out_value_bits[a + k] = np.uint32(key & low)


def renumber(data: CSRData, new_id_of_old: npt.ArrayLike) -> CSRData:
    """The same rows with feature ``f`` renamed ``new_id_of_old[f]``, indices re-sorted
    ascending within each row (so the most frequent features come first). Rows, values and
    labels keep their order; ``indptr`` and ``labels`` are shared with ``data``."""
    order = check_order(new_id_of_old, data.n_features)
    nnz = data.nnz
    out_indices = np.empty(nnz, dtype=INDEX_DTYPE)
    out_values = np.empty(nnz, dtype=np.float32)
    value_bits = data.values.view(np.uint32)
    out_bits = out_values.view(np.uint32)
    n_rows = data.n_rows
    pieces = max(1, min(os.cpu_count() or 1, 8, n_rows // _MIN_ROWS_PER_THREAD))
    bounds = [n_rows * i // pieces for i in range(pieces + 1)]
    args = (data.indptr, data.indices, value_bits, order, out_indices, out_bits)
    if pieces == 1:
        _renumber_rows(0, n_rows, *args)
    else:
        # The kernel releases the GIL: one thread per block of rows.
        with ThreadPoolExecutor(max_workers=pieces) as pool:
            futures = [pool.submit(_renumber_rows, bounds[i], bounds[i + 1], *args)
                       for i in range(pieces)]
            for f in futures:
                f.result()
    return CSRData(data.indptr, out_indices, out_values, data.labels, data.n_features)


def restore_weights(w: F64, new_id_of_old: npt.ArrayLike) -> F64:
    """A model trained on renumbered data, as weights over the original feature ids (a new
    array; the bias stays last)."""
    w = np.asarray(w, dtype=np.float64)
    n_features = w.shape[0] - 1
    order = check_order(new_id_of_old, n_features)
    out = np.empty_like(w)
    out[:n_features] = w[order]
    out[n_features] = w[n_features]
    return out


def to_internal(w: F64, new_id_of_old: npt.ArrayLike) -> F64:
    """The inverse of :func:`restore_weights`: original-id weights in renumbered order."""
    w = np.asarray(w, dtype=np.float64)
    n_features = w.shape[0] - 1
    order = check_order(new_id_of_old, n_features)
    out = np.empty_like(w)
    out[order] = w[:n_features]
    out[n_features] = w[n_features]
    return out
