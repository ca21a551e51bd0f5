"""A fine learning curve of a distributed run: global-model snapshots scored after training."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.members.records import Totals
from hogwild.model.evaluation import evaluate
from hogwild.model.losses import Loss
from hogwild.model.spec import ModelSpec
from hogwild.outputs.artifacts import TRACE_FILE

log = logging.getLogger("hogwild.coordinator")

# Snapshots are whole float64 models; past this many bytes of them the trace stops growing
# (and says so) rather than take the machine's memory.
TRACE_BUDGET_BYTES = 256 * 1024 * 1024
# Snapshots sharing a copy (no delta in between) cost a row each: bounded too.
TRACE_MAX_ROWS = 200_000


@dataclass(frozen=True)
class Snapshot:
    """The global model as it was ``elapsed`` seconds into training, with its counters."""

    elapsed: float
    w: npt.NDArray[np.float64]
    examples: int
    rounds: int
    deltas_received: int


class ModelTrace:
    """Copies of the global model every ``interval`` seconds while the workers train.

    Taking one costs a copy of the model (about 0.4 ms per million weights) unless no delta
    arrived since the previous one, whose copy it then shares; scoring them all waits until
    training has ended, so a fine curve takes little CPU from the workers while they train,
    unlike evaluations on the way. The copies kept are bounded by TRACE_BUDGET_BYTES.
    """

    def __init__(self, interval: float, dim: int,
                 earlier: Sequence[Mapping[str, Any]] = ()) -> None:
        """``earlier``: the rows a predecessor scored (a resumed run: see earlier_rows)."""
        self.interval = interval
        # Every row scored so far, the predecessors' first: scoring at a hand-over, then
        # again at the end, writes them all each time.
        self.rows: list[dict[str, Any]] = [dict(r) for r in earlier]
        self.limit = max(1, TRACE_BUDGET_BYTES // max(1, 8 * dim))
        self.snapshots: list[Snapshot] = []
        self.next_at = 0.0
        self.full = False
        self.copies = 0  # distinct models kept (consecutive snapshots may share one)

    def due(self, elapsed: float) -> bool:
        return not self.full and elapsed >= self.next_at

    def latest(self) -> tuple[int, npt.NDArray[np.float64]] | None:
        """(deltas_received, model) of the last snapshot, for RunState.totals(unchanged=...)."""
        if not self.snapshots:
            return None
        last = self.snapshots[-1]
        return last.deltas_received, last.w

    def take(self, totals: Totals, elapsed: float) -> None:
        """Keep ``totals`` (a copy of the model: fresh, or the last snapshot's) as the
        snapshot at ``elapsed``."""
        if not self.snapshots or totals.w is not self.snapshots[-1].w:
            self.copies += 1
        self.snapshots.append(Snapshot(elapsed, totals.w, totals.examples, totals.rounds,
                                       totals.deltas_received))
        self.next_at = elapsed + self.interval
        if self.copies >= self.limit or len(self.snapshots) >= TRACE_MAX_ROWS:
            self.full = True
            log.warning("trace: %d snapshots of %d distinct models kept (at most %d models, "
                        "%d MB, and %d snapshots); no more are taken", len(self.snapshots),
                        self.copies, self.limit, TRACE_BUDGET_BYTES // (1024 * 1024),
                        TRACE_MAX_ROWS)

    def score(self, val: Any, train_rows: int, loss: Loss,
              spec: ModelSpec) -> list[dict[str, Any]]:
        """One row per snapshot, in order: its time and progress, validation loss and accuracy;
        after the rows scored before (a predecessor's, an earlier call's).

        Frees each snapshot once scored."""
        rows = self.rows
        scored: npt.NDArray[np.float64] | None = None
        metrics = None
        for snap in self.snapshots:
            if snap.w is not scored:  # a shared copy is scored once
                metrics = evaluate(val, snap.w, loss, spec) if val.n_rows else None
                scored = snap.w
            rows.append({"elapsed": snap.elapsed, "round": snap.rounds,
                         "examples": snap.examples, "epochs": snap.examples / max(1, train_rows),
                         "val_loss": metrics.loss if metrics else None,
                         "val_accuracy": metrics.accuracy if metrics else None,
                         "deltas_received": snap.deltas_received})
        self.snapshots.clear()
        return list(rows)


def earlier_rows(run_dir: str | Path, upto: float) -> list[dict[str, Any]]:
    """The rows of ``run_dir``'s trace.jsonl (written by a coordinator that handed the run
    over) up to ``upto`` seconds of training, the checkpoint resumed from: later ones
    belong to training the resumed run does again. None if the file is missing or
    unreadable (said in the log: the trace then starts at the resume)."""
    path = Path(run_dir) / TRACE_FILE
    if not path.exists():
        return []
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]
        kept = [r for r in rows if float(r["elapsed"]) <= upto]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log.warning("trace: %s not read (%s); the trace starts at the resume", path, exc)
        return []
    return kept
