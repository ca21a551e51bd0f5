"""The linear model's trainer on a CUDA GPU (``device: cuda``): HOGWILD! warps, one launch per epoch.

Nothing here imports ``numba.cuda`` until a GPU trainer is asked for: :class:`GPUTrainer`
loads it (and the kernels) on first use, so CPU runs and ``hogwild --version`` never pay for
it.

How the model moves: the trainer's float64 vector ``w`` stays the model the rest of the
project sees (the validation after each epoch, early stopping, the saved model). An epoch is
one :meth:`~hogwild.engine.gpu_rounds.GPURounds.sgd_range` over every row, the call a cluster
worker makes for a round: ``w`` goes to the device in the kernel's dtype, one launch trains
every row, and the result is copied back into ``w`` in place (nothing else writes it while a
``train`` epoch runs; a worker adds the launch's change instead). With float32 on the device
(the default: float32 atomics are the fast ones), every weight is thus a float32 value held
exactly in float64: the upload rounds each weight to float32 once, the download widens it
without loss. The training rows are copied to the device once per data set and kept there.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from hogwild.config import GPU_TRAINER_MODES
from hogwild.engine.gpu_device import (
    MAX_WARPS,
    ROWS_PER_WARP,
    WARPS_PER_BLOCK,
    check_launch,
    cuda_device,
    numba_cuda,
)
from hogwild.engine.gpu_rounds import GPURounds
from hogwild.engine.trainer import EpochStats, Trainer, TrainParams
from hogwild.model.arrays import CSRArrays
from hogwild.model.schedule import kernel_schedule

F64 = npt.NDArray[np.float64]


class GPUTrainer(Trainer):
    """Trains the linear model on one GPU with HOGWILD! warps (``cuda_kernels.sgd_epoch``).

    Same interface as :class:`Trainer` (``fit``, ``fit_epoch``, ``w``, ``t``): the step
    counter, the schedules, the losses, lazy L2 and ``fit_bias`` mean what they mean there.
    ``params.mode`` hogwild runs ``min(max_warps, rows // ROWS_PER_WARP)`` examples at once
    (at least one), serial one; ``params.threads`` and ``hot_features`` have no meaning on a
    GPU and are ignored. ``weight_dtype``: the dtype of the weights on the device (module
    docstring). ``device``: the GPU's index (see :func:`cuda_device`).
    """

    def __init__(self, n_features: int, params: TrainParams, w: F64 | None = None, *,
                 device: int = 0, weight_dtype: str = "float32", max_warps: int = MAX_WARPS,
                 warps_per_block: int = WARPS_PER_BLOCK) -> None:
        if params.mode not in GPU_TRAINER_MODES:
            raise ValueError(f"mode: a GPU trains in mode {' or '.join(GPU_TRAINER_MODES)} "
                             f"(got {params.mode!r})")
        if params.batch_size != 1:
            raise ValueError(f"batch_size: a GPU steps once per example (batch_size 1, got "
                             f"{params.batch_size!r})")
        super().__init__(n_features, params, w)
        check_launch(weight_dtype, max_warps, warps_per_block,
                     lambda: GPURounds.most_per_block(self._model_spec()))
        numba_cuda().gpus[device]  # a missing GPU fails here, not at the first epoch
        self.device = device
        self.weight_dtype = np.dtype(weight_dtype)
        self.max_warps = max_warps
        self.warps_per_block = warps_per_block
        # The runner of the rows on the device and the host arrays they were copied from
        # (held, so that an identity match cannot be a new array at a recycled address).
        self._rounds: tuple[CSRArrays, GPURounds] | None = None

    def warps(self, n_rows: int) -> int:
        """Examples in flight at once in an epoch of ``n_rows`` rows."""
        if self.params.mode == "serial":
            return 1
        return max(1, min(self.max_warps, n_rows // ROWS_PER_WARP))

    def _runner(self, a: CSRArrays) -> GPURounds:
        """The runner of ``a``'s rows, copied to the device on first use of this data set."""
        held = self._rounds
        if held is not None and all(x is y for x, y in zip(held[0], a, strict=True)):
            return held[1]
        self._rounds = None  # the old copies go before the new ones are made
        runner = GPURounds(a, self._model_spec(), self.device,
                           weight_dtype=str(self.weight_dtype),
                           max_warps=1 if self.params.mode == "serial" else self.max_warps,
                           warps_per_block=self.warps_per_block)
        self._rounds = (a, runner)
        return runner

    def _epoch(self, a: CSRArrays, epoch: int) -> EpochStats:
        p = self.params
        n = a.n_rows
        if a.weights is not None or self.average_sum is not None:
            raise ValueError("a GPU trains without row weights and without averaging; use "
                             "device cpu")
        schedule, lr0, power_t, t_shift = kernel_schedule(
            p.lr_schedule, float(p.learning_rate), float(p.lr_decay), float(p.power_t), epoch,
            self.epoch_rows or n)
        plan = self._kernel_plan(1, thread_buffer=False)
        runner = self._runner(a)
        began = time.perf_counter()
        # In place: callers hold self.w (hogwild train validates and saves that array).
        _, loss_sum = runner.sgd_range(0, n, self.w, plan, lr0, schedule, power_t,
                                       self.t + t_shift, alone=True)
        seconds = time.perf_counter() - began
        self.t += n
        self._next_epoch = epoch + 1
        return EpochStats(epoch=epoch, seconds=seconds,
                          train_loss=loss_sum / n if n else 0.0, examples=n)


def gpu_trainer(device: str, n_features: int, params: TrainParams) -> GPUTrainer:
    """The GPU trainer ``hogwild train`` builds for ``device`` (cuda or cuda:N), on settings
    that config.py has checked a GPU trains (trainer, batch_size); ConfigError naming
    ``device`` when the GPU is missing."""
    return GPUTrainer(n_features, params, device=cuda_device(device))
