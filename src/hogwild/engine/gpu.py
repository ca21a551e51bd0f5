"""The linear model's trainer on a CUDA GPU (``device: cuda``): HOGWILD! warps, one launch per epoch.

Nothing here imports ``numba.cuda`` until a GPU trainer is asked for: :func:`cuda_device`
and :class:`GPUTrainer` load it (and ``hogwild.model.cuda_kernels``) on first use, so CPU runs
and ``hogwild --version`` never pay for it.

How the model moves: the trainer's float64 vector ``w`` stays the model the rest of the
project sees (the validation after each epoch, early stopping, the saved model). Each epoch
copies it to the device in the kernel's dtype, launches ``cuda_kernels.sgd_epoch`` once over
every row, and copies the result back into ``w`` in place. With float32 on the device (the
default: float32 atomics are the fast ones), every weight is thus a float32 value held
exactly in float64: the upload rounds each weight to float32 once, the download widens it
without loss. The training rows are copied to the device once per data set and kept there.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.config import DEVICE_FORMAT, DEVICE_LIST_FORMAT, GPU_TRAINER_MODES
from hogwild.engine.trainer import EpochStats, Trainer, TrainParams
from hogwild.errors import ConfigError
from hogwild.model.arrays import CSRArrays
from hogwild.model.schedule import kernel_schedule

F64 = npt.NDArray[np.float64]

WEIGHT_DTYPES = ("float32", "float64")
# Examples in flight at once (warps) at most, and at least this many rows per warp and
# epoch: a small data set is not updated by all its rows at the same weights at once,
# which would be one big summed step rather than SGD.
MAX_WARPS = 4096
ROWS_PER_WARP = 64
# Warps per block (see cuda_kernels: the warps of a block wait for each other twice a row,
# so few; two per block keep an SM's limit of 32 resident blocks from capping its warps).
WARPS_PER_BLOCK = 2
# One epoch launch at a time in the process: `hogwild train` warms the kernel up on a
# background thread while it loads the data, and numba's CUDA simulator refuses a second
# kernel while one runs (on a GPU the two would only share it).
_LAUNCH = threading.Lock()


def _numba_cuda() -> Any:
    """``numba.cuda``, imported on first use (its API is untyped: Any)."""
    from numba import cuda
    from numba.core import config

    numba_config: Any = config
    # Small data gets a small grid on purpose (ROWS_PER_WARP): no warning about it on every
    # epoch's launch.
    numba_config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    return cuda


def device_index(device: str) -> int | None:
    """None for ``cpu``, else the GPU index that ``cuda``/``cuda:N`` names; ValueError for
    anything else."""
    found = DEVICE_FORMAT.fullmatch(device)
    if found is None:
        raise ValueError(f"expected cpu, cuda or cuda:N, got {device!r}")
    if device == "cpu":
        return None
    return int(found.group(1) or 0)


def cuda_device(device: str) -> int:
    """The index of the GPU that ``device`` (cuda or cuda:N) names, checked to exist.

    ConfigError (exit 2) in one line when numba finds no usable CUDA device (no driver, no
    GPU) or fewer GPUs than the index needs. Under ``NUMBA_ENABLE_CUDASIM=1`` numba's
    simulator stands in for one GPU."""
    if DEVICE_LIST_FORMAT.fullmatch(device):
        raise ConfigError("device", f"device {device} names several GPUs: that is for "
                                    "`hogwild run`, which gives them to its workers in turn; "
                                    "train and a worker take one (cuda or cuda:N)")
    index = device_index(device)
    if index is None:
        raise ConfigError("device", "a GPU trainer needs device cuda or cuda:N, got cpu")
    cuda = _numba_cuda()
    if not cuda.is_available():
        why = getattr(cuda, "cuda_error", None)  # numba's reason, where this numba has it
        error = why() if why is not None else None
        reason = " ".join(str(error).split()) if error else "numba found no CUDA GPU"
        raise ConfigError("device", f"device {device} asked for, but no CUDA device is "
                                    f"available: {reason}")
    count = len(cuda.gpus)
    if index >= count:
        raise ConfigError("device", f"device {device} asked for, but this machine has "
                                    f"{count} CUDA device(s): cuda:0 .. cuda:{count - 1}")
    return index


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
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype: must be one of {', '.join(WEIGHT_DTYPES)} "
                             f"(got {weight_dtype!r})")
        if not isinstance(max_warps, int) or max_warps < 1:
            raise ValueError(f"max_warps: must be an integer >= 1 (got {max_warps!r})")
        from hogwild.model import cuda_kernels

        if not 1 <= warps_per_block <= cuda_kernels.MAX_WARPS_PER_BLOCK:
            raise ValueError(f"warps_per_block: must be in 1..{cuda_kernels.MAX_WARPS_PER_BLOCK}"
                             f" (got {warps_per_block!r})")
        super().__init__(n_features, params, w)
        self._cuda = _numba_cuda()
        self._kernel: Any = cuda_kernels.sgd_epoch
        self._warp = cuda_kernels.WARP  # threads per example in flight
        self._gpu: Any = self._cuda.gpus[device]
        self.device = device
        self.weight_dtype = np.dtype(weight_dtype)
        self.max_warps = max_warps
        self.warps_per_block = warps_per_block
        # The rows on the device and the host arrays they were copied from (held, so that
        # an identity match cannot be a new array at a recycled address).
        self._rows: tuple[CSRArrays, tuple[Any, ...]] | None = None

    def warps(self, n_rows: int) -> int:
        """Examples in flight at once in an epoch of ``n_rows`` rows."""
        if self.params.mode == "serial":
            return 1
        return max(1, min(self.max_warps, n_rows // ROWS_PER_WARP))

    def _device_rows(self, a: CSRArrays) -> tuple[Any, ...]:
        """The device copies of ``a``'s arrays, made on first use of this data set."""
        held = self._rows
        if held is not None and all(x is y for x, y in zip(held[0], a, strict=True)):
            return held[1]
        self._rows = None  # the old copies go before the new ones are made
        rows = tuple(self._cuda.to_device(x) for x in a)
        self._rows = (a, rows)
        return rows

    def _epoch(self, a: CSRArrays, epoch: int) -> EpochStats:
        p = self.params
        n = a.n_rows
        schedule, lr0, power_t, t_shift = kernel_schedule(
            p.lr_schedule, float(p.learning_rate), float(p.lr_decay), float(p.power_t), epoch, n)
        warps = self.warps(n)
        per_block = min(self.warps_per_block, warps)
        blocks = -(-warps // per_block)
        with _LAUNCH, self._gpu:
            indptr, indices, values, labels = self._device_rows(a)
            began = time.perf_counter()
            w = self._cuda.to_device(self.w.astype(self.weight_dtype))
            loss = self._cuda.to_device(np.zeros(1, dtype=np.float64))
            if n:
                self._launch(blocks, self._warp * per_block, (indptr, indices, values, labels),
                             w, lr0, schedule, power_t, self.t + t_shift, loss)
            # In place: callers hold self.w (hogwild train validates and saves that array).
            self.w[:] = w.copy_to_host()
            loss_sum = float(loss.copy_to_host()[0])
            seconds = time.perf_counter() - began
        self.t += n
        self._next_epoch = epoch + 1
        return EpochStats(epoch=epoch, seconds=seconds,
                          train_loss=loss_sum / n if n else 0.0, examples=n)


    def _launch(self, blocks: int, threads: int, rows: tuple[Any, ...], w: Any, lr0: float,
                schedule: int, power_t: float, t0: float, loss: Any) -> None:
        """One epoch's kernel launch over the device ``rows`` and weights ``w`` (the MLP's
        trainer launches its own kernel here)."""
        p = self.params
        self._kernel[blocks, threads](*rows, w, self.n_features, self.loss.code, lr0, schedule,
                                      power_t, t0, float(p.l2), bool(p.fit_bias), loss)


def gpu_trainer(device: str, n_features: int, params: TrainParams) -> GPUTrainer:
    """The GPU trainer ``hogwild train`` builds for ``device`` (cuda or cuda:N), on settings
    that config.py has checked a GPU trains (trainer, batch_size); ConfigError naming
    ``device`` when the GPU is missing."""
    return GPUTrainer(n_features, params, device=cuda_device(device))
