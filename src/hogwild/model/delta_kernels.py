"""Compiled kernels over deltas: two sparse sums merged, block momentum's filter in one pass."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]


@njit(nogil=True, cache=True)
def merge_sorted(idx_a: I32, val_a: F64, idx_b: I32, val_b: F64, idx_out: I32,
                 val_out: F64) -> int:
    """The sum of two sparse vectors with strictly ascending indices, in one pass: written
    to the outputs (room for both), exact zeros left out; returns the entries written, or
    -1 (nothing usable written) when an index list is not strictly ascending."""
    na, nb = idx_a.shape[0], idx_b.shape[0]
    for k in range(1, na):
        if idx_a[k] <= idx_a[k - 1]:
            return -1
    for k in range(1, nb):
        if idx_b[k] <= idx_b[k - 1]:
            return -1
    i = j = n = 0
    while i < na or j < nb:
        if j >= nb or (i < na and idx_a[i] < idx_b[j]):
            x, s = idx_a[i], val_a[i]
            i += 1
        elif i >= na or idx_b[j] < idx_a[i]:
            x, s = idx_b[j], val_b[j]
            j += 1
        else:  # a's value first, as a sort of both lists that keeps their order sums them
            x, s = idx_a[i], val_a[i] + val_b[j]
            i += 1
            j += 1
        if s != 0.0:
            idx_out[n], val_out[n] = x, s
            n += 1
    return n


@njit(nogil=True, cache=True)
def momentum_step(w: F64, snap: F64, v_old: F64, v_new: F64, owed: F64, eta: float,
                  inv_workers: float, final: bool) -> None:
    """Block momentum's filter of a worker's own change (engine/momentum.py), every weight
    in one pass: ``v_new = eta v_old + (w - snap - owed) inv_workers``, then ``w = snap +
    term`` with ``term = (1 + eta) v_new - eta v_old``, or ``v_new - eta v_old`` on the
    ``final`` round, plus ``owed`` (empty: nothing owed). The operations on
    each weight are numpy's of the same formula, in its order, so the results are the
    same bit for bit (no fused multiply-add: numba contracts none without fastmath)."""
    owing = owed.shape[0] != 0
    lift = 1.0 + eta
    for i in range(w.shape[0]):
        change = w[i] - snap[i]
        if owing:
            change -= owed[i]
        scaled = v_old[i] * eta
        vn = scaled + change * inv_workers
        v_new[i] = vn
        if final:
            term = vn - scaled
        else:
            term = vn * lift - scaled
        if owing:
            term += owed[i]
        w[i] = snap[i] + term
