"""Sparse linear models: losses, compiled SGD/delta kernels, evaluation, in-process trainer."""

from hogwild.model.arrays import CSRArrays, CSRLike, check_weights, csr_arrays, new_weights
from hogwild.model.evaluation import Metrics, evaluate, predict
from hogwild.model.losses import LOSS_NAMES, Hinge, Logistic, Loss, Squared, get_loss
from hogwild.model.trainer import EpochStats, Trainer, TrainParams, warmup

__all__ = [
    "LOSS_NAMES",
    "CSRArrays",
    "CSRLike",
    "EpochStats",
    "Hinge",
    "Logistic",
    "Loss",
    "Metrics",
    "Squared",
    "TrainParams",
    "Trainer",
    "check_weights",
    "csr_arrays",
    "evaluate",
    "get_loss",
    "new_weights",
    "predict",
    "warmup",
]
