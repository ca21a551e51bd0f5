"""Compile (or load from numba's cache) every CPU kernel with the dtypes used in production."""

from __future__ import annotations

import numpy as np

from hogwild.data.transform.reorder import count_features
from hogwild.model import delta_kernels, kernels, mlp_kernels


def warmup() -> None:
    """Compile (or load from the on-disk cache) every kernel with the dtypes used in
    production, so that timings exclude JIT compilation."""
    indptr = np.array([0, 2, 3], dtype=np.int64)
    indices = np.array([0, 1, 1], dtype=np.int32)
    values = np.array([0.5, 0.5, 1.0], dtype=np.float32)
    labels = np.array([1.0, -1.0], dtype=np.float32)
    n_features = 2
    w = np.zeros(n_features + 1, dtype=np.float64)
    for fit_bias in (True, False):
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias, 1.0)
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias)
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias, 2.0, 1)
        # Rows weighted by their class (class_weight), as a cluster worker trains them.
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias, 2.0, 1, np.ones(2, dtype=np.float32), None, 0.0)
        grad = np.zeros(n_features + 1, dtype=np.float64)
        seen = np.zeros(n_features + 1, dtype=np.uint8)
        touched = np.zeros(n_features + 1, dtype=np.int64)
        kernels.sgd_batch_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1,
                                0, 0.5, 1.0, 0.0, fit_bias, 1.0, 2, grad, seen, touched)
        n_touched, _ = kernels.batch_gradient(indptr, indices, values, labels, 0, 2, w,
                                              n_features, 0, 0.0, fit_bias, grad, seen,
                                              touched, 0)
        kernels.apply_gradient(w, grad, seen, touched, n_touched, 0.1)
    out = np.empty(2, dtype=np.float64)
    kernels.decision(indptr, indices, values, w, n_features, out)
    kernels.evaluate(indptr, indices, values, labels, w, n_features, 0)
    snap = np.zeros_like(w)
    idx = np.empty(w.shape[0], dtype=np.int32)
    val = np.empty(w.shape[0], dtype=np.float32)
    n = kernels.build_delta(w, snap, idx, val)
    kernels.cut_changes(w, snap, 0, 0.5)
    kernels.apply_delta(w, snap, idx[:n], val[:n])
    kernels.apply_delta(w, np.empty(0, dtype=np.float64), idx[:n], val[:n])
    # Received deltas are read-only views of their messages (a type of their own to numba),
    # their index range built on receipt when sent dense: those variants too.
    ro_idx, ro_val = idx[:n].copy(), val[:n].copy()
    ro_idx.flags.writeable = False
    ro_val.flags.writeable = False
    for a, b in ((ro_idx, ro_val), (idx[:n], ro_val)):
        kernels.apply_delta(w, snap, a, b)
    kernels.add_scaled(w, snap, 1.0)
    merged_idx = np.empty(2 * n, dtype=np.int32)
    merged_val = np.empty(2 * n, dtype=np.float64)
    delta_kernels.merge_sorted(idx[:n], snap[:n], idx[:n], snap[:n], merged_idx, merged_val)
    v_new = np.empty_like(w)
    for owed in (snap, np.empty(0)):
        delta_kernels.momentum_step(w, snap, snap, v_new, owed, 0.5, 0.5, False)
    count_features(indices, np.zeros(n_features, dtype=np.int64))
    mlp_kernels.warmup()  # the MLP's kernels too
