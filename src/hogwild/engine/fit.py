"""One model's fit, epoch by epoch: epoch 0, divergence, history rows, stop rules, the model kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.engine.stopping import EarlyStopping
from hogwild.engine.trainer import EpochStats
from hogwild.errors import TrainingDiverged
from hogwild.model.evaluation import Metrics, is_finite

F64 = npt.NDArray[np.float64]
Row = dict[str, Any]
# Scores the model on the validation rows (None when there are none).
Validate = Callable[[F64], Metrics | None]
# The history row of one evaluation: the epoch's stats (None: epoch 0, the model before
# training), its validation score, and the seconds since training began.
RowOf = Callable[[EpochStats | None, Metrics | None, float], Row]
# Told of each row as it is made, and whether it is the model kept so far; None: epoch 0 of a
# model that is no candidate for the one kept (a cold start's, or one without validation).
Observer = Callable[[Row, bool | None], None]


def train_row(stats: EpochStats | None, val: Metrics | None, elapsed: float) -> Row:
    """The history row of `hogwild train` (a line of metrics.jsonl)."""
    scores = {"val_loss": val.loss if val else None,
              "val_accuracy": val.accuracy if val else None}
    if stats is None:
        return {"epoch": 0, "elapsed": 0.0, "epoch_seconds": 0.0, "train_loss": None,
                "examples": 0, **scores}
    return {"epoch": stats.epoch + 1, "elapsed": elapsed, "epoch_seconds": stats.seconds,
            "train_loss": stats.train_loss, "examples": stats.examples, **scores}


class FitLoop:
    """The epochs of one fit over the weights ``w`` (trained in place by the caller): the
    epoch-0 row (:meth:`begin`), then per epoch (:meth:`after_epoch`) a divergence check,
    the validation score, the history row, and the stop rules (early stopping, target loss,
    time budget). The model kept is :attr:`stopper`'s, the best one evaluated (see
    engine.stopping.better), or with ``keep_best=False`` the last one.

    ``learning_rate`` is named by the TrainingDiverged the loop raises; ``epochs`` is the most
    epochs the caller trains (what the rows' progress counts against)."""

    def __init__(self, w: F64, validate: Validate | None = None, *, epochs: int,
                 learning_rate: float, patience: int = 0, min_delta: float = 0.0,
                 target_loss: float | None = None, time_budget: float = 0.0,
                 keep_best: bool = True, row_of: RowOf = train_row,
                 observe: Observer | None = None) -> None:
        self.w = w
        self.validate: Validate = validate or (lambda _: None)  # None: no validation rows
        self.max_epochs = epochs
        self.learning_rate = learning_rate
        self.time_budget = time_budget
        self.keep_best = keep_best
        self.row_of = row_of
        self.observe = observe
        self.stopper = EarlyStopping(patience=patience, min_delta=min_delta,
                                     target_loss=target_loss)
        self.stop_reason = "max epochs"
        self.epochs = 0  # trained (the rows after epoch 0's)
        self.started = self.seconds = 0.0

    def begin(self, warm_started: bool = False) -> Row:
        """Epoch 0: the model before any training, so the curves start where training did.
        It is no epoch's result (early stopping does not count it), but a warm start's
        (``warm_started``: the model was given) is a candidate for the model kept: a run
        that only made it worse keeps it unchanged."""
        initial = self.validate(self.w)
        row = self.row_of(None, initial, 0.0)
        best: bool | None = None
        if warm_started and initial is not None and self.keep_best:
            self.stopper.start_from(initial.loss, self.w, initial.accuracy)
            best = self.stopper.best_index == -1
        if self.observe is not None:
            self.observe(row, best)
        self.started = time.perf_counter()
        return row

    def after_epoch(self, stats: EpochStats) -> bool:
        """Record the epoch ``stats`` ended; True to stop. TrainingDiverged when the weights,
        the training loss or the validation loss are no longer finite."""
        elapsed = time.perf_counter() - self.started
        # A cheap O(d) check: a diverged model stops the run before it is scored or kept.
        if not (is_finite(self.w) and np.isfinite(stats.train_loss)):
            raise TrainingDiverged(f"epoch {stats.epoch + 1}", self.learning_rate)
        val = self.validate(self.w)
        if val is not None and not np.isfinite(val.loss):
            raise TrainingDiverged(f"epoch {stats.epoch + 1}, validation loss",
                                   self.learning_rate)
        row = self.row_of(stats, val, elapsed)
        self.epochs += 1
        # Without a validation set the training loss stands in for early stopping.
        decision = self.stopper.update(val.loss if val else stats.train_loss,
                                       self.w if self.keep_best else None,
                                       accuracy=val.accuracy if val else None)
        if self.observe is not None:
            self.observe(row, self.best_epoch() == self.epochs)
        if decision:
            self.stop_reason = decision
            return True
        if self.time_budget and elapsed >= self.time_budget:
            self.stop_reason = "time budget"
            return True
        return False

    def run(self, epoch: Callable[[int], EpochStats]) -> None:
        """Up to ``epochs`` epochs, ``epoch(e)`` training the e-th (from 0), then :meth:`end`."""
        for e in range(self.max_epochs):
            if self.after_epoch(epoch(e)):
                break
        self.end()

    def end(self) -> None:
        """Training is over: :attr:`seconds` it took (epoch 0's evaluation aside)."""
        self.seconds = time.perf_counter() - self.started

    def kept_weights(self) -> F64:
        """The model to keep: the best evaluated one (see EarlyStopping), else the last."""
        best = self.stopper.best_weights if self.keep_best else None
        return best if best is not None else self.w

    def best_epoch(self) -> int:
        """The epoch of the model kept (0: the model given, see EarlyStopping.start_from)."""
        index = self.stopper.best_index if self.keep_best else None
        return index + 1 if index is not None else self.epochs
