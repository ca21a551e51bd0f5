"""CUDA kernel of the sparse-input MLP: one HOGWILD! SGD epoch on the GPU, a warp per example.

Imported only when a run asks for ``device: cuda`` with ``model: mlp``. The parameter vector,
the forward and backward passes, ``deep_lr``, ``binary`` and lazy L2 are those of
``hogwild.model.mlp_kernels`` (read its docstring first); the row and warp conventions, the
schedules, the loss functions and the two-barrier discipline are those of
``hogwild.model.cuda_kernels``.

The epoch kernel
----------------
``mlp_sgd_epoch`` runs over rows ``0 .. n_rows-1``: warp ``q`` of ``Q`` takes rows ``q, q + Q,
...``; row ``r`` steps with the counter ``t0 + r``. For its row the warp

* forward: lane ``l`` computes the hidden units ``j = l, l + 32, ...`` of each layer (for the
  first, the embedding bag ``b1[j] + sum_k x_k W1[f_k, j]``: the lanes read consecutive
  weights of one feature's row at a time), and keeps the pre-activations ``z`` in the warp's
  slice of shared memory, a barrier after each layer; the margin's terms (the wide part over
  the row's non-zeros, split among the lanes like the linear kernel's, plus ``a_L . Wo``)
  are summed as partial sums in shared memory, then by every lane in the same order, so that
  all lanes take the same branch;
* backward (when the loss derivative ``g != 0``): ``delta_L`` by the lanes that own its
  units, ``delta_(l-1)`` from ``W_l`` before ``W_l`` changes (lane ``l`` owns units ``l, l + 32,
  ...`` of layer ``l - 1``; a barrier; then the lanes update ``W_l`` entry by entry), then the
  row's embedding rows, wide weights and the biases;
* every update ``w[i] <- w[i] * keep - step * grad`` is made as ``cuda.atomic.add(w, i,
  -(step * grad + (1 - keep) * w[i]))`` with ``w[i]`` read just before: no lock, no lost update
  (the weights read in the forward pass may be older than the ones written: HOGWILD!'s
  staleness). The dense tail is written in ``w`` directly: every warp shares it, as the CPU
  threads do with ``flush_rows = 1``.

Every warp makes the same rounds and meets the same ``2 L + 3`` barriers per round (``L``
hidden layers) whatever its row does, so no thread skips one. With one warp the kernel
computes the CPU kernel's serial pass up to the order of the margin's additions and the
rounding of the weights' dtype.

Shapes: any number of hidden layers whose sizes add up to at most ``MAX_HIDDEN_UNITS``
(``hogwild.settings.rules``): the warp's ``z`` and ``delta`` live in shared arrays whose size
numba needs as a constant. Margins, losses and steps are float64; the stored weights have
the dtype of ``w`` (float32 or float64).
"""

from __future__ import annotations

from typing import Any

from numba import float64

from hogwild.model.cuda_kernels import INVSCALING, WARP, cuda, cuda_kernel, point_dloss, point_loss
from hogwild.settings.rules import GPU_MLP_MAX_UNITS

MAX_HIDDEN_UNITS = GPU_MLP_MAX_UNITS
# Warps per block at most: each holds 2 * MAX_HIDDEN_UNITS float64 of shared memory (z and
# delta) and 32 partial sums: 8 warps take 34 KiB, under the 48 KiB a block may hold
# statically.
MAX_WARPS_PER_BLOCK = 8
_UNITS = MAX_HIDDEN_UNITS * MAX_WARPS_PER_BLOCK
_PARTIALS = WARP * MAX_WARPS_PER_BLOCK


@cuda_kernel
def mlp_sgd_epoch(indptr: Any, indices: Any, values: Any, labels: Any, w: Any,
                  n_features: int, hidden: Any, layout: Any, loss_code: int, lr0: float,
                  schedule_code: int, power_t: float, t0: float, l2: float, fit_bias: bool,
                  binary: bool, deep_lr: float, loss_out: Any) -> None:  # pragma: no cover
    """One HOGWILD! pass of the MLP over every row, a warp per example (module docstring).

    ``hidden``: the layer sizes (int64); ``layout``: ``mlp_kernels.dense_layout`` of them.
    Launch with ``32 * k`` threads a block, ``1 <= k <= MAX_WARPS_PER_BLOCK``. Adds the sum of
    the rows' losses (at the margins before each update) to ``loss_out[0]``.
    """
    zs = cuda.shared.array(_UNITS, dtype=float64)
    ds = cuda.shared.array(_UNITS, dtype=float64)
    part = cuda.shared.array(_PARTIALS, dtype=float64)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    slot = tid // WARP
    per_block = cuda.blockDim.x // WARP
    first = cuda.blockIdx.x * per_block + slot
    n_warps = cuda.gridDim.x * per_block
    n_rows = indptr.shape[0] - 1
    rounds = (n_rows + n_warps - 1) // n_warps
    n_layers = hidden.shape[0]
    h1 = hidden[0]
    stride = h1 + 1
    tail = n_features * stride
    out_w = tail + layout[2 * n_layers - 1]
    out_b = tail + layout[2 * n_layers]
    base = slot * MAX_HIDDEN_UNITS  # this warp's z and delta: layers one after the other
    width = 0
    for layer in range(n_layers):
        width += hidden[layer]
    last = base + width - hidden[n_layers - 1]
    head = tid - lane
    own_loss = 0.0
    for turn in range(rounds):
        r = turn * n_warps + first
        active = r < n_rows
        lo = 0
        hi = 0
        s = 0.0
        if active:
            lo = indptr[r]
            hi = indptr[r + 1]
            # Layer 1: the embedding bag, in the CPU kernel's order of additions per unit.
            for j in range(lane, h1, WARP):
                acc = float64(w[tail + j])
                for k in range(lo, hi):
                    row = indices[k] * stride
                    if binary:
                        acc += float64(w[row + j])
                    else:
                        acc += float64(values[k]) * float64(w[row + j])
                zs[base + j] = acc
            # The wide part, over the lanes' share of the non-zeros.
            for k in range(lo + lane, hi, WARP):
                u = float64(w[indices[k] * stride + h1])
                s += u if binary else float64(values[k]) * u
            if lane == 0:
                s += float64(w[out_b])
        cuda.syncthreads()
        prev = base
        n_prev = h1
        for layer in range(1, n_layers):
            cur = prev + n_prev
            n_cur = hidden[layer]
            wo = tail + layout[2 * layer - 1]
            bo = tail + layout[2 * layer]
            if active:
                for j in range(lane, n_cur, WARP):
                    acc = float64(w[bo + j])
                    for i in range(n_prev):
                        zi = zs[prev + i]
                        if zi > 0.0:
                            acc += zi * float64(w[wo + i * n_cur + j])
                    zs[cur + j] = acc
            cuda.syncthreads()
            prev = cur
            n_prev = n_cur
        if active:
            for j in range(lane, n_prev, WARP):
                zj = zs[prev + j]
                if zj > 0.0:
                    s += zj * float64(w[out_w + j])
        part[tid] = s
        cuda.syncthreads()
        update = False
        lr = 0.0
        g = 0.0
        if active:
            m = 0.0
            for q in range(WARP):
                m += part[head + q]
            y = float64(labels[r])
            if lane == 0:
                own_loss += point_loss(loss_code, m, y)
            g = point_dloss(loss_code, m, y)
            update = g != 0.0
            if schedule_code != INVSCALING:
                lr = lr0
            elif power_t == 1.0:
                lr = lr0 / (t0 + r)
            else:
                lr = lr0 / (t0 + r) ** power_t
        dlr = lr * deep_lr
        decay = dlr * l2  # 1 - keep of the deep part's weights
        if update:
            # Output layer: delta_L from Wo before Wo's own update.
            step = dlr * g
            for j in range(lane, n_prev, WARP):
                zj = zs[last + j]
                old = float64(w[out_w + j])
                ds[last + j] = g * old if zj > 0.0 else 0.0
                # Not max(): numba's generic max() does not compile as CUDA device code.
                aj = zj if zj > 0.0 else 0.0  # noqa: FURB136
                d = -(step * aj + decay * old)
                if d != 0.0:
                    cuda.atomic.add(w, out_w + j, d)
        cuda.syncthreads()
        cur = last
        n_cur = n_prev
        for layer in range(n_layers - 1, 0, -1):
            n_prev = hidden[layer - 1]
            prev = cur - n_prev
            wo = tail + layout[2 * layer - 1]
            bo = tail + layout[2 * layer]
            if update:
                for i in range(lane, n_prev, WARP):
                    acc = 0.0
                    if zs[prev + i] > 0.0:
                        row = wo + i * n_cur
                        for j in range(n_cur):
                            acc += float64(w[row + j]) * ds[cur + j]
                    ds[prev + i] = acc
            # Every lane's delta_(l-1) is read from W_l before any lane writes W_l.
            cuda.syncthreads()
            if update:
                for e in range(lane, n_prev * n_cur, WARP):
                    i = e // n_cur
                    zi = zs[prev + i]
                    ai = dlr * zi if zi > 0.0 else 0.0
                    old = float64(w[wo + e])
                    d = -(ai * ds[cur + e - i * n_cur] + decay * old)
                    if d != 0.0:
                        cuda.atomic.add(w, wo + e, d)
                if fit_bias:
                    for j in range(lane, n_cur, WARP):
                        cuda.atomic.add(w, bo + j, -dlr * ds[cur + j])
            cur = prev
            n_cur = n_prev
        if update:
            # First layer: the row's embedding rows (lanes over units), then its wide
            # weights (lanes over non-zeros), then b1 and bo.
            for k in range(lo, hi):
                row = indices[k] * stride
                sv = dlr if binary else dlr * float64(values[k])
                for j in range(lane, h1, WARP):
                    old = float64(w[row + j])
                    d = -(sv * ds[base + j] + decay * old)
                    if d != 0.0:
                        cuda.atomic.add(w, row + j, d)
            wide_step = lr * g
            wide_decay = lr * l2
            for k in range(lo + lane, hi, WARP):
                at = indices[k] * stride + h1
                v = 1.0 if binary else float64(values[k])
                cuda.atomic.add(w, at, -(wide_step * v + wide_decay * float64(w[at])))
            if fit_bias:
                for j in range(lane, h1, WARP):
                    cuda.atomic.add(w, tail + j, -dlr * ds[base + j])
                if lane == 0:
                    cuda.atomic.add(w, out_b, -wide_step)
        # Every lane has read part[], z and delta and made its updates (cuda_kernels).
        cuda.syncthreads()
    if lane == 0:
        cuda.atomic.add(loss_out, 0, own_loss)
