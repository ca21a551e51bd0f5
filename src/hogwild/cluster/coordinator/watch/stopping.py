"""When the coordinator ends a run: epochs, time budget, all workers finished, validation loss."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from hogwild.base.text import number
from hogwild.config import Settings
from hogwild.engine.stopping import EarlyStopping


class StopSignal:
    """A signal that ends the run: which one, and whether the run is handed to a successor
    (checkpoint, workers told to register again) instead of finished. The first one counts."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.name = ""
        self.hand_over = False

    def set(self, name: str, hand_over: bool = False) -> None:
        if not self.event.is_set():
            self.name, self.hand_over = name, hand_over
            self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)


@dataclass
class StopRules:
    """Budget checks plus early stopping on the validation loss, keeping the best model
    (engine.stopping.better: a classifier's most accurate, else the lowest loss)."""

    epochs: int
    train_rows: int
    time_budget: float
    early: EarlyStopping

    @classmethod
    def from_settings(cls, settings: Settings, train_rows: int) -> StopRules:
        return cls(settings.epochs, train_rows, settings.time_budget,
                   EarlyStopping(patience=settings.patience, min_delta=settings.min_delta,
                                 target_loss=settings.target_loss))

    def budget(self, elapsed: float, examples: int, all_finished: bool,
               live_workers: int) -> str | None:
        """Why to stop now regardless of the model, or None."""
        if live_workers == 0:
            return "no live workers"
        # Before "workers finished": workers that trained the epochs asked for finish too,
        # and which of the two the monitor saw first (the last round's examples, or the
        # final deltas a moment later) made the same run end for either reason.
        if examples >= self.epochs * self.train_rows:
            return "max epochs"
        if all_finished:
            return "workers finished"
        if self.time_budget and elapsed >= self.time_budget:
            return "time budget"
        return None

    def evaluation(self, val_loss: float, w: np.ndarray,
                   accuracy: float | None = None) -> str | None:
        """Feed one validation loss (and accuracy, a classifier's: the model kept is the most
        accurate one); why to stop (target loss, early stopping, diverged). ``w``: the copy
        of the global model the evaluation scored, which nobody writes: kept as it is."""
        return self.early.update(val_loss, w, accuracy=accuracy, owned=True)

    @property
    def best_weights(self) -> np.ndarray | None:
        return self.early.best_weights

    def took_best(self) -> bool:
        """Whether the last evaluation fed in is the best so far (its model is kept).

        A run saves the best model it evaluated, as `train` does, with or without patience:
        a model that got worse after its best evaluation (a swing of summed deltas, a step
        too large) is not the one handed to the user."""
        return (self.early.best_index is not None
                and self.early.best_index == self.early.evaluations - 1)


@dataclass
class StallWatch:
    """Notices when no delta has reached the coordinator for far longer than a round has
    taken so far. Workers that wait on each other while alive (heartbeats) are dropped by
    nobody: a run stalled that way used to train nothing more, silently, until its time
    budget ran out (or forever, without one)."""

    floor: float            # never sooner than this many seconds of silence
    factor: float = 10.0    # nor sooner than this many times the longest gap seen
    # Warnings of one silence after which the run is ended as stalled (the silence four
    # times the first one's): a stall the workers do not resolve among themselves (each
    # alive, waiting on another) trained nothing more until the time budget, or ever.
    end_after: int = 3
    _count: int = -1
    _since: float = 0.0
    _longest: float = 0.0
    _warned: float = 0.0    # the silence last warned about (the next warning: twice as long)
    _warnings: int = 0      # warnings of this silence

    def observe(self, deltas: int, now: float) -> float | None:
        """``deltas``: received so far; returns the seconds of silence to warn about now."""
        if deltas != self._count:
            if self._count >= 0 and not self._warned:  # a gap warned about was no round
                self._longest = max(self._longest, now - self._since)
            self._count, self._since, self._warned, self._warnings = deltas, now, 0.0, 0
            return None
        silent = now - self._since
        if silent >= max(self.floor, self.factor * self._longest, 2.0 * self._warned):
            self._warned = silent
            self._warnings += 1
            return silent
        return None

    @property
    def stalled(self) -> bool:
        """Whether the silence went on through ``end_after`` warnings: the run is to end."""
        return self._warnings >= self.end_after


# A saved model whose validation loss is this many times the best one evaluated during the run
# got worse as it trained, for a reason worth saying (the run itself did what it was asked).
REGRESSION_FACTOR = 1.5


def regression_warning(evaluated: Iterable[float | None], saved: float | None) -> str | None:
    """One line when the saved model's validation loss is far above the best evaluated one.

    Measured: 4 workers, sync, summed deltas, 280k synthetic RCV1-like rows: the validation
    accuracy swung between 0.57 and 0.89 from round to round and one run ended at test
    accuracy 0.59 (loss 1.71), another at 0.84; with combine average, 0.89.
    """
    losses = [x for x in evaluated if x is not None and math.isfinite(x)]
    if saved is None or not math.isfinite(saved) or not losses:
        return None
    best = min(losses)
    if saved <= REGRESSION_FACTOR * best or saved - best < 0.05:
        return None
    return (f"the saved model's validation loss {number(saved)} is {number(saved / best, 1)}x "
            f"the lowest evaluated during training ({number(best)}): the validation loss rose "
            "as the run trained; with several workers, summed deltas can overshoot: try a "
            "smaller learning_rate or round_size")
