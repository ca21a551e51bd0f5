"""When the coordinator ends a run: epochs, time budget, all workers finished, validation loss."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hogwild.config import Settings
from hogwild.stopping import EarlyStopping


@dataclass
class StopRules:
    """Budget checks plus early stopping on the validation loss (keeping the best model)."""

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
        if all_finished:
            return "workers finished"
        if examples >= self.epochs * self.train_rows:
            return "max epochs"
        if self.time_budget and elapsed >= self.time_budget:
            return "time budget"
        return None

    def evaluation(self, val_loss: float, w: np.ndarray) -> str | None:
        """Feed one validation loss; why to stop (target loss, early stopping, diverged)."""
        return self.early.update(val_loss, w)

    @property
    def best_weights(self) -> np.ndarray | None:
        return self.early.best_weights
