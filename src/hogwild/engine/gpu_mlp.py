"""The sparse-input MLP's trainer on a CUDA GPU (``device: cuda``, ``model: mlp``): HOGWILD! warps.

The linear GPU trainer (engine/gpu.py) with the MLP's kernel (model/cuda_mlp_kernels.py) and
the MLP's parameter vector (model/spec.py): the float64 model ``w`` stays on the host, each
epoch copies it to the device in the kernel's dtype, launches one kernel over every row and
copies the result back in place. Nothing imports ``numba.cuda`` before such a trainer is
built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.engine.gpu import MAX_WARPS, WARPS_PER_BLOCK, GPUTrainer, cuda_device
from hogwild.engine.trainer import TrainParams
from hogwild.errors import ConfigError
from hogwild.model.mlp_kernels import dense_layout
from hogwild.model.spec import ModelSpec
from hogwild.settings.rules import GPU_MLP_MAX_UNITS

F64 = npt.NDArray[np.float64]


def check_gpu_shape(spec: ModelSpec) -> None:
    """ConfigError naming ``hidden`` when the GPU kernel cannot hold ``spec``'s layers."""
    if not spec.is_mlp:
        raise ValueError("the GPU MLP trainer needs an MLP spec")
    units = sum(spec.hidden)
    if units > GPU_MLP_MAX_UNITS:
        raise ConfigError("hidden", f"model mlp on a GPU takes hidden layers of "
                                    f"{GPU_MLP_MAX_UNITS} units in all at most; got "
                                    f"{list(spec.hidden)} ({units} units)")


class GPUMLPTrainer(GPUTrainer):
    """Trains a sparse-input MLP on one GPU with HOGWILD! warps
    (``cuda_mlp_kernels.mlp_sgd_epoch``).

    :class:`~hogwild.engine.mlp.MLPTrainer`'s model, seed and ``deep_lr_scale`` with
    :class:`~hogwild.engine.gpu.GPUTrainer`'s epochs, modes and device options. Every warp
    writes the dense layers in place (no per-thread buffer: MLPTrainer's ``flush_rows`` has no
    counterpart here). ConfigError naming ``hidden`` for layers the kernel cannot hold.
    """

    def __init__(self, spec: ModelSpec, params: TrainParams, w: F64 | None = None,
                 seed: int = 0, deep_lr_scale: float = 1.0, *, device: int = 0,
                 weight_dtype: str = "float32", max_warps: int = MAX_WARPS,
                 warps_per_block: int = WARPS_PER_BLOCK) -> None:
        check_gpu_shape(spec)
        if not (0.0 < deep_lr_scale < float("inf")):
            raise ValueError(f"deep_lr_scale: must be positive and finite (got "
                             f"{deep_lr_scale!r})")
        self.spec = spec
        self.seed = seed
        self.deep_lr_scale = float(deep_lr_scale)
        super().__init__(spec.n_features, params, w, device=device, weight_dtype=weight_dtype,
                         max_warps=max_warps, warps_per_block=warps_per_block)
        from hogwild.model import cuda_mlp_kernels

        if warps_per_block > cuda_mlp_kernels.MAX_WARPS_PER_BLOCK:
            raise ValueError(f"warps_per_block: must be in 1..{cuda_mlp_kernels.MAX_WARPS_PER_BLOCK}"
                             f" (got {warps_per_block!r})")
        self._kernel = cuda_mlp_kernels.mlp_sgd_epoch
        hidden = spec.hidden_array()
        # The layer sizes and the dense tail's offsets, on the device for the whole run.
        with self._gpu:
            self._shape = (self._cuda.to_device(hidden),
                           self._cuda.to_device(dense_layout(spec.n_features, hidden)))

    def _initial_weights(self, w: F64 | None) -> F64:
        return self.spec.initial_weights(self.seed) if w is None else self.spec.check(w)

    def _model_spec(self) -> ModelSpec:
        return self.spec

    def _deep_lr_scale(self) -> float:
        return self.deep_lr_scale

    def _launch(self, blocks: int, threads: int, rows: tuple[Any, ...], w: Any, lr0: float,
                schedule: int, power_t: float, t0: float, loss: Any) -> None:
        p = self.params
        hidden, layout = self._shape
        self._kernel[blocks, threads](
            *rows, w, self.n_features, hidden, layout, self.loss.code, lr0, schedule, power_t,
            t0, float(p.l2), bool(p.fit_bias), bool(self.spec.binary_features),
            self.deep_lr_scale, loss)


def gpu_mlp_trainer(device: str, spec: ModelSpec, params: TrainParams, *, seed: int,
                    deep_lr_scale: float) -> GPUMLPTrainer:
    """The GPU MLP trainer ``hogwild train`` builds for ``device`` (cuda or cuda:N), on
    settings config.py has checked; ConfigError naming ``device`` when the GPU is missing,
    ``hidden`` when the layers are too wide for the kernel."""
    check_gpu_shape(spec)
    return GPUMLPTrainer(spec, params, seed=seed, deep_lr_scale=deep_lr_scale,
                         device=cuda_device(device))
