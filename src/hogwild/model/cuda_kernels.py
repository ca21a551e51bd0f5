"""CUDA kernel of the linear model: one HOGWILD! SGD epoch on the GPU, a warp per example.

Imported only when a run asks for ``device: cuda`` (it imports ``numba.cuda``, which a CPU run
never loads). It follows the conventions of ``hogwild.model.kernels``: CSR arrays (int64
row pointers, int32 ids, float32 values and labels), the weight vector ``w`` of
``n_features + 1`` entries with the bias last, loss codes 0 hinge, 1 logistic, 2 squared and
schedule codes 0 constant, 1 invscaling.

The epoch kernel
----------------
``sgd_epoch`` runs over rows ``0 .. n_rows-1`` of arrays that live on the device (the trainer
copies them there once). Every warp (32 threads) takes one example at a time: warp ``q`` of
``Q`` takes rows ``q, q + Q, q + 2Q, ...``, so the Q examples in flight at any moment are
consecutive rows, as the CPU threads' interleaved step counters approximate. For its row the
warp

* sums the margin: lane ``l`` adds ``w[j] * x_j`` for the row's entries ``l, l + 32, ...``
  (lane 0 also the bias) and writes its partial sum to shared memory; after one barrier
  every lane adds the 32 partial sums in the same order (the reads are broadcasts), so all
  lanes hold the same margin and take the same branch;
* computes the loss derivative ``g`` of that margin (the same formulas as the CPU kernel);
* when ``g != 0``, adds ``-lr * (g * x_j + l2 * w[j])`` to each of the row's weights (lazy L2
  on updating steps only, with ``w[j]`` read again just before, as the CPU kernel does) and
  ``-lr * g`` to the bias, each with ``atomicAdd``: no lock, no lost update, the GPU form of
  HOGWILD! (the weights read for the margin may be older than the ones written: that
  staleness is the one HOGWILD! accepts).

The step counter of row ``r`` is ``t0 + r``: it advances by one per example, as in the CPU
kernel, and ``lr = lr0`` (constant) or ``lr0 / t ** power_t`` (invscaling). With one warp the
kernel computes the CPU kernel's serial pass up to the order of the margin's additions.

The partial sums go through shared memory and ``syncthreads`` rather than warp shuffles
because numba's CUDA simulator, on which this kernel is tested, has no shuffle (nor
``syncwarp``). A round has two barriers: after the partial sums are written, and after the
updates, so that no lane overwrites a partial sum another lane has yet to read, and the
warp's next margin sees all of its own row's updates (lanes of a warp need not run in
lockstep: without it one warp would not compute the serial pass). The warps of a block meet
at those barriers, so a block moves at the pace of its slowest row: blocks hold few warps
(``MAX_WARPS_PER_BLOCK``). Every warp of the grid makes the same number of rounds (rows past
the end are idle turns), so no thread skips a barrier.

Precision
---------
The kernel is compiled for the dtype of ``w`` it is given: float32 (the default of the
trainer: float32 ``atomicAdd`` is the fast one on GPUs) or float64. Margins, losses and step
sizes are computed in float64 in either case; only the stored weights are float32. The
loss of each warp's rows is summed in a float64 register and added to ``loss_out[0]`` once
at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import cuda as _cuda
from numba import float64

from hogwild.model import kernels as _cpu

# numba.cuda's kernel API (threadIdx, shared, atomic, the decorators) is not typed: Any.
cuda: Any = _cuda
_F = TypeVar("_F", bound=Callable[..., Any])


def _device(fn: _F) -> _F:
    """A CUDA device function, inlined into the kernel that calls it."""
    return cast(_F, cuda.jit(device=True, inline=True)(fn))


def cuda_kernel(fn: Callable[..., None]) -> Any:
    """A CUDA kernel: launched as ``kernel[blocks, threads](*args)``."""
    return cuda.jit(fn)

# The CPU kernels' schedule code (kernels.py), as a literal: device code compares it.
INVSCALING = 1

WARP = 32
# Largest block: warps of one block wait for each other at every round, so a block is kept
# small; 8 warps = 256 threads is also the size of a set of partial sums.
MAX_WARPS_PER_BLOCK = 8
# Length of the shared array of partial sums (a global: its size must be a constant).
_PARTIALS = WARP * MAX_WARPS_PER_BLOCK


# The CPU kernels' losses, compiled from their Python source as device functions: one
# definition for both targets.
point_loss = _device(_cpu.point_loss.py_func)
point_dloss = _device(_cpu.point_dloss.py_func)


@cuda_kernel
def sgd_epoch(indptr: Any, indices: Any, values: Any, labels: Any, w: Any, n_features: int,
              loss_code: int, lr0: float, schedule_code: int, power_t: float, t0: float,
              l2: float, fit_bias: bool, loss_out: Any) -> None:  # pragma: no cover
    """One HOGWILD! pass over every row, a warp per example (see the module docstring).

    Launch with a block of ``32 * k`` threads, ``1 <= k <= MAX_WARPS_PER_BLOCK``, and any
    number of blocks; the examples in flight are ``32 * k * blocks / 32``. Adds the sum of
    the rows' losses (at the margins computed before each update) to ``loss_out[0]``.
    """
    part = cuda.shared.array(_PARTIALS, dtype=float64)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    per_block = cuda.blockDim.x // WARP
    first = cuda.blockIdx.x * per_block + tid // WARP
    n_warps = cuda.gridDim.x * per_block
    n_rows = indptr.shape[0] - 1
    rounds = (n_rows + n_warps - 1) // n_warps
    shrink = l2 > 0.0
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
            if lane == 0:
                s = float64(w[n_features])
        for k in range(lo + lane, hi, WARP):
            s += float64(w[indices[k]]) * float64(values[k])
        part[tid] = s
        cuda.syncthreads()
        if active:
            # Every lane adds the 32 partial sums in the same order (broadcast reads), so
            # all of them take the same margin and the same branch below.
            m = 0.0
            head = tid - lane
            for q in range(WARP):
                m += part[head + q]
            y = float64(labels[r])
            if lane == 0:
                own_loss += point_loss(loss_code, m, y)
            g = point_dloss(loss_code, m, y)
            if g != 0.0:
                if schedule_code != INVSCALING:
                    lr = lr0
                elif power_t == 1.0:
                    lr = lr0 / (t0 + r)
                else:
                    lr = lr0 / (t0 + r) ** power_t
                step = lr * g
                decay = lr * l2
                for k in range(lo + lane, hi, WARP):
                    j = indices[k]
                    if shrink:
                        d = -(step * float64(values[k]) + decay * float64(w[j]))
                    else:
                        d = -step * float64(values[k])
                    cuda.atomic.add(w, j, d)
                if fit_bias and lane == 0:
                    cuda.atomic.add(w, n_features, -step)
        # Every lane has read part[] and made its updates (module docstring).
        cuda.syncthreads()
    if lane == 0:
        cuda.atomic.add(loss_out, 0, own_loss)
