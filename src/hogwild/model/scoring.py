"""Margins of a saved linear model on CSR rows: compiled kernels run on row blocks in threads."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hogwild.base.jit import njit
from hogwild.data._threads import default_threads, run_parallel
from hogwild.data.csr import CSRData
from hogwild.model import kernels
from hogwild.model.arrays import CSRLike, csr_arrays

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

# Non-zeros a thread must get before the rows are split: one thread scores 1M non-zeros in
# about 5 ms, and below that starting a thread (and, on a busy machine, waiting for a core to
# run it) was measured to cost more than it saved (SpamAssassin, 592k non-zeros: 1 ms on one
# thread, 1-24 ms on two with the other core busy).
MIN_NNZ_PER_THREAD = 1_000_000


@njit(nogil=True, cache=True)
def decision_multi(indptr: I64, indices: I32, values: F32, wt: F64, n_features: int,
                   out: F64) -> None:  # pragma: no cover - compiled
    """Margins of K one-vs-rest models: ``out[r, k] = wt[d, k] + sum_j wt[j, k] x[r, j]``.

    ``wt`` is the transposed weight matrix, ``(n_features + 1, K)`` C-contiguous, so the K
    weights of one feature are adjacent and a non-zero reads one cache line, not K."""
    n_rows = indptr.shape[0] - 1
    n_classes = wt.shape[1]
    nf = np.uint64(n_features)
    for r in range(n_rows):
        for c in range(n_classes):
            out[r, c] = wt[nf, c]
        for k in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
            j = np.uint64(indices[k])
            v = np.float64(values[k])
            for c in range(n_classes):
                out[r, c] += wt[j, c] * v


def drop_unknown_features(data: CSRLike, n_features: int) -> tuple[CSRData, int]:
    """The rows restricted to feature ids below ``n_features`` (a model's width, which the
    result declares), and how many stored entries were dropped. No copy when nothing is
    dropped."""
    indptr = np.ascontiguousarray(data.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(data.indices, dtype=np.int32)
    values = np.ascontiguousarray(data.values, dtype=np.float32)
    labels = np.ascontiguousarray(data.labels, dtype=np.float32)
    keep = indices < n_features
    dropped = int(keep.shape[0] - np.count_nonzero(keep))
    if dropped:
        # Per-row count of kept entries from the cumulative sum at the row boundaries.
        kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
        indptr = kept_before[indptr]
        indices, values = indices[keep], values[keep]
    return CSRData(indptr, indices, values, labels, n_features), dropped


def margins(w: F64, data: CSRLike, threads: int | None = None) -> F64:
    """Margins of every row: ``(n,)`` for a weight vector ``(d + 1,)``, ``(n, K)`` for a
    one-vs-rest matrix ``(K, d + 1)``. Rows are split into contiguous blocks, one per thread
    (each block is a slice of the same arrays: no copy). Feature ids must be below d
    (see :func:`drop_unknown_features`)."""
    w = np.ascontiguousarray(w, dtype=np.float64)
    if w.ndim not in (1, 2):
        raise ValueError(f"weights must be (d + 1,) or (K, d + 1), got {w.shape}")
    n_features = int(w.shape[-1]) - 1
    a = csr_arrays(data, n_features)
    n = a.n_rows
    out = np.empty((n,) if w.ndim == 1 else (n, w.shape[0]), dtype=np.float64)
    if n == 0:
        return out
    nnz = int(a.indptr[-1] - a.indptr[0])
    n_threads = max(1, min(threads or default_threads(), n, nnz // MIN_NNZ_PER_THREAD or 1))
    bounds = [n * k // n_threads for k in range(n_threads + 1)]
    blocks = [(bounds[k], bounds[k + 1]) for k in range(n_threads)]
    if w.ndim == 1:
        # The kernel reads indptr[r] as positions in the whole index array, so a slice of
        # indptr scores just that block.
        run_parallel(kernels.decision, [(a.indptr[lo:hi + 1], a.indices, a.values, w,
                                         n_features, out[lo:hi]) for lo, hi in blocks])
    else:
        wt = np.ascontiguousarray(w.T)
        run_parallel(decision_multi, [(a.indptr[lo:hi + 1], a.indices, a.values, wt,
                                       n_features, out[lo:hi]) for lo, hi in blocks])
    return out


def warmup() -> None:
    """Compile (or load from cache) the scoring kernels with the production dtypes."""
    indptr = np.array([0, 1, 2], dtype=np.int64)
    indices = np.array([0, 1], dtype=np.int32)
    values = np.array([1.0, 2.0], dtype=np.float32)
    wt = np.zeros((3, 2), dtype=np.float64)
    decision_multi(indptr, indices, values, wt, 2, np.empty((2, 2), dtype=np.float64))
    kernels.decision(indptr, indices, values, np.zeros(3), 2, np.empty(2))
