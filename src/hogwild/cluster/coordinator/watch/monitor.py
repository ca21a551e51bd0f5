"""Watching the run while the workers train: evaluations, stops, drops, stalls, checkpoints."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.checkpoints.checkpointer import Checkpointer
from hogwild.cluster.coordinator.members.rejoin import Rejoins
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.watch.adjust import Adjuster
from hogwild.cluster.coordinator.watch.evaluations import Evaluator, check_diverged, fmt
from hogwild.cluster.coordinator.watch.stopping import StallWatch, StopRules, StopSignal
from hogwild.cluster.coordinator.watch.trace import ModelTrace
from hogwild.config import Settings
from hogwild.errors import TrainingDiverged
from hogwild.model.evaluation import evaluate
from hogwild.model.spec import ModelSpec


def stop_rules(settings: Settings, train_rows: int, resume: Checkpoint | None,
               say: Callable[[str], None]) -> StopRules:
    """The run's stopping rules; a resumed run's early stopping goes on where it was."""
    rules = StopRules.from_settings(settings, train_rows)
    if resume is not None and resume.early:
        # Early stopping goes on counting, and the best model so far is still the one
        # to save if nothing better comes.
        rules.early.restore(resume.early, resume.best_w)
        if rules.early.best_index is not None and math.isfinite(rules.early.best_loss):
            best = rules.early.best_loss
            say(f"early stopping goes on: best validation loss {fmt(best)}, "
                f"{rules.early.state()['since_best']} evaluation(s) since")
    return rules


class MemberWatch:
    """Says once that a worker was dropped, and judges the workers' divergence reports."""

    def __init__(self, state: RunState, spec: ModelSpec, val: Any, loss: Any,
                 learning_rate: float, say: Callable[[str], None]) -> None:
        self.state = state
        self.spec = spec
        self.val = val
        self.loss = loss
        self.learning_rate = learning_rate
        self.say = say
        self.announced: dict[int, int] = {}  # worker id -> drops announced
        # Workers dropped because they reported their weights non-finite (id -> round).
        self.dismissed: dict[int, int] = {}

    def announce_drops(self) -> None:
        """Say once that a worker was dropped, and why."""
        for record in self.state.roster.dead_workers():
            if self.announced.get(record.worker_id, 0) != record.drops:
                self.announced[record.worker_id] = record.drops
                self.say(f"worker {record.worker_id} dropped: {record.dead_reason}")

    def judge_divergence(self) -> None:
        """Weigh the workers' reports of non-finite weights against the global model.

        A report is one member's word about its own weights; a buggy or deceived worker can
        send it on a healthy run. The run diverged if the global model or its validation
        loss is not finite (TrainingDiverged), or if no worker is left to train once the
        reporters are dropped (every worker diverged: a learning rate far too large, whose
        non-finite weights are never sent on as deltas). Else the reporters are dropped
        (their deltas refused from now on; they may register again and rejoin from the
        global model), and one line says so and why."""
        claims = self.state.roster.take_divergence_claims()
        if not claims:
            return
        who = ", ".join(f"worker {wid} (round {r})" for wid, r in sorted(claims.items()))
        totals = self.state.totals()
        val = evaluate(self.val, totals.w, self.loss, self.spec) if self.val.n_rows else None
        val_loss = val.loss if val else None
        check_diverged(totals.w, self.learning_rate, val_loss,
                       reported=f"after {who} reported non-finite weights")
        measured = ("its validation loss " + fmt(val_loss) if val_loss is not None
                    else "no validation set to score it on")
        why = (f"the global model is finite ({measured}, {totals.delta_rounds} deltas), "
               "so the report is taken as about its own weights")
        for wid, round_ in sorted(claims.items()):
            # Said once, here: not again among the drops.
            self.announced[wid] = self.state.roster.dismiss_divergence(wid, round_, why)
            self.dismissed[wid] = round_
        left = len(self.state.roster.live_workers())
        self.say(f"divergence report from {who} not taken for the run: {why}; "
                 f"dropped, {left} worker(s) go on")
        if not left:
            raise TrainingDiverged(f"{who} reported non-finite weights and no worker is left "
                                   "to train the global model", self.learning_rate)


class Monitor:
    """The loop that runs while the workers train, until a stop rule or a signal ends it."""

    def __init__(self, settings: Settings, state: RunState, stop: StopSignal,
                 evaluator: Evaluator, members: MemberWatch, rejoins: Rejoins,
                 checkpointer: Checkpointer, trace: ModelTrace | None,
                 adjuster: Adjuster | None, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.state = state
        self.stop = stop
        self.evaluator = evaluator
        self.members = members
        self.rejoins = rejoins
        self.checkpointer = checkpointer
        self.trace = trace
        self.adjuster = adjuster
        self.say = say
        # time.monotonic() of the loop's last turn; None outside it (liveness watch).
        self.alive_at: float | None = None

    def run(self, rules: StopRules, began: float) -> str:
        """Watch until the run ends; the reason it ended."""
        self.evaluator.header()
        next_eval = time.perf_counter() + self.settings.eval_interval
        try:
            return self._loop(rules, began, next_eval)
        finally:
            self.alive_at = None

    def _loop(self, rules: StopRules, began: float, next_eval: float) -> str:
        s = self.settings
        ev = self.evaluator
        evaluated_deltas = -1
        reports_at_eval = -1  # state.roster.loss_reports at the last periodic evaluation
        next_checkpoint = time.perf_counter() + s.checkpoint_interval
        trace = self.trace
        # No delta for stall_warning_after (and for 4 barrier_timeouts, and 10 times the
        # longest gap between deltas so far) is said to be a stall on the console; each later
        # warning waits twice as long, and the third ends the run (stop reason "stalled").
        stall = StallWatch(max(s.stall_warning_after, 4 * s.barrier_timeout))
        next_curve = ev.next_curve(began)
        while True:
            self.alive_at = time.monotonic()
            self.members.judge_divergence()
            elapsed = time.perf_counter() - began
            if trace is not None and trace.due(elapsed):
                trace.take(self.state.totals(unchanged=trace.latest()), elapsed)
            # Turn at least every 50 ms, and on time for an evaluation (a curve point, a
            # trace copy) due sooner: an eval_interval below 50 ms used to be stretched to
            # the turn.
            due = min(next_eval, next_curve)
            if trace is not None and not trace.full:
                due = min(due, began + trace.next_at)
            if self.stop.wait(min(0.05, max(0.0, due - time.perf_counter()))):
                return self.stop.name
            self.rejoins.start()
            self.members.announce_drops()
            silent = stall.observe(self.state.model.deltas_received, time.monotonic())
            if silent is not None:
                self._warn_stalled(silent)
                if stall.stalled:
                    self.say(f"ending the run: no delta for {silent:.0f}s, the workers did not "
                             "recover (the model so far is saved)")
                    return "stalled"
            if s.checkpoint_interval and time.perf_counter() >= next_checkpoint:
                next_checkpoint = time.perf_counter() + s.checkpoint_interval
                self.checkpointer.write(began, rules)
            now = time.perf_counter()
            roster = self.state.roster
            reason = rules.budget(now - began, roster.examples(), roster.all_finished(),
                                  len(roster.live_workers()))
            if reason is not None:
                return reason
            if now < next_eval and now >= next_curve:
                # A model no delta changed since the last row adds nothing to the curve.
                if self.state.model.deltas_received != ev.deltas_at_last:
                    ev.evaluate(began)  # (a curve point: not printed, not weighed)
                next_curve = ev.next_curve(began)
            if now >= next_eval:
                row = ev.evaluate(began)
                # The same model as at the last evaluation (no delta since: a round longer
                # than eval_interval, e.g. the MLP's) says nothing about progress, so it does
                # not count towards `patience`, nor is it shown to the swing guard.
                fresh = row["deltas_received"] != evaluated_deltas
                metric = row["val_loss"]
                if metric is None and ev.loss_reports_seen != reports_at_eval:
                    # No validation set: the training loss, if a worker reported one since
                    # the previous evaluation (repeated, it counted as no progress each time).
                    metric = ev.train_loss
                reports_at_eval = ev.loss_reports_seen
                decision, best = None, False
                if metric is not None and fresh:
                    decision = rules.evaluation(float(metric), ev.last_w,
                                                accuracy=row["val_accuracy"])
                    best = rules.took_best()
                    if best:
                        ev.best_row = row
                # Printed once weighed: the row of the model saved is never thinned out.
                ev.announce(row, best=best)
                if self.adjuster is not None and fresh:
                    self.adjuster.observe(row, self.state.roster.live_workers())
                if metric is not None and fresh:
                    evaluated_deltas = row["deltas_received"]
                # Counted from the evaluation's end: one slower than eval_interval never
                # runs back to back with the next, taking a core from the workers.
                next_eval = time.perf_counter() + s.eval_interval
                next_curve = ev.next_curve(began)
                if decision is not None:
                    return decision

    def _warn_stalled(self, silent: float) -> None:
        """One console line: no delta for ``silent`` seconds, and where each worker was."""
        where = ", ".join(f"{r.worker_id} at round {r.round}"
                          for r in sorted(self.state.roster.live_workers(),
                                          key=lambda r: r.worker_id))
        self.say(f"no delta from any worker for {silent:.0f}s (live: {where or 'none'}): "
                 "training may be stalled, the workers waiting on each other; their logs "
                 "say what each waits for (SIGTERM ends the run with the model so far)")
