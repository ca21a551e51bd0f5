"""Compiled SGD, scoring and delta kernels over raw CSR arrays (numba, GIL released).

Conventions shared by the whole project
---------------------------------------
* The model is one float64 vector ``w`` of length ``n_features + 1``; ``w[n_features]`` is the
  bias. The margin of row r is ``w[n_features] + sum_k w[indices[k]] * values[k]``.
* The kernels see only arrays and scalars. The Python side (trainer.py, arrays.py) checks
  dtypes, shapes and index ranges and allocates the outputs; the kernels trust that, except
  ``apply_delta`` and ``build_delta``, which also guard their writes (they handle data from
  the network and must never write outside an array).
* Inner loops index with unsigned integers (np.uint64 casts): numba then skips the
  negative-index wraparound it otherwise emits on every access, which was measured to halve
  the speed of an SGD pass. It is also why indices must be range-checked before a call.
* Loss codes: 0 hinge, 1 logistic, 2 squared (losses.py). Schedule codes: 0 constant,
  1 invscaling (lr = lr0 / t ** power_t).

Hogwild
-------
``sgd_range`` updates ``w`` in place without any lock; T threads run it at the same time on the
same ``w`` over disjoint row blocks. A step reads the weights of the row's features, then writes
only those weights (L2 is applied on the row's support, as in the HOGWILD! paper), so two
threads collide only on shared features; a colliding write can be lost, which HOGWILD! accepts.
The bias is the one coordinate every step would write. Each call keeps the bias in a local
accumulator and adds its net change to ``w[n_features]`` every BIAS_FLUSH_ROWS rows (and at the
end), so the threads do not fight over that cache line on every example, while a thread sees
the others' bias changes within BIAS_FLUSH_ROWS rows. (Flushing only once per call was measured
to hurt: with one call per thread per epoch, each thread stepped the bias as if alone and the
summed steps overshot, costing up to 4 points of test accuracy in about 1 run in 15.) A flush
is a plain read-add-write, so two flushes at the same instant can lose one of them: the usual
HOGWILD! lost update, here of a window of a few nanoseconds per BIAS_FLUSH_ROWS rows.

What limits two threads on text data is true sharing of the frequent features' weights
(the top 16 features of RCV1 occur ~5-7 times per row): every write makes the other core's
copy of that cache line invalid. Measured on 720k RCV1-shaped rows, 2 cores: two threads on
private copies of ``w`` ran a pass in 0.073 s (1.8x one thread), on one shared ``w`` in
0.13-0.35 s. Buffering the hottest features per thread through a per-non-zero lookup cost
more (branch mispredictions, +0.05-0.17 s per pass) than it saved.

Delta protocol (a node exchanging its updates with peers)
---------------------------------------------------------
Each node keeps ``snap``, a float64 copy of ``w`` as last accounted for. ``build_delta`` and
``apply_delta`` for one node are only ever called from ONE exchange thread, one after the
other, while the training threads keep writing ``w``. Only the exchange thread writes ``snap``.

* ``build_delta`` reads each ``w[i]`` exactly once into a local ``wi``, emits
  ``d = float32(wi - snap[i])`` and sets ``snap[i] += float64(d)``. Invariant:
  ``w - snap`` = own updates not sent yet (plus rounding residual). An own update written to
  ``w[i]`` after the read is not in ``wi``, so it is still in ``w - snap`` and goes out next
  round: nothing is lost. An update included in ``wi`` is moved into ``snap`` by exactly the
  amount sent, so it is never sent twice. The float32 rounding error ``wi - snap[i] - d`` also
  stays in ``w - snap`` (error feedback) and is sent later; a receiver that adds the same
  float32 values in the same order as ``snap`` holds exactly ``snap``.
* ``apply_delta`` adds a peer's values to ``w`` and to ``snap`` so that they are not mistaken
  for own updates. The ``w[i] += v`` is an unlocked read-modify-write that can race with a
  training thread's write to the same weight (the HOGWILD! lost-update race). If that happens
  the loss shows up as ``w - snap`` and is sent on as if it were an own update, so the node and
  the global sum of deltas stay consistent: the race costs one update, never a divergence.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numba import njit

from hogwild.model.losses import HINGE, LOGISTIC, SQUARED

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

CONSTANT = 0
INVSCALING = 1

# Rows between two publications of a thread's accumulated bias change (see above).
BIAS_FLUSH_ROWS = 64


@njit(nogil=True, cache=True, inline="always")
def _loss(code: int, m: float, y: float) -> float:
    if code == HINGE:
        z = 1.0 - y * m
        return max(0.0, z)
    if code == LOGISTIC:
        z = y * m
        # log(1 + exp(-z)) without overflow for large |z|.
        if z > 0.0:
            return math.log1p(math.exp(-z))
        return -z + math.log1p(math.exp(z))
    d = m - y
    return 0.5 * d * d


@njit(nogil=True, cache=True, inline="always")
def _dloss(code: int, m: float, y: float) -> float:
    if code == HINGE:
        return -y if y * m < 1.0 else 0.0
    if code == LOGISTIC:
        z = y * m
        # -y * sigmoid(-z); exp() only sees a non-positive argument.
        if z >= 0.0:
            e = math.exp(-z)
            return -y * e / (1.0 + e)
        return -y / (1.0 + math.exp(z))
    return m - y


@njit(nogil=True, cache=True)
def sgd_range(
    indptr: I64, indices: I32, values: F32, labels: F32, start: int, stop: int, w: F64,
    n_features: int, loss_code: int, lr0: float, schedule_code: int, power_t: float,
    t0: float, l2: float, fit_bias: bool, t_step: float = 1.0,
) -> tuple[float, float]:
    """One SGD pass over rows [start, stop) in order, updating ``w`` in place, lock-free.

    The step counter starts at ``t0`` and advances by ``t_step`` per row (threads interleave
    their counters with t_step = T). Returns ``(t_end, loss_sum)``: the counter after the last
    row and the sum of the losses at the margins computed before each update.
    """
    bias0 = w[n_features]
    bias = bias0
    t = t0
    loss_sum = 0.0
    shrink_l2 = l2 > 0.0
    until_flush = BIAS_FLUSH_ROWS
    for r in range(start, stop):
        lo = np.uint64(indptr[r])
        hi = np.uint64(indptr[r + 1])
        m = bias
        for k in range(lo, hi):
            m += w[np.uint64(indices[k])] * values[k]
        y = np.float64(labels[r])
        loss_sum += _loss(loss_code, m, y)
        g = _dloss(loss_code, m, y)
        if schedule_code == INVSCALING:
            lr = lr0 / t**power_t
        else:
            lr = lr0
        t += t_step
        if g != 0.0:
            step = lr * g
            if shrink_l2:
                keep = 1.0 - lr * l2
                for k in range(lo, hi):
                    j = np.uint64(indices[k])
                    w[j] = w[j] * keep - step * values[k]
            else:
                for k in range(lo, hi):
                    j = np.uint64(indices[k])
                    w[j] -= step * values[k]
            if fit_bias:
                bias -= step
        elif shrink_l2:
            keep = 1.0 - lr * l2
            for k in range(lo, hi):
                w[np.uint64(indices[k])] *= keep
        until_flush -= 1
        if until_flush == 0:
            until_flush = BIAS_FLUSH_ROWS
            if fit_bias:
                # Add the net change, not the value: other threads may have moved the bias.
                bias0 = w[n_features] + (bias - bias0)
                w[n_features] = bias0
                bias = bias0
    if fit_bias:
        w[n_features] += bias - bias0
    return t, loss_sum


@njit(nogil=True, cache=True)
def decision(indptr: I64, indices: I32, values: F32, w: F64, n_features: int, out: F64) -> None:
    """Write the margin of every row into ``out`` (length n_rows)."""
    n_rows = indptr.shape[0] - 1
    bias = w[n_features]
    for r in range(n_rows):
        m = bias
        for k in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
            m += w[np.uint64(indices[k])] * values[k]
        out[r] = m


@njit(nogil=True, cache=True)
def evaluate(
    indptr: I64, indices: I32, values: F32, labels: F32, w: F64, n_features: int, loss_code: int
) -> tuple[float, int]:
    """``(loss_sum, n_correct)`` over all rows; n_correct counts sign(margin) == label with
    margin 0 counted as +1 (0 for the squared loss, which is not a classifier)."""
    n_rows = indptr.shape[0] - 1
    bias = w[n_features]
    loss_sum = 0.0
    n_correct = 0
    for r in range(n_rows):
        m = bias
        for k in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
            m += w[np.uint64(indices[k])] * values[k]
        y = np.float64(labels[r])
        loss_sum += _loss(loss_code, m, y)
        if loss_code != SQUARED:
            pred = 1.0 if m >= 0.0 else -1.0
            if pred == y:
                n_correct += 1
    return loss_sum, n_correct


@njit(nogil=True, cache=True)
def build_delta(w: F64, snap: F64, idx_out: I32, val_out: F32) -> int:
    """Emit (i, float32(w[i] - snap[i])) for every changed coordinate, ascending, and move
    ``snap`` by exactly the emitted amount (error feedback). Returns the count, or -1 (nothing
    touched) if ``snap``/``idx_out``/``val_out`` are shorter than ``w``."""
    n_w = w.shape[0]
    if snap.shape[0] != n_w or idx_out.shape[0] < n_w or val_out.shape[0] < n_w:
        return -1
    n = 0
    for i in range(n_w):
        wi = w[i]  # read once: training threads may write w[i] concurrently
        si = snap[i]
        if wi != si:
            d = np.float32(wi - si)
            if d != 0.0:  # a difference below float32's range waits until it has grown
                idx_out[n] = i
                val_out[n] = d
                snap[i] = si + np.float64(d)
                n += 1
    return n


@njit(nogil=True, cache=True)
def apply_delta(w: F64, snap: F64, idx: I32, val: F32) -> int:
    """``w[idx] += val`` (and ``snap[idx] += val`` unless ``snap`` is empty), all or nothing.

    Returns 0 on success; otherwise nothing is written and the result is the number of
    indices outside [0, len(w)), or -1 if the lengths of idx/val (or a non-empty snap) do not
    match."""
    n_w = w.shape[0]
    n = idx.shape[0]
    with_snap = snap.shape[0] != 0
    if val.shape[0] != n or (with_snap and snap.shape[0] != n_w):
        return -1
    bad = 0
    for k in range(n):
        i = idx[k]
        if i < 0 or i >= n_w:
            bad += 1
    if bad:
        return bad
    # All indices are in range now; unsigned indexing skips numba's wraparound code.
    if with_snap:
        for k in range(n):
            i = np.uint64(idx[k])
            v = np.float64(val[k])
            w[i] += v
            snap[i] += v
    else:
        for k in range(n):
            w[np.uint64(idx[k])] += np.float64(val[k])
    return 0


@njit(nogil=True, cache=True)
def add_scaled(w: F64, x: F64, alpha: float) -> None:
    """``w += alpha * x`` in place for dense vectors of equal length (e.g. averaging models)."""
    for i in range(w.shape[0]):
        w[i] += alpha * x[i]
