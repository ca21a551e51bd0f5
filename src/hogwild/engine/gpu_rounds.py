"""A cluster worker's rounds on a CUDA GPU: each kernel call of a round is one launch, its change added to the shared ``w``.

:class:`GPURounds` is the ``device`` of :class:`hogwild.engine.threads.Calls`: the engine's
loop (``train_round``, ``ThreadRounds``) keeps the cursor, the wrap at the end of the shard,
the passes and the schedule, and hands each contiguous range of rows to
:meth:`GPURounds.sgd_range`, which runs it as one launch of the GPU trainers' epoch kernels
(``cuda_kernels.sgd_epoch``, ``cuda_mlp_kernels.mlp_sgd_epoch``). A round is one range, or two
where it wraps: the second range starts a new pass, whose step size differs.

The kernels train every row of the arrays they are given, so a range is given to them as
views of the device arrays: ``indptr[start:stop + 1]`` (its offsets still index the whole
``indices`` and ``values``) and ``labels[start:stop]``; the row ``r`` of the view steps with
``t0 + r``. No copy, and the kernels (and the ``train`` path that launches them over every
row) stay as they are. The rows are copied to the device once, when the runner is built.

Nothing here imports ``numba.cuda`` before a runner is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.engine.gpu_device import (
    LAUNCH,
    MAX_WARPS,
    ROWS_PER_WARP,
    WARPS_PER_BLOCK,
    check_gpu_shape,
    check_launch,
    cuda_device,
    numba_cuda,
)
from hogwild.engine.threads import Calls, ThreadPlan
from hogwild.model.arrays import CSRArrays
from hogwild.model.mlp_kernels import dense_layout
from hogwild.model.spec import ModelSpec

F64 = npt.NDArray[np.float64]


class GPURounds:
    """Runs ranges of ``arrays``' rows on one GPU with HOGWILD! warps, for a model ``spec``.

    ``device``: the GPU's index (:func:`~hogwild.engine.gpu_device.cuda_device`); ``weight_dtype``:
    the dtype of the weights on the device (float32 or float64); a range of ``n`` rows runs
    ``min(max_warps, n // ROWS_PER_WARP)`` examples at once (at least one), as the ``train``
    path's epochs do. ``launches`` counts the kernel launches made.
    """

    def __init__(self, arrays: CSRArrays, spec: ModelSpec, device: int = 0, *,
                 weight_dtype: str = "float32", max_warps: int = MAX_WARPS,
                 warps_per_block: int = WARPS_PER_BLOCK) -> None:
        check_launch(weight_dtype, max_warps, warps_per_block,
                     lambda: self.most_per_block(spec))
        # Deferred: numba.cuda loads only where a GPU is asked for.
        from hogwild.model import cuda_kernels, cuda_mlp_kernels

        if spec.is_mlp:
            check_gpu_shape(spec)
            self._kernel: Any = cuda_mlp_kernels.mlp_sgd_epoch
        else:
            self._kernel = cuda_kernels.sgd_epoch
        self._warp = cuda_kernels.WARP  # threads per example in flight
        self._cuda = numba_cuda()
        self._gpu: Any = self._cuda.gpus[device]
        self.spec = spec
        self.n_rows = arrays.n_rows
        self.weight_dtype = np.dtype(weight_dtype)
        self.max_warps = max_warps
        self.warps_per_block = warps_per_block
        self.launches = 0
        with self._gpu:
            # For the whole run: every round reads its rows from these copies (the four CSR
            # arrays: row weights are refused on a GPU, engine/threads.py).
            self._rows: tuple[Any, ...] = tuple(self._cuda.to_device(x) for x in arrays[:4])
            hidden = spec.hidden_array()
            self._shape: tuple[Any, ...] = (
                (self._cuda.to_device(hidden),
                 self._cuda.to_device(dense_layout(spec.n_features, hidden)))
                if spec.is_mlp else ())

    @staticmethod
    def most_per_block(spec: ModelSpec) -> int:
        """The warps per block the model's kernel takes at most."""
        # Deferred: numba.cuda loads only where a GPU is asked for.
        from hogwild.model import cuda_kernels, cuda_mlp_kernels

        return (cuda_mlp_kernels.MAX_WARPS_PER_BLOCK if spec.is_mlp
                else cuda_kernels.MAX_WARPS_PER_BLOCK)

    def warps(self, n_rows: int) -> int:
        """Examples in flight at once in a launch over ``n_rows`` rows."""
        return max(1, min(self.max_warps, n_rows // ROWS_PER_WARP))

    def sgd_range(self, start: int, stop: int, w: F64, plan: ThreadPlan, lr0: float,
                  schedule: int, power_t: float, t0: float, alone: bool = False
                  ) -> tuple[float, float]:
        """Rows [start, stop) as one launch, steps counted from ``t0`` by one a row; adds
        what the launch changed to ``w`` in place (``alone``: nothing else writes ``w``
        meanwhile, the ``train`` path: the result is copied over it, in place); returns
        (t_end, loss sum)."""
        n = stop - start
        if not 0 <= start <= stop <= self.n_rows:
            raise ValueError(f"rows [{start}, {stop}) outside the {self.n_rows} rows held")
        if n == 0:
            return t0, 0.0
        warps = self.warps(n)
        per_block = min(self.warps_per_block, warps)
        blocks = -(-warps // per_block)
        indptr, indices, values, labels = self._rows
        with LAUNCH, self._gpu:
            # The exchange applies peers' deltas to w at any time (async mode: RPC threads),
            # during this launch too. Copying the device's result over w would undo them, so
            # the weights sent up are kept and only the launch's own change (result - sent)
            # is added to w afterwards, in place, as a CPU thread's updates are.
            sent = w.astype(self.weight_dtype)
            dw = self._cuda.to_device(sent)
            loss = self._cuda.to_device(np.zeros(1, dtype=np.float64))
            rows = (indptr[start:stop + 1], indices, values, labels[start:stop])
            self._launch(blocks, self._warp * per_block, rows, dw, plan, lr0,
                         schedule, power_t, t0, loss)
            self.launches += 1
            result = dw.copy_to_host()
            loss_sum = float(loss.copy_to_host()[0])
        if alone:
            w[:] = result
            return t0 + n, loss_sum
        change = result.astype(np.float64) - sent.astype(np.float64)
        moved = np.flatnonzero(change)  # the rows' weights: only they are written back
        w[moved] += change[moved]
        return t0 + n, loss_sum

    def _launch(self, blocks: int, threads: int, rows: tuple[Any, ...], w: Any,
                plan: ThreadPlan, lr0: float, schedule: int, power_t: float, t0: float,
                loss: Any) -> None:
        loss_code = plan.loss_code
        if self.spec.is_mlp:
            hidden, layout = self._shape
            self._kernel[blocks, threads](
                *rows, w, self.spec.n_features, hidden, layout, loss_code, lr0, schedule,
                power_t, t0, float(plan.l2), bool(plan.fit_bias),
                bool(self.spec.binary_features), float(plan.deep_lr_scale), loss)
        else:
            self._kernel[blocks, threads](
                *rows, w, self.spec.n_features, loss_code, lr0, schedule, power_t, t0,
                float(plan.l2), bool(plan.fit_bias), loss)


def device_calls(device: str, arrays: CSRArrays, spec: ModelSpec) -> Calls:
    """A worker's kernel calls on ``device`` (cuda or cuda:N, this machine's own setting),
    its rows copied there now; ConfigError naming ``device`` when that GPU is missing,
    ``hidden`` when the MLP's layers are too wide for the kernel."""
    return Calls(device=GPURounds(arrays, spec, cuda_device(device)))
