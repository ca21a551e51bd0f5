"""What every training job shares (in memory, out of core, a cluster's): trainer parameters, memory, test metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.memory import PER_ID, check_fits, physical_memory
from hogwild.engine.trainer import TrainParams
from hogwild.model import metrics as quality
from hogwild.model.evaluation import predict
from hogwild.model.hot import RENUMBERED_HOT_FEATURES
from hogwild.model.saved import default_task
from hogwild.model.scoring import margins
from hogwild.model.spec import ModelSpec

# Bytes a job keeps per feature id besides the weights: document frequency (int64), the
# renumbering and its inverse (int32 each).
BYTES_PER_FEATURE = 16


def feature_memory(settings: Settings, n_features: int, n_classes: int) -> int:
    """Bytes the arrays kept per feature id take: the weights (float64, one vector per class
    of a one-vs-rest model, the first layer of an MLP) and the renumbering's."""
    per = 8 * max(1, n_classes) if settings.model == "linear" else 8 * settings.hidden[0]
    return n_features * (BYTES_PER_FEATURE + per)


def check_feature_memory(settings: Settings, n_features: int, n_classes: int = 1) -> None:
    """DataError naming the largest feature id when its arrays alone exceed the machine's
    RAM (they are as long as the largest id however few ids are used: a stray huge id)."""
    check_fits(settings.data, n_features, settings.zero_based,
               feature_memory(settings, n_features, n_classes), PER_ID, physical_memory())


def train_params(settings: Settings) -> TrainParams:
    """The trainer's parameters taken from the settings."""
    return TrainParams(loss=settings.loss, learning_rate=settings.learning_rate,
                       lr_schedule=settings.lr_schedule, lr_decay=settings.lr_decay,
                       power_t=settings.power_t, l2=settings.l2, fit_bias=settings.fit_bias,
                       threads=settings.threads, mode=settings.trainer,
                       batch_size=settings.batch_size,
                       hot_features=RENUMBERED_HOT_FEATURES if settings.thread_buffer else 0)


def test_quality(test: CSRData, w: np.ndarray, loss: str,
                 spec: ModelSpec | None = None, task: str | None = None,
                 classes: Sequence[float] | None = None) -> dict[str, Any]:
    """The full metric set on the test split under ``test_*`` keys (test_precision,
    test_recall, test_f1, test_roc_auc; test_rmse, test_mae, test_r2 for regression).
    ``test`` holds the training labels (+-1 for a binary model) and ``w`` the internal
    weights (or the parameters of the model ``spec`` describes); predictions and labels are
    compared in the model's classes."""
    if task is None:  # a model of +-1 labels (regression for the squared loss)
        task, classes = default_task(loss)
    scores = predict(test, w, spec) if spec is not None and spec.is_mlp else margins(w, test)
    report = quality.report_internal(task, loss, classes, scores, test.labels)
    return {f"test_{key}": value for key, value in report.items()
            if key not in ("loss", "accuracy", "rows")}

