"""Compiled forward/backward passes of the sparse-input MLP over raw CSR arrays (numba, no GIL).

Parameter layout (one flat float64 vector ``w``, shared by the threads of a node)
-------------------------------------------------------------------------------
With ``hidden = [H1, ..., HL]`` and ``d`` input features:

    rows [d, H1 + 1]   row-major, offset 0: row f is feature f's embedding W1[f] (H1
                       weights) followed by its wide weight u[f]
    b1  [H1]           offset d * (H1 + 1)
    W2  [H1, H2], b2 [H2], ..., WL [H(L-1), HL], bL [HL]
    Wo  [HL]           the linear output layer
    bo                 the last entry of ``w`` (as the linear model's bias)

Forward for one row with non-zeros (f_k, x_k):
``z1 = b1 + sum_k x_k W1[f_k]`` (an embedding bag; ``binary`` skips the multiplications,
every x_k taken as 1), ``a_l = relu(z_l)``, ``z_(l+1) = a_l W_(l+1) + b_(l+1)``, margin
``m = (bo + sum_k x_k u[f_k]) + a_L . Wo``: a linear model over the same row (the "wide"
part) plus the network (the "deep" part). The loss and its derivative g = dl/dm are the
linear model's (kernels.point_loss / kernels.point_dloss). Backward: ``delta_L = g Wo * [z_L > 0]``,
``delta_(l-1) = (W_l delta_l) * [z_(l-1) > 0]`` with the weights before the step, then every
parameter moves by ``-step * gradient``: the wide part (u and bo) with the schedule's step,
exactly as the linear kernel steps its weights, the deep part with ``deep_lr`` times that
step. A hinge step with g == 0 writes nothing. Keeping u in W1's rows means one pass over
the row's features reads and writes both, and the delta exchange sees one sparse block.

Hogwild
-------
The first layer is sparse: a step reads and writes only the rows of the row's features, in
``w`` directly, with no lock (the linear kernel's HOGWILD! argument, H1 + 1 weights per
feature).
L2 shrinks those rows on updating steps only (lazy, as in the linear kernel).

Everything after the rows (the "dense tail", ``w[d * (H1 + 1):]``) is read and written by every step.
Each call keeps a private copy of the tail (``view``, with ``base``: the tail as last
synchronised) and publishes its net change every ``flush_rows`` rows and at the end, exactly
like the linear kernel's bias accumulator: ``w[i] += view[i] - base[i]``, a lock-free
read-add-write that takes in the other threads' changes (and can lose one of them in a
nanosecond window, the usual HOGWILD! lost update). With one thread the result is exactly
the unbuffered pass. ``flush_rows = 1`` publishes after every row.

The kernels trust their inputs (the Python side, engine/mlp.py and model/spec.py, check shapes and index
ranges); inner loops index with unsigned integers so numba drops its wraparound checks.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hogwild.base.jit import njit
from hogwild.model.kernels import INVSCALING, point_dloss, point_loss, publish_view
from hogwild.model.losses import SQUARED
from hogwild.model.spec import ModelSpec

# Rows between two publications of a thread's dense-layer changes (the docstring above): with
# ``thread_buffer`` (the default), as the linear kernel's bias; without, every row.
BUFFERED_FLUSH_ROWS = 64

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@njit(nogil=True, cache=True)
def dense_layout(n_features: int, hidden: I64) -> I64:
    """Offsets of the dense tail's parts, relative to the tail's start ``n_features * H1``:
    ``[b1, W2, b2, ..., WL, bL, Wo, bo, tail length]`` (2 L + 2 entries)."""
    n_layers = hidden.shape[0]
    out = np.empty(2 * n_layers + 2, dtype=np.int64)
    pos = 0
    out[0] = 0
    pos = hidden[0]
    for layer in range(1, n_layers):
        out[2 * layer - 1] = pos
        pos += hidden[layer - 1] * hidden[layer]
        out[2 * layer] = pos
        pos += hidden[layer]
    out[2 * n_layers - 1] = pos
    pos += hidden[n_layers - 1]
    out[2 * n_layers] = pos
    pos += 1
    out[2 * n_layers + 1] = pos
    return out


@njit(nogil=True, cache=True, inline="always")
def _forward(indices: I32, values: F32, lo: np.uint64, hi: np.uint64, w: F64, tail: F64,
             hidden: I64, layout: I64, binary: bool, z: F64, a: F64) -> float:
    """Fill ``z`` (pre-activations) and ``a`` (activations) of every hidden layer, layers
    stored one after the other, and return the margin (wide part + deep part). W1 and the
    wide weights u are read from ``w``; the dense layers from ``tail`` (a thread's view, or
    ``w[d * (H1 + 1):]`` itself)."""
    n_layers = hidden.shape[0]
    h1 = np.uint64(hidden[0])
    stride = h1 + np.uint64(1)
    for j in range(h1):
        z[j] = tail[j]
    # The wide part: the output bias plus the linear model over the same row.
    wide = tail[np.uint64(layout[2 * n_layers])]
    if binary:
        for k in range(lo, hi):
            row = np.uint64(indices[k]) * stride
            for j in range(h1):
                z[j] += w[row + j]
            wide += w[row + h1]
    else:
        for k in range(lo, hi):
            row = np.uint64(indices[k]) * stride
            v = np.float64(values[k])
            for j in range(h1):
                z[j] += v * w[row + j]
            wide += v * w[row + h1]
    for j in range(h1):
        a[j] = max(0.0, z[j])
    prev = np.uint64(0)
    n_prev = h1
    for layer in range(1, n_layers):
        cur = prev + n_prev
        n_cur = np.uint64(hidden[layer])
        wo = np.uint64(layout[2 * layer - 1])
        bo = np.uint64(layout[2 * layer])
        for j in range(n_cur):
            z[cur + j] = tail[bo + j]
        for i in range(n_prev):
            ai = a[prev + i]
            if ai != 0.0:
                row = wo + i * n_cur
                for j in range(n_cur):
                    z[cur + j] += ai * tail[row + j]
        for j in range(n_cur):
            a[cur + j] = max(0.0, z[cur + j])
        prev = cur
        n_prev = n_cur
    out_w = np.uint64(layout[2 * n_layers - 1])
    m = wide
    for j in range(n_prev):
        m += a[prev + j] * tail[out_w + j]
    return float(m)


@njit(nogil=True, cache=True)
def mlp_sgd_range(
    indptr: I64, indices: I32, values: F32, labels: F32, start: int, stop: int, w: F64,
    n_features: int, hidden: I64, loss_code: int, lr0: float, schedule_code: int,
    power_t: float, t0: float, l2: float, fit_bias: bool, binary: bool,
    t_step: float = 1.0, flush_rows: int = 64, deep_lr: float = 1.0,
) -> tuple[float, float]:
    """One SGD pass of the MLP over rows [start, stop), updating ``w`` in place, lock-free.

    The schedule and step counter work as in kernels.sgd_range; the wide part takes the
    schedule's step, the deep part ``deep_lr`` times it. Returns ``(t_end, loss_sum)``: the
    counter after the last row and the sum of the pre-update losses.
    """
    n_layers = hidden.shape[0]
    h1 = np.uint64(hidden[0])
    stride = h1 + np.uint64(1)
    layout = dense_layout(n_features, hidden)
    tail_start = np.uint64(n_features) * stride
    n_tail = layout[2 * n_layers + 1]
    view = w[tail_start:tail_start + np.uint64(n_tail)].copy()
    base = view.copy()
    width = 0
    for layer in range(n_layers):
        width += hidden[layer]
    z = np.empty(width, dtype=np.float64)
    a = np.empty(width, dtype=np.float64)
    delta = np.zeros(width, dtype=np.float64)
    out_w = np.uint64(layout[2 * n_layers - 1])
    out_b = np.uint64(layout[2 * n_layers])
    last = np.uint64(width) - np.uint64(hidden[n_layers - 1])
    flush = max(flush_rows, 1)
    until_flush = flush
    t = t0
    loss_sum = 0.0
    for r in range(start, stop):
        lo = np.uint64(indptr[r])
        hi = np.uint64(indptr[r + 1])
        m = _forward(indices, values, lo, hi, w, view, hidden, layout, binary, z, a)
        y = np.float64(labels[r])
        loss_sum += point_loss(loss_code, m, y)
        g = point_dloss(loss_code, m, y)
        if schedule_code == INVSCALING:
            lr = lr0 / t**power_t
        else:
            lr = lr0
        t += t_step
        if g != 0.0:
            keep = 1.0 - lr * l2
            wide_step = lr * g
            if fit_bias:
                view[out_b] -= wide_step
            dlr = lr * deep_lr
            dkeep = 1.0 - dlr * l2
            # Output layer: the last hidden layer's delta uses Wo before its update.
            n_cur = np.uint64(hidden[n_layers - 1])
            for j in range(n_cur):
                delta[last + j] = g * view[out_w + j] if z[last + j] > 0.0 else 0.0
            step = dlr * g
            for j in range(n_cur):
                view[out_w + j] = view[out_w + j] * dkeep - step * a[last + j]
            # Dense hidden layers, last to second: back-propagate through W_l, then update it.
            cur = last
            for layer in range(n_layers - 1, 0, -1):
                n_prev = np.uint64(hidden[layer - 1])
                prev = cur - n_prev
                wo = np.uint64(layout[2 * layer - 1])
                bo = np.uint64(layout[2 * layer])
                for i in range(n_prev):
                    if z[prev + i] > 0.0:
                        row = wo + i * n_cur
                        s = 0.0
                        for j in range(n_cur):
                            s += view[row + j] * delta[cur + j]
                        delta[prev + i] = s
                    else:
                        delta[prev + i] = 0.0
                for i in range(n_prev):
                    row = wo + i * n_cur
                    ai = dlr * a[prev + i]
                    if ai != 0.0:
                        for j in range(n_cur):
                            view[row + j] = view[row + j] * dkeep - ai * delta[cur + j]
                    elif dkeep != 1.0:
                        for j in range(n_cur):
                            view[row + j] *= dkeep
                if fit_bias:
                    for j in range(n_cur):
                        view[bo + j] -= dlr * delta[cur + j]
                cur = prev
                n_cur = n_prev
            # First layer: the embedding rows of the row's features with their wide
            # weights (one pass over the row), then b1.
            if binary:
                for k in range(lo, hi):
                    row = np.uint64(indices[k]) * stride
                    for j in range(h1):
                        w[row + j] = w[row + j] * dkeep - dlr * delta[j]
                    w[row + h1] = w[row + h1] * keep - wide_step
            else:
                for k in range(lo, hi):
                    row = np.uint64(indices[k]) * stride
                    v = np.float64(values[k])
                    sv = dlr * v
                    for j in range(h1):
                        w[row + j] = w[row + j] * dkeep - sv * delta[j]
                    w[row + h1] = w[row + h1] * keep - wide_step * v
            if fit_bias:
                for j in range(h1):
                    view[j] -= dlr * delta[j]
        until_flush -= 1
        if until_flush == 0:
            until_flush = flush
            publish_view(w[tail_start:], view, base, view.shape[0])
    publish_view(w[tail_start:], view, base, view.shape[0])
    return t, loss_sum


@njit(nogil=True, cache=True)
def mlp_decision(indptr: I64, indices: I32, values: F32, w: F64, n_features: int,
                 hidden: I64, binary: bool, out: F64) -> None:
    """Write the margin of every row into ``out`` (length n_rows)."""
    n_layers = hidden.shape[0]
    layout = dense_layout(n_features, hidden)
    tail_start = np.uint64(n_features) * np.uint64(hidden[0] + 1)
    tail = w[tail_start:]
    width = 0
    for layer in range(n_layers):
        width += hidden[layer]
    z = np.empty(width, dtype=np.float64)
    a = np.empty(width, dtype=np.float64)
    for r in range(indptr.shape[0] - 1):
        out[r] = _forward(indices, values, np.uint64(indptr[r]), np.uint64(indptr[r + 1]), w,
                          tail, hidden, layout, binary, z, a)


@njit(nogil=True, cache=True)
def mlp_evaluate(indptr: I64, indices: I32, values: F32, labels: F32, w: F64, n_features: int,
                 hidden: I64, binary: bool, loss_code: int) -> tuple[float, int]:
    """``(loss_sum, n_correct)`` over all rows, counted as kernels.evaluate does."""
    n_layers = hidden.shape[0]
    layout = dense_layout(n_features, hidden)
    tail_start = np.uint64(n_features) * np.uint64(hidden[0] + 1)
    tail = w[tail_start:]
    width = 0
    for layer in range(n_layers):
        width += hidden[layer]
    z = np.empty(width, dtype=np.float64)
    a = np.empty(width, dtype=np.float64)
    loss_sum = 0.0
    n_correct = 0
    for r in range(indptr.shape[0] - 1):
        m = _forward(indices, values, np.uint64(indptr[r]), np.uint64(indptr[r + 1]), w, tail,
                     hidden, layout, binary, z, a)
        y = np.float64(labels[r])
        loss_sum += point_loss(loss_code, m, y)
        if loss_code != SQUARED:
            pred = 1.0 if m >= 0.0 else -1.0
            if pred == y:
                n_correct += 1
    return loss_sum, n_correct


def warmup() -> None:
    """Compile (or load from numba's cache) the MLP kernels with the production dtypes."""
    indptr = np.array([0, 2, 3], dtype=np.int64)
    indices = np.array([0, 1, 1], dtype=np.int32)
    values = np.array([0.5, 0.5, 1.0], dtype=np.float32)
    labels = np.array([1.0, -1.0], dtype=np.float32)
    spec = ModelSpec("mlp", 2, (3, 2))
    w = spec.initial_weights(0)
    hidden = spec.hidden_array()
    for binary in (False, True):
        mlp_sgd_range(indptr, indices, values, labels, 0, 2, w, 2, hidden, 0, 0.1, 0,
                      0.5, 1.0, 0.0, True, binary, 1.0, 64, 0.5)
        mlp_sgd_range(indptr, indices, values, labels, 0, 2, w, 2, hidden, 0, 0.1, 0,
                      0.5, 1.0, 0.0, True, binary)
        mlp_evaluate(indptr, indices, values, labels, w, 2, hidden, binary, 0)
        mlp_decision(indptr, indices, values, w, 2, hidden, binary, np.empty(2, dtype=np.float64))
