"""The coordinator's run state in plain Python: its roster and its global model, under one lock.

No gRPC here. The servicer decodes messages into calls on :class:`RunState`'s parts; the run
driver reads snapshots of them. ``roster`` (roster.py) holds registrations, places and
progress; ``model`` (global_model.py) is the sum of every delta received (each
(worker, seq, part) applied once), starting from the same vector as every worker's model
(zeros, or the MLP's seeded initialisation). What spans both (the model read with the
workers' figures, a checkpoint, the run's end) is here.
"""

from __future__ import annotations

import threading
import uuid

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.members.records import Totals, counters_of, entries_of, totals_of
from hogwild.cluster.coordinator.members.roster import Roster
from hogwild.cluster.coordinator.sums.global_model import GlobalModel
from hogwild.cluster.coordinator.sums.sequences import Sequences
from hogwild.cluster.transport.keys import KeyRing


class RunState:
    """Everything the coordinator knows about the run; every method is thread-safe."""

    def __init__(self, n_workers: int, run_id: str | None = None,
                 keys: KeyRing | None = None) -> None:
        self.run_id = run_id or uuid.uuid4().hex[:12]
        # One lock for both parts: a delta's sender is checked against the roster, and its
        # sum recorded, in one critical section; waiters on it wake for either.
        self._lock = threading.Condition()
        sequences = Sequences()
        self.roster = Roster(self._lock, n_workers, self.run_id,
                             keys if keys is not None else KeyRing(), sequences)
        self.model = GlobalModel(self._lock, self.roster, sequences)

    def restore(self, ckpt: Checkpoint) -> None:
        """Start from a checkpoint: its workers (each waiting to register again, at its old
        address or a new one) and its counters. The model comes with start_model."""
        with self._lock:
            self.roster.restore(ckpt)
            self.model.restore(ckpt)

    def checkpoint(self, elapsed: float, history_rows: int) -> Checkpoint:
        """The model, counters and workers, read together, as a checkpoint (``history_rows``:
        the evaluations metrics.jsonl holds)."""
        with self._lock:
            totals = self.totals()
            return Checkpoint(
                run_id=self.run_id, w=totals.w, round=totals.rounds, elapsed=elapsed,
                deltas_received=totals.deltas_received, bytes_received=totals.bytes_received,
                duplicates=totals.duplicates, history_rows=history_rows,
                workers=entries_of(list(self.roster.workers.values())))

    def totals(self, unchanged: tuple[int, npt.NDArray[np.float64]] | None = None) -> Totals:
        """The model and its counters, read together (an evaluation's view).

        ``unchanged``: (deltas_received, a copy of the model then); that copy is returned
        instead of a new one if no delta has been summed since (a trace copy costs about
        0.3 ms for 47k weights, mostly the page faults of new memory)."""
        with self._lock:
            model = self.model
            assert model.w is not None
            shared = unchanged is not None and unchanged[0] == model.deltas_received
            w = unchanged[1] if unchanged is not None and shared else model.w.copy()
            return totals_of(list(self.roster.workers.values()), w, model.deltas_received,
                             model.bytes_received, model.duplicates)

    def counters(self) -> dict[str, int]:
        """The run's counters without the model (what /metrics reports at each scrape)."""
        with self._lock:
            return counters_of(list(self.roster.workers.values()), self.model.deltas_received,
                               self.model.bytes_received, self.model.duplicates)

    def hand_over(self) -> None:
        """Refuse registrations from now on: they are for the coordinator resuming the run."""
        with self._lock:
            self.roster.handed_over = True

    def seal(self) -> Totals:
        """End the run: refuse every later delta and return the model with the counters that
        describe exactly it (what metrics.json and the last printed line report)."""
        with self._lock:
            self.roster.sealed = True
            return self.totals()
