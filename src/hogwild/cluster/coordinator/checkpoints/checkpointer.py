"""Writing the run's checkpoint as it goes (checkpoint_interval, and a hand-over)."""

from __future__ import annotations

import logging
import time

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.watch.stopping import StopRules
from hogwild.config import Settings
from hogwild.outputs import artifacts
from hogwild.outputs.history import EvalHistory

log = logging.getLogger("hogwild.coordinator")


class Checkpointer:
    """Writes checkpoints of the run into its directory, and counts them."""

    def __init__(self, settings: Settings, state: RunState, history: EvalHistory,
                 run_dir: artifacts.RunDir, data_fingerprint: str) -> None:
        self.settings = settings
        self.state = state
        self.history = history
        self.run_dir = run_dir
        self.data_fingerprint = data_fingerprint  # of the rows trained on
        self.count = 0
        self.seconds = 0.0

    def write(self, began: float, rules: StopRules) -> Checkpoint | None:
        """Write the checkpoint (atomically) and return it; a failure to write it is logged,
        not fatal (None)."""
        t0 = time.perf_counter()
        # The checkpoint counts the rows of metrics.jsonl: they must all be there first.
        # Else the last checkpoint written stays, consistent with the file as it is.
        if not self.history.catch_up():
            log.warning("checkpoint not written: %s still lacks %d evaluation(s)",
                        artifacts.HISTORY_FILE, self.history.waiting)
            return None
        ckpt = self.state.checkpoint(time.perf_counter() - began, self.history.written)
        ckpt.early = rules.early.state()
        ckpt.data = self.data_fingerprint
        ckpt.model = checkpoint_file.model_settings(self.settings)
        ckpt.best_w = rules.best_weights
        try:
            checkpoint_file.save(self.run_dir.path, ckpt)
        except OSError as exc:
            log.warning("checkpoint not written: %s", exc)
            return None
        self.seconds += time.perf_counter() - t0
        self.count += 1
        return ckpt
