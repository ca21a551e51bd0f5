"""The simulated coordinator's evaluations: its clock, its history, its best model and the swing guard."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.engine.guard import Adjustment, SwingGuard
from hogwild.engine.stopping import better

Evaluate = Callable[[npt.NDArray[np.float64]], tuple[float, float | None]]


class CoordinatorClock:
    """When the simulated coordinator evaluates its model, and what it keeps of it.

    As the cluster's coordinator does, it evaluates on a clock whatever model it holds, if a
    delta changed it since the last evaluation: every ``every`` simulated seconds (the
    simulation's 1 / evals_per_epoch of the time an epoch of training takes its workers, the
    same share of an epoch at every W). A tick is due only while a change waits for one, at
    the clock's next multiple of ``every``: ticks over an idle clock would outnumber every
    other event where messages take far longer than training. The swing guard weighs these
    evaluations, as the cluster's guard weighs the coordinator's periodic ones, but one per
    ``guard_rows`` examples trained (1 / evals_per_epoch of an epoch): the clock evaluates
    that often where an epoch takes its compute time and far more often where messages
    dominate, and on a small set a guard weighing every partial sum acted on noise it was
    not tuned for. (Weighing the model at the workers' round ends instead, as before the
    clock, scores a model a round old; it moved the one-worker references: bench/NOTES.md.)"""

    def __init__(self, evaluate: Evaluate | None, w0: npt.NDArray[np.float64], every: float,
                 guard: SwingGuard | None, guard_rows: float) -> None:
        self.evaluate = evaluate
        self.every = every
        self.guard = guard
        self.guard_rows = guard_rows
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.best_w = w0.copy()
        self.applied = 0           # deltas the coordinator applied ...
        self.applied_at_eval = -1  # ... and how many of them its last evaluation saw
        self.tick_due = False
        self.last_tick = 0.0
        self.guard_due = 0.0

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

    def record(self, row: dict[str, Any], w: npt.NDArray[np.float64]) -> Adjustment | None:
        """Evaluate ``w`` into ``row`` (the time, the examples, the training loss filled in),
        keep the best model, and let the guard weigh it when due: its adjustment, if any."""
        self.applied_at_eval = self.applied
        adjustment = None
        if self.evaluate is not None:
            loss, accuracy = self.evaluate(w)
            row["val_loss"], row["val_accuracy"] = loss, accuracy
            if math.isfinite(loss) and (self.best is None or better(
                    loss, accuracy, self.best["val_loss"], self.best["val_accuracy"])):
                self.best = row
                self.best_w = w.copy()
            if self.guard is not None and row["examples"] >= self.guard_due:
                while self.guard_due <= row["examples"]:
                    self.guard_due += self.guard_rows
                adjustment = self.guard.observe(row["epoch"], loss, accuracy)
        self.history.append(row)
        return adjustment
