"""The sparse-input MLP's trainer on a CUDA GPU (``device: cuda``, ``model: mlp``): HOGWILD! warps.

The linear GPU trainer (engine/gpu.py) with the MLP's parameter vector (model/spec.py): its
epochs run through the same runner (engine/gpu_rounds.py), which launches the MLP's kernel
(model/cuda_mlp_kernels.py) for an MLP spec. Nothing imports ``numba.cuda`` before such a
trainer is built.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hogwild.engine.gpu import GPUTrainer
from hogwild.engine.gpu_device import MAX_WARPS, WARPS_PER_BLOCK, check_gpu_shape, cuda_device
from hogwild.engine.trainer import TrainParams
from hogwild.model.spec import ModelSpec
from hogwild.settings.rules import BOUNDS

F64 = npt.NDArray[np.float64]


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
        if deep_lr_scale not in BOUNDS["deep_lr_scale"]:
            raise ValueError(f"deep_lr_scale: {BOUNDS['deep_lr_scale'].why} (got "
                             f"{deep_lr_scale!r})")
        self.spec = spec
        self.seed = seed
        self.deep_lr_scale = float(deep_lr_scale)
        super().__init__(spec.n_features, params, w, device=device, weight_dtype=weight_dtype,
                         max_warps=max_warps, warps_per_block=warps_per_block)

    def _initial_weights(self, w: F64 | None) -> F64:
        return self.spec.initial_weights(self.seed) if w is None else self.spec.check(w)

    def _model_spec(self) -> ModelSpec:
        return self.spec

    def _deep_lr_scale(self) -> float:
        return self.deep_lr_scale


def gpu_mlp_trainer(device: str, spec: ModelSpec, params: TrainParams, *, seed: int,
                    deep_lr_scale: float) -> GPUMLPTrainer:
    """The GPU MLP trainer ``hogwild train`` builds for ``device`` (cuda or cuda:N), on
    settings config.py has checked; ConfigError naming ``device`` when the GPU is missing,
    ``hidden`` when the layers are too wide for the kernel."""
    check_gpu_shape(spec)
    return GPUMLPTrainer(spec, params, seed=seed, deep_lr_scale=deep_lr_scale,
                         device=cuda_device(device))
