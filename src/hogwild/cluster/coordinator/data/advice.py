"""The data's conflict statistics and the safe in-flight advice, before and as the run starts."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.config import Settings
from hogwild.data.diagnose.conflicts import Recommendation, advice, recommend_for, startup_report
from hogwild.engine.round_size import choose_round_size

log = logging.getLogger("hogwild.coordinator")


class ConflictAdvice:
    """Measures the training rows' conflicts once and says what they mean for the run."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.entry: dict[str, Any] | None = None  # the statistics, for metrics.json

    def measure(self, train: Any, load_seconds: float) -> None:
        """Print the data's conflict statistics and the safe in-flight bound (bounded cost)."""

        s = self.settings
        rounds = choose_round_size(s.round_size, train.n_rows, train.nnz, s.workers * s.threads,
                                   s.combine, s.workers, train.n_features)
        line, self.entry = startup_report(train, threads=s.threads, workers=s.workers,
                                          round_size=rounds, distributed=True, seed=s.seed,
                                          load_seconds=load_seconds)
        self._report(line, s.threads, s.workers)

    def _report(self, line: str, threads: int, workers: int) -> None:
        """The conflicts line as a warning where a setting acts on it, else at info level
        (the statistics are in metrics.json either way).

        With combine sum every worker's steps of a round count in full, so the examples in
        flight (threads x workers x round_size) are what the bound n/(2Δ) is about; when
        threads x workers alone are within it, round_size decides, and the warning names it.
        Where even one example per thread exceeds the bound (dense rows: n/(2Δ) < 1 on most
        real text data), no round size is covered, and a warning on every run would say
        nothing a user can act on."""

        entry = self.entry
        rec = Recommendation(**entry["recommendation"]) if entry is not None else None
        if (rec is None or rec.tau is None or rec.fits or self.settings.combine != "sum"
                or threads * workers > rec.tau):
            log.info("%s", line)
            return
        log.warning("%s: with combine sum so many examples in flight may overshoot; "
                    "round_size %d or less keeps them within the bound (or combine average)",
                    line, rec.round_size)

    def as_started(self, live: list[WorkerRecord], round_size: int) -> None:
        """The safe in-flight advice again, for the threads the workers registered with and
        the round size the run uses, when they differ from what the coordinator assumed
        before any worker registered (its own ``threads`` and ``workers`` settings): a
        worker's thread count is its own setting, as in compose or Kubernetes."""

        entry = self.entry
        if entry is None or not live:
            return
        # Mixed thread counts are counted as the largest (the bound is about the most
        # examples that may be in flight at once).
        rec = recommend_for(entry["tau_bound"], max(r.threads for r in live), len(live),
                            round_size)
        before = entry["recommendation"]
        if rec.in_flight == before["in_flight"]:
            return
        entry["recommendation_before_registration"] = before
        entry["recommendation"] = asdict(rec)
        said = advice(Recommendation(**before), distributed=True)
        now = advice(rec, distributed=True)
        if now != said:  # (with τ < 1 both say the same: no asynchrony is covered)
            self._report("conflicts as started (the workers' own threads and the run's round "
                         f"size): {now}", max(r.threads for r in live), len(live))
