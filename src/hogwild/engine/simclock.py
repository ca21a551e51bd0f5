"""The simulated coordinator's evaluations: its clock, its history, its best model."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.engine.stopping import better

Evaluate = Callable[[npt.NDArray[np.float64]], tuple[float, float | None]]


class CoordinatorClock:
    """When the simulated coordinator evaluates its model, and what it keeps of it.

    As the cluster's coordinator does, it evaluates on a clock whatever model it holds, if a
    delta changed it since the last evaluation: every ``every`` simulated seconds (the
    simulation's 1 / evals_per_epoch of the time an epoch of training takes its workers, the
    same share of an epoch at every W). A tick is due only while a change waits for one, at
    the clock's next multiple of ``every``: ticks over an idle clock would outnumber every
    other event where messages take far longer than training."""

    def __init__(self, evaluate: Evaluate | None, w0: npt.NDArray[np.float64],
                 every: float) -> None:
        self.evaluate = evaluate
        self.every = every
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.best_w = w0.copy()
        self.applied = 0           # deltas the coordinator applied ...
        self.applied_at_eval = -1  # ... and how many of them its last evaluation saw
        self.tick_due = False
        self.last_tick = 0.0

    def changed(self, now: float) -> float | None:
        """A delta reached the coordinator's model at ``now``: the time of the tick to
        schedule (None: one is due already)."""
        self.applied += 1
        if self.tick_due:
            return None
        self.tick_due = True
        return max(math.ceil(now / self.every) * self.every, self.last_tick + self.every)

    def tick(self, now: float) -> bool:
        """A tick at ``now``: whether the model changed since the last evaluation."""
        self.tick_due = False
        self.last_tick = now
        return self.applied != self.applied_at_eval

    def record(self, row: dict[str, Any], w: npt.NDArray[np.float64]) -> None:
        """Evaluate ``w`` into ``row`` (the time, the examples, the training loss filled in)
        and keep the best model."""
        self.applied_at_eval = self.applied
        if self.evaluate is not None:
            loss, accuracy = self.evaluate(w)
            row["val_loss"], row["val_accuracy"] = loss, accuracy
            if math.isfinite(loss) and (self.best is None or better(
                    loss, accuracy, self.best["val_loss"], self.best["val_accuracy"])):
                self.best = row
                self.best_w = w.copy()
        self.history.append(row)
