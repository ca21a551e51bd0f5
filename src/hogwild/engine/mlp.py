"""The sparse-input MLP on the trainer's HOGWILD! threads: trainer, scoring, warm-up."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.model.mlp_kernels import BUFFERED_FLUSH_ROWS
from hogwild.model.spec import ModelSpec
from hogwild.settings.rules import BOUNDS

F64 = npt.NDArray[np.float64]


class MLPTrainer(Trainer):
    """Trains a sparse-input MLP (``spec.kind == "mlp"``) with T lock-free threads, reusing
    :class:`Trainer`'s epochs, blocks, modes and schedules; only the kernel differs.

    ``flush_rows``: rows between two publications of a thread's dense-layer changes.
    ``deep_lr_scale``: the deep part's step as a multiple of the wide part's (the schedule's).
    ``params.hot_features`` is set to 0 (the first layer is written in place).
    """

    def __init__(self, spec: ModelSpec, params: TrainParams, w: F64 | None = None,
                 seed: int = 0, flush_rows: int = BUFFERED_FLUSH_ROWS,
                 deep_lr_scale: float = 1.0) -> None:
        if not spec.is_mlp:
            raise ValueError("MLPTrainer needs an MLP spec")
        if params.batch_size != 1 or params.mode == "syncsgd":
            raise ValueError("batch_size/mode: the MLP steps once per example (batch_size 1; "
                             "hogwild, locked or serial threads)")
        self.spec = spec
        self.seed = seed
        # No per-thread view of W1: the kernel writes the row's W1 rows in place.
        params = dataclasses.replace(params, hot_features=0)
        self.flush_rows = max(1, int(flush_rows))
        if deep_lr_scale not in BOUNDS["deep_lr_scale"]:
            raise ValueError(f"deep_lr_scale: {BOUNDS['deep_lr_scale'].why} (got "
                             f"{deep_lr_scale!r})")
        self.deep_lr_scale = float(deep_lr_scale)
        self._hidden = spec.hidden_array()
        super().__init__(spec.n_features, params, w)

    def _initial_weights(self, w: F64 | None) -> F64:
        return self.spec.initial_weights(self.seed) if w is None else self.spec.check(w)

    def _model_spec(self) -> ModelSpec:
        return self.spec

    def _flush_rows(self) -> int | None:
        return self.flush_rows

    def _deep_lr_scale(self) -> float:
        return self.deep_lr_scale
