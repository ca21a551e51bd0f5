"""Compiled SGD, scoring and delta kernels over raw CSR arrays (numba, GIL released).

Conventions shared by the whole project
---------------------------------------
* The model is one float64 vector ``w`` of length ``n_features + 1``; ``w[n_features]`` is the
  bias. The margin of row r is ``w[n_features] + sum_k w[indices[k]] * values[k]``.
* The kernels see only arrays and scalars. The Python side (engine/trainer.py,
  model/arrays.py) checks dtypes, shapes and index ranges and allocates the outputs; the kernels trust that, except
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
same ``w`` over disjoint row blocks. A step reads the weights of the row's features and, if the
loss gradient g is non-zero, writes only those weights; a step with g == 0 writes nothing, so two
threads collide only on shared features of updating rows; a colliding write can be lost, which
HOGWILD! accepts.

L2 is applied lazily: on updating steps only (g != 0), and only on the row's support, as
``w[j] = w[j] * (1 - lr * l2) - lr * g * x_j`` for the row's features j. A weight is therefore
not shrunk on steps that do not update it, so the penalty is weaker than the dense
``w *= 1 - lr * l2`` per step; the bias is never shrunk. (Shrinking the support on g == 0 steps
too, as before, wrote every weight of every row: after one pass ~70% of hinge steps have
g == 0, and dropping those writes took one thread from 0.128 to 0.086 s per pass on 720k
RCV1-shaped rows.)

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
copy of that cache line invalid. Measured on 720k RCV1-shaped rows renumbered by frequency,
2 cores, lazy L2, from a model trained one pass (71% of rows then have g == 0): one thread
0.080 s per pass, two threads on one shared ``w`` 0.082 s (no gain), on private copies of
``w`` 0.050 s (1.6x, the ceiling).

Buffered features
-----------------
``hot > 0`` generalises the bias accumulator to features ``0 .. hot-1``. Each call copies
them into a view (``view``, plus ``base``: their value in ``w`` at the last synchronisation),
reads and writes them only there, and publishes them in tiers: every BIAS_FLUSH_ROWS rows ids
[0, 64), every 4 x 64 rows ids [0, 256), every 16 x 64 rows ids [0, 1024), ... (growth
HOT_TIER_GROWTH), and all of them at the end of the call. Publishing id j adds the thread's net
change ``view[j] - base[j]`` to ``w[j]`` and takes in what the others wrote meanwhile; when
nobody else wrote ``w[j]`` it writes the view's value itself, so one thread computes exactly
the unbuffered pass. Ids >= hot are read and written in ``w`` directly.

This pays off only when ids are ranked by document frequency (``hogwild.data.transform.reorder``):
then a feature in a tier published every R rows has id >= R / 4 and so occurs in at most
4 x (non-zeros per row) / R of the rows, i.e. each thread makes at most
max(64, 4 x non-zeros per row) own updates to it between two publications, whatever its
frequency (the bias: 64). On unranked ids a frequent feature could wait for the end of the
call; the trainer checks the ranking before it buffers. With rows sorted by id, a row's
buffered features are a prefix, found by one compare per non-zero; with ``hot >= n_features``
there is no compare at all, and the hot loop is the unbuffered one on the view.

Measured on the same rows, same setting: two threads buffering every feature in calls of
>= 4 x n_features rows 0.054 s per pass (1.5x one thread). Earlier, with the L2 shrink on
every step: one thread 0.11 s, two buffered threads 0.062-0.076 s, two unbuffered 0.15 s;
hot = 1,024 or 4,096 left two threads at 0.09-0.10 s (the prefix compare cost 10-20% and
the lines of the ids above hot, packed by frequency, are still contended). The view costs O(hot) per call (filled at the start, published at the end),
hence long calls.

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

from hogwild.base.jit import njit
from hogwild.model.losses import HINGE, LOGISTIC, SQUARED

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

CONSTANT = 0
INVSCALING = 1

# Rows between two publications of a thread's accumulated bias change (see above); also the
# size of the first tier of buffered features and its publication interval.
BIAS_FLUSH_ROWS = 64
# Each further tier of buffered features is this many times larger and published this many
# times less often (see "Buffered features" above).
HOT_TIER_GROWTH = 4


# point_loss and point_dloss are also compiled as CUDA device functions (cuda_kernels.py,
# from their Python source): one definition of the losses for both, in what both compile.
@njit(nogil=True, cache=True, inline="always")
def point_loss(code: int, m: float, y: float) -> float:
    if code == HINGE:
        z = 1.0 - y * m
        return z if z > 0.0 else 0.0  # noqa: FURB136 - max() is no CUDA device code
    if code == LOGISTIC:
        z = y * m
        # log(1 + exp(-z)) without overflow for large |z|.
        if z > 0.0:
            return math.log1p(math.exp(-z))
        return -z + math.log1p(math.exp(z))
    d = m - y
    return 0.5 * d * d


@njit(nogil=True, cache=True, inline="always")
def point_dloss(code: int, m: float, y: float) -> float:
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


@njit(nogil=True, cache=True, inline="always")
def publish_view(w: F64, view: F64, base: F64, stop: int) -> None:
    """Hand this thread's changes to ``view[:stop]`` over to ``w`` and take in the others'.

    ``base[j]`` is ``w[j]`` as last synchronised, so ``view[j] - base[j]`` is this thread's
    net change since then. If nobody else wrote ``w[j]`` meanwhile, the view's value is
    written as it is (one thread therefore computes exactly what the unbuffered pass does);
    otherwise the net change is added on top of the others' updates.
    """
    for j in range(stop):
        vj = view[j]
        bj = base[j]
        cur = w[j]
        if vj != bj:
            nv = vj if cur == bj else cur + (vj - bj)
            w[j] = nv
            view[j] = nv
            base[j] = nv
        elif cur != bj:
            view[j] = cur
            base[j] = cur


@njit(nogil=True, cache=True)
def sgd_range(
    indptr: I64, indices: I32, values: F32, labels: F32, start: int, stop: int, w: F64,
    n_features: int, loss_code: int, lr0: float, schedule_code: int, power_t: float,
    t0: float, l2: float, fit_bias: bool, t_step: float = 1.0, hot: int = 0,
    row_weights: F32 | None = None, avg: F64 | None = None, avg_shift: float = 0.0,
) -> tuple[float, float]:
    """One SGD pass over rows [start, stop) in order, updating ``w`` in place, lock-free.

    The step counter starts at ``t0`` and advances by ``t_step`` per row (threads interleave
    their counters with t_step = T). Features ``j < hot`` go through a per-call view that is
    published to ``w`` in tiers (see the module docstring); this needs the indices of a row
    in ascending order and pays off when ids are ranked by frequency. Returns
    ``(t_end, loss_sum)``: the counter after the last row and the sum of the losses at the
    margins computed before each update.

    ``row_weights`` (one per row, >= 0): row r's gradient is scaled by its weight, as if
    the row occurred that many times. ``avg``: the averaging sum of :func:`averaged`; each
    change c of a weight at step counter t adds (t - avg_shift) * c to it. Either None
    (the default) compiles the branch away: the plain pass runs the code it always did.
    """
    nh = min(max(hot, 0), n_features)
    nh_u = np.uint64(nh)
    all_hot = nh == n_features
    view = np.empty(nh, dtype=np.float64)
    base = np.empty(nh, dtype=np.float64)
    for i in range(nh):
        view[i] = w[i]
        base[i] = view[i]
    n_published = 0
    bias0 = w[n_features]
    bias = bias0
    t = t0
    loss_sum = 0.0
    shrink_l2 = l2 > 0.0
    until_flush = BIAS_FLUSH_ROWS
    avg_bias = 0.0
    for r in range(start, stop):
        lo = np.uint64(indptr[r])
        hi = np.uint64(indptr[r + 1])
        m = bias
        # [lo, split) are the row's buffered features, [split, hi) go to w directly.
        if nh == 0:
            split = lo
        elif all_hot:
            split = hi
            for k in range(lo, hi):
                m += view[np.uint64(indices[k])] * values[k]
        else:
            split = lo
            while split < hi:
                jj = np.uint64(indices[split])
                if jj >= nh_u:
                    break
                m += view[jj] * values[split]
                split += np.uint64(1)
        for k in range(split, hi):
            m += w[np.uint64(indices[k])] * values[k]
        y = np.float64(labels[r])
        loss_sum += point_loss(loss_code, m, y)
        g = point_dloss(loss_code, m, y)
        # A row of weight c steps as c copies of it would (to first order): gradient and
        # L2 shrink scaled by c.
        rw = 1.0
        if row_weights is not None:
            rw = np.float64(row_weights[r])
            g *= rw
        if g != 0.0:
            # The step size only matters on updating steps (a minority of hinge steps once
            # the model fits), and lr0 / t (power_t 1: the default schedule) avoids a pow().
            if schedule_code != INVSCALING:
                lr = lr0
            elif power_t == 1.0:
                lr = lr0 / t
            else:
                lr = lr0 / t**power_t
            step = lr * g
            if avg is not None:
                _average_step(w, view, avg, indices, values, lo, split, hi, step,
                              1.0 - lr * l2 * rw if shrink_l2 else 1.0, t - avg_shift)
                if fit_bias:
                    avg_bias -= (t - avg_shift) * step
            elif shrink_l2:
                keep = 1.0 - lr * l2 * rw
                for k in range(lo, split):
                    j = np.uint64(indices[k])
                    view[j] = view[j] * keep - step * values[k]
                for k in range(split, hi):
                    j = np.uint64(indices[k])
                    w[j] = w[j] * keep - step * values[k]
            else:
                for k in range(lo, split):
                    j = np.uint64(indices[k])
                    view[j] -= step * values[k]
                for k in range(split, hi):
                    j = np.uint64(indices[k])
                    w[j] -= step * values[k]
            if fit_bias:
                bias -= step
        # g == 0 (most hinge steps once the model fits): nothing is written, not even the
        # L2 shrink, which is applied lazily on updating steps only (see the module docstring).
        t += t_step
        until_flush -= 1
        if until_flush == 0:
            until_flush = BIAS_FLUSH_ROWS
            if fit_bias:
                # Add the net change, not the value: other threads may have moved the bias.
                bias0 = w[n_features] + (bias - bias0)
                w[n_features] = bias0
                bias = bias0
            if nh > 0:
                # Publication number c covers ids [0, BIAS_FLUSH_ROWS * HOT_TIER_GROWTH**s)
                # for the largest s with HOT_TIER_GROWTH**s dividing c.
                n_published += 1
                span = BIAS_FLUSH_ROWS
                c = n_published
                while c % HOT_TIER_GROWTH == 0 and span < nh:
                    c //= HOT_TIER_GROWTH
                    span *= HOT_TIER_GROWTH
                publish_view(w, view, base, min(span, nh))
    if fit_bias:
        w[n_features] += bias - bias0
        if avg is not None:
            avg[n_features] += avg_bias
    publish_view(w, view, base, nh)
    return t, loss_sum


@njit(nogil=True, cache=True, inline="always")
def _average_step(w: F64, view: F64, avg: F64, indices: I32, values: F32, lo: np.uint64,
                  split: np.uint64, hi: np.uint64, step: float, keep: float, s: float) -> None:
    """One update of a row's features (``keep`` the L2 shrink, 1.0 without), recording each
    weight's change c as ``avg[j] += s * c`` (see :func:`averaged`)."""
    for k in range(lo, split):
        j = np.uint64(indices[k])
        old = view[j]
        new = old * keep - step * values[k]
        view[j] = new
        avg[j] += s * (new - old)
    for k in range(split, hi):
        j = np.uint64(indices[k])
        old = w[j]
        new = old * keep - step * values[k]
        w[j] = new
        avg[j] += s * (new - old)


def averaged(w: F64, w0: F64, avg: F64, steps: float) -> F64:
    """The mean of the iterates w_1 .. w_S of an SGD run from ``w0`` (averaged SGD, Polyak
    and Juditsky), from its last iterate ``w`` and ``avg`` = sum over every change c made at
    step s of s * c, which a kernel given ``avg`` keeps in O(1) per write: the sum of the
    iterates is S w0 + sum_s c_s (S - s + 1) = S w0 + (S + 1)(w - w0) - avg."""
    if steps <= 0:
        return w.copy()
    out: F64 = w0 + (steps + 1.0) / steps * (w - w0) - avg / steps
    return out


# --- Mini-batch SGD -----------------------------------------------------------------------
# A mini-batch of B rows: every row's gradient is computed at the same weights, the B
# gradients are summed into a per-thread scratch vector, and their mean is applied in one
# write per touched coordinate. A row's gradient is that of the per-example step above:
# g * x_j + l2 * w_j on its support when g != 0 (lazy L2), g on the bias, nothing when g == 0.
# So B = 1 computes the per-example update (up to float rounding) and a sum over threads of
# their partial gradients is the gradient of the whole mini-batch (synchronous SGD).
# Scratch of a thread: ``grad`` (float64, n_features + 1, all zero between calls), ``seen``
# (uint8, same length, all zero between calls) and ``touched`` (int64, same length): the
# coordinates with a gradient entry, each listed once.


@njit(nogil=True, cache=True, inline="always")
def _accumulate(indptr: I64, indices: I32, values: F32, labels: F32, start: int, stop: int,
                w: F64, n_features: int, loss_code: int, l2: float, fit_bias: bool, grad: F64,
                seen: npt.NDArray[np.uint8], touched: I64,
                n_touched: int, row_weights: F32 | None) -> tuple[int, float]:
    """Add the gradients of rows [start, stop) at ``w`` to ``grad`` (each scaled by its row's
    weight when ``row_weights`` is given); returns the new count of touched coordinates and
    the sum of the rows' losses."""
    loss_sum = 0.0
    shrink_l2 = l2 > 0.0
    for r in range(start, stop):
        lo = np.uint64(indptr[r])
        hi = np.uint64(indptr[r + 1])
        m = w[n_features]
        for k in range(lo, hi):
            m += w[np.uint64(indices[k])] * values[k]
        y = np.float64(labels[r])
        loss_sum += point_loss(loss_code, m, y)
        g = point_dloss(loss_code, m, y)
        if row_weights is not None:
            g *= row_weights[r]
        if g == 0.0:
            continue
        for k in range(lo, hi):
            j = np.uint64(indices[k])
            if seen[j] == 0:
                seen[j] = 1
                touched[n_touched] = j
                n_touched += 1
            if shrink_l2:
                # The L2 term is scaled too: a weighted row is that many copies of itself.
                grad[j] += g * values[k] + (l2 * w[j] if row_weights is None
                                            else l2 * row_weights[r] * w[j])
            else:
                grad[j] += g * values[k]
        if fit_bias:
            b = np.uint64(n_features)
            if seen[b] == 0:
                seen[b] = 1
                touched[n_touched] = n_features
                n_touched += 1
            grad[b] += g
    return n_touched, loss_sum


@njit(nogil=True, cache=True)
def batch_gradient(indptr: I64, indices: I32, values: F32, labels: F32, start: int, stop: int,
                   w: F64, n_features: int, loss_code: int, l2: float, fit_bias: bool,
                   grad: F64, seen: npt.NDArray[np.uint8], touched: I64,
                   n_touched: int, row_weights: F32 | None = None) -> tuple[int, float]:
    """Sum the gradients of rows [start, stop) at ``w`` into the scratch (``w`` is only read;
    ``row_weights`` scale each row's); returns (touched count, loss sum). Continue an
    accumulation by passing its count back."""
    return _accumulate(indptr, indices, values, labels, start, stop, w, n_features, loss_code,
                       l2, fit_bias, grad, seen, touched, n_touched, row_weights)


@njit(nogil=True, cache=True)
def apply_gradient(w: F64, grad: F64, seen: npt.NDArray[np.uint8], touched: I64,
                   n_touched: int, scale: float) -> None:
    """``w[j] -= scale * grad[j]`` for the touched coordinates, then clear the scratch."""
    for i in range(n_touched):
        j = np.uint64(touched[i])
        w[j] -= scale * grad[j]
        grad[j] = 0.0
        seen[j] = 0


@njit(nogil=True, cache=True)
def sgd_batch_range(
    indptr: I64, indices: I32, values: F32, labels: F32, start: int, stop: int, w: F64,
    n_features: int, loss_code: int, lr0: float, schedule_code: int, power_t: float,
    t0: float, l2: float, fit_bias: bool, t_step: float, batch_size: int, grad: F64,
    seen: npt.NDArray[np.uint8], touched: I64, row_weights: F32 | None = None,
) -> tuple[float, float]:
    """Mini-batch SGD over rows [start, stop): consecutive blocks of ``batch_size`` rows (the
    last one may be shorter), each one step of lr * (mean gradient of its rows), lock-free
    on the shared ``w`` like ``sgd_range``. The step size is the schedule's value at the
    block's first row; the counter advances by ``t_step`` per row; ``row_weights`` scale
    each row's gradient. Returns ``(t_end, loss_sum)`` as ``sgd_range`` does."""
    t = t0
    loss_sum = 0.0
    b = max(batch_size, 1)
    for b0 in range(start, stop, b):
        b1 = min(b0 + b, stop)
        if schedule_code == INVSCALING:
            lr = lr0 / t**power_t
        else:
            lr = lr0
        n_touched, part = _accumulate(indptr, indices, values, labels, b0, b1, w, n_features,
                                      loss_code, l2, fit_bias, grad, seen, touched, 0,
                                      row_weights)
        loss_sum += part
        apply_gradient(w, grad, seen, touched, n_touched, lr / (b1 - b0))
        t += t_step * (b1 - b0)
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
        loss_sum += point_loss(loss_code, m, y)
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
def cut_changes(w: F64, snap: F64, start: int, cut: float) -> int:
    """``w[i] -= (w[i] - snap[i]) * cut`` for every i >= ``start`` that changed since ``snap``;
    returns how many changed, or -1 (nothing touched) if ``snap`` is shorter than ``w``. One
    pass, no temporaries: in numpy the same took 0.4 ms a round for 47k weights, most of it
    page faults of two fresh arrays."""
    n_w = w.shape[0]
    if snap.shape[0] != n_w:
        return -1
    changed = 0
    for i in range(max(start, 0), n_w):
        d = w[i] - snap[i]
        if d != 0.0:
            w[i] -= d * cut
            changed += 1
    return changed


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
