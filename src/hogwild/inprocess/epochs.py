"""What `hogwild train` does after each epoch, in memory or out of core: check, score, record, stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.config import Settings
from hogwild.engine.stopping import EarlyStopping
from hogwild.engine.trainer import EpochStats
from hogwild.errors import OutputError, TrainingDiverged
from hogwild.model.evaluation import Metrics, is_finite
from hogwild.outputs.console import TRAIN_ROWS, Console, train_saved_line
from hogwild.outputs.history import EvalHistory
from hogwild.outputs.tensorboard import open_scalars

# Scores the model on the validation rows (None when there are none).
Validate = Callable[[npt.NDArray[np.float64]], Metrics | None]


class EpochBook:
    """The epochs of one `hogwild train` run: the epoch-0 row (the model before training),
    then per epoch a divergence check, the validation score, the history row (on disk as it
    is made, and in TensorBoard), the progress row, and the stop rules (early stopping,
    target loss, time budget). The model kept is :attr:`stopper`'s; ``warm_started``: the
    model training starts from was given (initial_model), and is a candidate for it."""

    def __init__(self, settings: Settings, console: Console, run_dir: Path, run_name: str,
                 model_w: npt.NDArray[np.float64], validate: Validate,
                 epoch_rows: int, warm_started: bool = False) -> None:
        self.settings = settings
        self.console = console
        self.model_w = model_w
        self.validate = validate
        self.epoch_rows = epoch_rows
        self.stopper = EarlyStopping(patience=settings.patience, min_delta=settings.min_delta,
                                     target_loss=settings.target_loss)
        self.stop_reason = "max epochs"
        # Each epoch's row is appended as it is made, in this run's directory (no earlier
        # run's file is touched); memory keeps a bounded copy.
        self.history = EvalHistory(run_dir)
        try:
            self.history.begin()
        except OSError as exc:
            raise OutputError.writing(run_dir, exc) from None
        self.scalars = open_scalars(settings, run_name)
        # Epoch 0: the model before any training, so the curves start where training did
        # (not printed, nor counted by early stopping: it is no epoch's result; a warm
        # start's, a candidate for the model saved, is printed, see below).
        initial = validate(model_w)
        self.history.add({"epoch": 0, "elapsed": 0.0, "epoch_seconds": 0.0,
                          "train_loss": None, "examples": 0,
                          "val_loss": initial.loss if initial else None,
                          "val_accuracy": initial.accuracy if initial else None})
        if self.scalars is not None:
            self.scalars.add(self.history.rows.rows()[-1], 0)
        console.say(TRAIN_ROWS.header())
        self.rows = console.rows()
        if warm_started and initial is not None:
            # A given model that training only made worse is the one to save, unchanged;
            # a candidate, its row is shown (the row of the model saved always is).
            self.stopper.start_from(initial.loss, model_w, initial.accuracy)
            self.rows.offer(TRAIN_ROWS.row(self.history.rows.rows()[-1]), console.out,
                            best=self.stopper.best_index == -1)
        self.started = time.perf_counter()

    @property
    def epochs(self) -> int:
        """Epochs trained (the rows after epoch 0's)."""
        return self.history.count - 1

    def after_epoch(self, stats: EpochStats) -> bool:
        """Record the epoch ``stats`` ended; True to stop. TrainingDiverged when the weights,
        the training loss or the validation loss are no longer finite."""
        settings = self.settings
        elapsed = time.perf_counter() - self.started
        # A cheap O(d) check: a diverged model stops the run before it is scored or saved.
        if not (is_finite(self.model_w) and np.isfinite(stats.train_loss)):
            raise TrainingDiverged(f"epoch {stats.epoch + 1}", settings.learning_rate)
        val = self.validate(self.model_w)
        if val is not None and not np.isfinite(val.loss):
            raise TrainingDiverged(f"epoch {stats.epoch + 1}, validation loss",
                                   settings.learning_rate)
        row: dict[str, Any] = {
            "epoch": stats.epoch + 1, "elapsed": elapsed, "epoch_seconds": stats.seconds,
            "train_loss": stats.train_loss, "examples": stats.examples,
            "val_loss": val.loss if val else None,
            "val_accuracy": val.accuracy if val else None}
        self.history.add(row)
        if self.scalars is not None:  # at the examples trained on: every epoch a whole pass
            self.scalars.add(row, (stats.epoch + 1) * self.epoch_rows)
        # Without a validation set the training loss stands in for early stopping.
        decision = self.stopper.update(val.loss if val else stats.train_loss, self.model_w,
                                       accuracy=val.accuracy if val else None)
        # Printed once weighed: the row of the model saved is never thinned out.
        best = self.stopper.best_index == self.stopper.evaluations - 1
        self.rows.offer(TRAIN_ROWS.row(row), self.console.out,
                        done=(stats.epoch + 1) / max(1, settings.epochs), best=best)
        if decision:
            self.stop_reason = decision
            return True
        if settings.time_budget and elapsed >= settings.time_budget:
            self.stop_reason = "time budget"
            return True
        return False

    def close(self) -> None:
        """Training is over: close TensorBoard, show the rows of the model saved and the last
        one if they were thinned out."""
        if self.scalars is not None:
            self.scalars.close()
        self.rows.flush(self.console.out)

    def kept_weights(self) -> npt.NDArray[np.float64]:
        """The model to save: the best evaluated one (see EarlyStopping), else the last."""
        best = self.stopper.best_weights
        return best if best is not None else self.model_w

    def best_epoch(self) -> int:
        """The epoch of the model saved (0: the model given, see EarlyStopping.start_from)."""
        index = self.stopper.best_index
        return index + 1 if index is not None else self.epochs

    def say_saved(self) -> None:
        """One line when the model saved is not the last epoch's: which one, and its scores."""
        if self.best_epoch() != self.epochs:
            self.console.say(train_saved_line(self.best_epoch(), self.stopper.kept_loss,
                                              self.stopper.kept_accuracy))

    def write_history(self) -> None:
        try:
            self.history.write_all()
        except OSError as exc:
            raise OutputError.writing(self.history.path.parent, exc) from None
