"""The coordinator's side of the swing guard: judge each evaluation, tell every worker."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from typing import Any

from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.engine.guard import Adjustment, SwingGuard
from hogwild.errors import ClusterError

log = logging.getLogger(__name__)

Call = Callable[[WorkerRecord, str, Any], Any]


class Adjuster:
    """Feeds the run's evaluations to a SwingGuard and sends its adjustments (RPC Adjust).

    A worker that misses one (busy, or just dropped) trains on with the run's previous
    step size until the next; one that rejoins is sent the latest before it starts."""

    def __init__(self, guard: SwingGuard, run_id: str, call: Call,
                 say: Callable[[str], None]) -> None:
        self.guard = guard
        self.run_id = run_id
        self.call = call
        self.say = say
        self.unreached: dict[int, int] = {}   # worker -> adjustments it did not take

    @property
    def latest(self) -> Adjustment | None:
        return self.guard.adjustments[-1] if self.guard.adjustments else None

    def record(self) -> list[dict[str, Any]]:
        """The run's adjustments, for metrics.json."""
        return [a.as_dict() for a in self.guard.adjustments]

    def observe(self, row: dict[str, Any], live: list[WorkerRecord]) -> Adjustment | None:
        """Judge one evaluation row; on a swing tell every live worker, and say so."""
        adjustment = self.guard.observe(float(row["epochs"]), row["val_loss"],
                                        row["val_accuracy"])
        if adjustment is None:
            return None
        self.say(adjustment.describe())
        self.send(adjustment, live)
        return adjustment

    def catch_up(self, record: WorkerRecord) -> None:
        """A worker taken back into the run trains with the run's current adjustment."""
        if self.latest is not None:
            self.send(self.latest, [record])

    def send(self, adjustment: Adjustment, records: list[WorkerRecord]) -> None:
        message = pb.Adjustment(
            protocol_version=PROTOCOL_VERSION, run_id=self.run_id, number=adjustment.number,
            lr_scale=adjustment.lr_scale, staleness=adjustment.staleness or 0,
            reason=adjustment.reason)
        if not records:
            return
        with futures.ThreadPoolExecutor(max_workers=min(32, len(records))) as pool:
            jobs = {pool.submit(self.call, record, "Adjust", message): record
                    for record in records}
            for job, record in jobs.items():
                try:
                    job.result()
                except ClusterError as exc:
                    # Not fatal: the worker trains on as before (a dead one is dropped by
                    # the usual means). Counted in metrics.json.
                    wid = record.worker_id
                    self.unreached[wid] = self.unreached.get(wid, 0) + 1
                    log.warning("adjustment %d not taken by worker %d: %s",
                                adjustment.number, wid, exc)
