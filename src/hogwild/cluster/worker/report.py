"""A worker's reports to its coordinator: progress, divergence, and its final state."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Protocol

from hogwild.cluster.transport.sender import Destination
from hogwild.cluster.transport.timing import Timers
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.streams import FinalState, state_chunks
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.phase import COORDINATOR_ID
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.shared import Counters, Signals
from hogwild.engine.round import RoundEngine
from hogwild.errors import ClusterError, TrainingDiverged

PROGRESS_EVERY = 0.5  # seconds between progress reports to the coordinator


class ReportsHost(Protocol):
    """What the reports read of the worker (the node; configure replaces its plan, engine
    and inbox, and the destinations are replaced whole when one changes)."""

    plan: RunPlan | None
    engine: RoundEngine
    inbox: Inbox
    destinations: dict[int, Destination]
    run_id: str
    worker_id: int


class Reports:
    """What the coordinator hears from this worker; the training loss since the last report."""

    def __init__(self, node: ReportsHost, signals: Signals, counters: Counters, callers: Callers,
                 timers: Timers, chunk_bytes: int) -> None:
        self.node = node
        self.signals = signals
        self.counters = counters
        self.callers = callers
        self.timers = timers
        self.chunk_bytes = chunk_bytes  # the size of the final state's chunks
        self.loss_sum = 0.0   # the training threads add to it (under the signals' cond)
        self.rows = 0
        self.last_train_loss = float("nan")
        self.last_progress = 0.0

    def count(self, loss_sum: float, rows: int) -> None:
        """(Under the signals' cond.) A training thread's round: its loss sum and rows."""
        self.loss_sum += loss_sum
        self.rows += rows

    def maybe_report_progress(self, plan: RunPlan, done: bool) -> None:
        node = self.node
        now = time.monotonic()
        if not done and now - self.last_progress < PROGRESS_EVERY:
            return
        self.last_progress = now
        with self.signals.cond:
            if self.rows:
                loss = self.loss_sum / self.rows
                # An overflowing loss is no number to report (the coordinator refuses one):
                # NaN says "none", and a model that is no longer finite is reported as
                # diverged by the exchange.
                self.last_train_loss = loss if math.isfinite(loss) else float("nan")
            self.loss_sum, self.rows = 0.0, 0
        coordinator = node.destinations.get(COORDINATOR_ID)
        if coordinator is None:
            return
        applied = sum(p.applied for p in node.inbox.snapshot().values())
        c = self.counters
        coordinator.put("ReportProgress", pb.Progress(
            protocol_version=PROTOCOL_VERSION, run_id=node.run_id, worker_id=node.worker_id,
            round=c.rounds, examples=c.examples, train_loss=self.last_train_loss,
            done=done, deltas_sent=c.deltas_sent, deltas_applied=applied,
            max_staleness=c.max_staleness))

    def diverged(self, plan: RunPlan, round_: int) -> None:
        """Tell the coordinator the weights are no longer finite, then stop with an error."""
        node, c = self.node, self.counters
        coordinator = node.destinations.get(COORDINATOR_ID)
        if coordinator is not None:
            coordinator.put("ReportProgress", pb.Progress(
                protocol_version=PROTOCOL_VERSION, run_id=node.run_id,
                worker_id=node.worker_id, round=round_, examples=c.examples,
                train_loss=float("nan"), done=True, deltas_sent=c.deltas_sent,
                max_staleness=c.max_staleness, diverged=True))
            coordinator.flush(plan.rpc_timeout)
        raise TrainingDiverged(f"worker {node.worker_id}, round {round_}", plan.learning_rate)

    def final_state(self, message: pb.FinalStateRequest, timeout: float) -> Iterator[pb.StateChunk]:
        """The final weights, once this worker is done (waits up to ``timeout``)."""
        node = self.node
        self.callers.check_run(message.protocol_version, message.run_id, "final state request")
        if not self.signals.done.wait(timeout):
            raise ClusterError("this worker has not finished yet")
        state = self.snapshot_state()
        assert node.plan is not None
        yield from state_chunks(state, node.run_id, self.chunk_bytes)
        self.signals.state_served.set()

    def snapshot_state(self) -> FinalState:
        node, c = self.node, self.counters
        peers = node.inbox.snapshot()
        coordinator = node.destinations.get(COORDINATOR_ID)
        return FinalState(
            worker_id=node.worker_id, weights=node.engine.w.copy(), rounds=c.rounds,
            examples=c.examples, deltas_sent=c.deltas_sent,
            applied_from={pid: p.applied for pid, p in peers.items()},
            acked_by={dest_id: d.acked.get("PushDelta", 0)
                      for dest_id, d in node.destinations.items() if dest_id != COORDINATOR_ID},
            dropped_peers=[pid for pid, p in peers.items() if p.dropped],
            acked_by_coordinator=coordinator.acked.get("PushDelta", 0) if coordinator else 0,
            max_staleness=c.max_staleness, timings=self.timers.snapshot(),
            bytes_sent=sum(d.bytes_sent for d in node.destinations.values()),
            bytes_to_coordinator=coordinator.bytes_sent if coordinator else 0)

