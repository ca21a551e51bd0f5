"""What `hogwild train` shows and keeps of its epochs: metrics.jsonl, TensorBoard, progress rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hogwild.config import Settings
from hogwild.engine.fit import FitLoop, Validate
from hogwild.errors import OutputError
from hogwild.outputs.console import TRAIN_ROWS, Console, RowThrottle
from hogwild.outputs.history import EvalHistory
from hogwild.outputs.tensorboard import open_scalars


class TrainLog:
    """The observer of a train job's FitLoop (engine.fit): each row is appended to this run's
    metrics.jsonl as it is made (no earlier run's file is touched; memory keeps a bounded
    copy), added to TensorBoard at the examples trained on (``epoch_rows`` an epoch), and
    offered to the console's progress rows."""

    def __init__(self, settings: Settings, console: Console, run_dir: Path, run_name: str,
                 epoch_rows: int) -> None:
        self.settings = settings
        self.console = console
        self.epoch_rows = epoch_rows
        self.history = EvalHistory(run_dir)
        try:
            self.history.begin()
        except OSError as exc:
            raise OutputError.writing(run_dir, exc) from None
        self.scalars = open_scalars(settings, run_name)
        self.rows: RowThrottle | None = None  # made under the header, at epoch 0

    def fit_loop(self, w: np.ndarray, validate: Validate) -> FitLoop:
        """The fit loop of `hogwild train` over the weights ``w``: the settings' stop rules,
        this log its observer."""
        s = self.settings
        return FitLoop(w, validate, epochs=s.epochs, learning_rate=s.learning_rate,
                       patience=s.patience, min_delta=s.min_delta, target_loss=s.target_loss,
                       time_budget=s.time_budget, observe=self)

    def __call__(self, row: dict[str, Any], best: bool | None) -> None:
        """One row; ``best``: whether it is the model kept so far (the row of the model saved
        is never thinned out), None for an epoch 0 that is no candidate (not printed)."""
        self.history.add(row)
        epoch = int(row["epoch"])
        if self.scalars is not None:  # at the examples trained on: every epoch a whole pass
            self.scalars.add(row, epoch * self.epoch_rows)
        if self.rows is None:
            self.console.say(TRAIN_ROWS.header())
            self.rows = self.console.rows()
        if epoch or best is not None:
            self.rows.offer(TRAIN_ROWS.row(row), self.console.out, best=bool(best),
                            done=epoch / max(1, self.settings.epochs) if epoch else None)

    def close(self) -> None:
        """Training is over: close TensorBoard, show the rows of the model saved and the last
        one if they were thinned out."""
        if self.scalars is not None:
            self.scalars.close()
        if self.rows is not None:
            self.rows.flush(self.console.out)

    def write_history(self) -> None:
        """metrics.jsonl complete on disk."""
        try:
            self.history.write_all()
        except OSError as exc:
            raise OutputError.writing(self.history.path.parent, exc) from None
