"""Which CUDA GPU, and what every GPU launch of this project shares: weight dtypes, warp counts, one launch at a time.

Nothing here imports ``numba.cuda`` until :func:`numba_cuda` or :func:`cuda_device` is
called, so CPU runs and ``hogwild --version`` never pay for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hogwild.config import DEVICE_FORMAT, DEVICE_LIST_FORMAT
from hogwild.errors import ConfigError
from hogwild.model.spec import ModelSpec
from hogwild.settings.rules import GPU_MLP_MAX_UNITS

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
LAUNCH = threading.Lock()


def numba_cuda() -> Any:
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
    cuda = numba_cuda()
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


def check_launch(weight_dtype: str, max_warps: int, warps_per_block: int,
                 most: Callable[[], int]) -> None:
    """ValueError naming the option unless the launch settings are ones a kernel takes
    (``most``: its warps per block at most; asked last, as it loads the kernels and with
    them ``numba.cuda``)."""
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight_dtype: must be one of {', '.join(WEIGHT_DTYPES)} "
                         f"(got {weight_dtype!r})")
    if not isinstance(max_warps, int) or max_warps < 1:
        raise ValueError(f"max_warps: must be an integer >= 1 (got {max_warps!r})")
    if not 1 <= warps_per_block <= (top := most()):
        raise ValueError(f"warps_per_block: must be in 1..{top} (got {warps_per_block!r})")


def check_gpu_shape(spec: ModelSpec) -> None:
    """ConfigError naming ``hidden`` when the GPU MLP kernel cannot hold ``spec``'s layers."""
    if not spec.is_mlp:
        raise ValueError("the GPU MLP trainer needs an MLP spec")
    units = sum(spec.hidden)
    if units > GPU_MLP_MAX_UNITS:
        raise ConfigError("hidden", f"model mlp on a GPU takes hidden layers of "
                                    f"{GPU_MLP_MAX_UNITS} units in all at most; got "
                                    f"{list(spec.hidden)} ({units} units)")
