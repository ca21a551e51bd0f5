"""Validation loss and accuracy of every evaluation as TensorBoard scalars (tensorboardX)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hogwild.config import Settings
from hogwild.errors import ConfigError

# Row key -> scalar tag. The step is the count of examples trained on (the caller's), so the
# curves of `train` (one row an epoch) and `run` (one row an evaluation) share an axis.
TAGS = {"val_loss": "validation/loss", "val_accuracy": "validation/accuracy",
        "train_loss": "train/loss", "epochs": "progress/epochs"}


class Scalars:
    """An event file under ``tensorboard_dir/<run name>``, one point per evaluation."""

    def __init__(self, writer: Any, path: Path) -> None:
        self._writer = writer
        self.path = path

    def add(self, row: Mapping[str, Any], step: int) -> None:
        """One evaluation's scalars at ``step``, the examples trained on before it."""
        for key, tag in TAGS.items():
            value = row.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._writer.add_scalar(tag, float(value), step)
        # Flushed each time: TensorBoard shows a run as it goes, and a killed one keeps its
        # points (an evaluation is far rarer than the write).
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def open_scalars(settings: Settings, run_name: str) -> Scalars | None:
    """The run's scalar writer, or None when tensorboard_dir is empty; ConfigError (naming
    tensorboard_dir) when tensorboardX is missing or the directory cannot be made."""
    if not settings.tensorboard_dir:
        return None
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ConfigError("tensorboard_dir", "needs the tensorboardX package: pip install "
                                             "'.[tensorboard]' (from a clone), or pip install tensorboardX") from None
    path = Path(settings.tensorboard_dir).expanduser() / run_name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("tensorboard_dir", f"cannot create {str(path)!r}: "
                                             f"{exc.strerror or exc}") from None
    return Scalars(SummaryWriter(logdir=str(path)), path)
