"""Scoring the global model as the run goes: the rows of metrics.jsonl, the progress rows."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.base.text import number
from hogwild.cluster.coordinator.members.records import Totals
from hogwild.cluster.coordinator.state import RunState
from hogwild.errors import TrainingDiverged
from hogwild.model.evaluation import evaluate, is_finite
from hogwild.model.spec import ModelSpec
from hogwild.outputs.console import RUN_ROWS, Console
from hogwild.outputs.history import EvalHistory

# Between the periodic evaluations (eval_interval apart, the ones printed and counted by
# early stopping) the learning curve gets extra points while scoring the validation set is
# cheap: at least CURVE_MIN_GAP seconds apart, CURVE_COST_SHARE times as long as the last
# evaluation took (so they take at most 1/20 of the coordinator's time), and CURVE_GROWTH of
# the time trained so far (so a run gets about 200 of them in all, then none once that gap
# passes eval_interval). Without them a short run (the bundled demo trains 0.25 s) plotted
# one or two points. They go to metrics.jsonl and the plot like any evaluation, but are not
# printed, and `patience` keeps counting evaluations eval_interval apart.
CURVE_MIN_GAP = 0.01
CURVE_COST_SHARE = 20.0
CURVE_GROWTH = 0.02


def fmt(value: float | None) -> str:
    return number(value)


def check_diverged(w: npt.NDArray[np.float64], learning_rate: float,
                   val_loss: float | None = None, reported: str = "") -> None:
    """TrainingDiverged if the global model ``w`` or its validation loss is not finite:
    the run ends at once and nothing is saved. ``reported``: who said so first."""
    where = None
    if not is_finite(w):
        where = "the global model"
    elif val_loss is not None and not math.isfinite(val_loss):
        where = "the global model's validation loss"
    if where is not None:
        raise TrainingDiverged(f"{where}, {reported}" if reported else where, learning_rate)


class Evaluator:
    """Scores the global model on the validation set and keeps each row (history, scalars)."""

    def __init__(self, state: RunState, spec: ModelSpec, val: Any, loss: Any,
                 history: EvalHistory, scalars: Any, console: Console, train_rows: int,
                 epochs: float, learning_rate: float, curve_points: bool) -> None:
        self.state = state
        self.spec = spec
        self.val = val
        self.loss = loss
        self.history = history
        self.scalars = scalars            # TensorBoard's writer, or None
        self.console = console
        self.train_rows = train_rows
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.curve_points = curve_points  # False: a trace is the fine curve (see next_curve)
        self.rows = console.rows()
        self.eval_seconds = 0.0          # validation evaluations during training
        self.last_cost = 0.0             # seconds the last of them took (curve points)
        self.loss_reports_seen = -1      # state.roster.loss_reports at the last evaluation
        self.deltas_at_last = -1         # state.model.deltas_received at the last evaluation
        self.train_loss: float | None = None  # the last evaluation's training loss
        self.best_row: dict[str, Any] | None = None  # the evaluation whose model is kept
        # A warm start's epoch-0 row: a candidate for the model saved, so printed first.
        self.starting_row: dict[str, Any] | None = None
        self.last_w: npt.NDArray[np.float64] = np.zeros(0)  # the last evaluation's model

    def header(self) -> None:
        """The progress rows' header; the rows are thinned out from here."""
        self.console.say(RUN_ROWS.header())
        self.rows = self.console.rows()
        if self.starting_row is not None:
            self.announce(self.starting_row, best=self.best_row is self.starting_row)

    def next_curve(self, began: float) -> float:
        """When the next curve point is due (see CURVE_MIN_GAP), counted from now. Never with
        a trace: trace.jsonl, scored after training, is the fine curve then, and takes no CPU
        from the workers for it."""
        if not self.curve_points:
            return math.inf
        now = time.perf_counter()
        return now + max(CURVE_MIN_GAP, CURVE_COST_SHARE * self.last_cost,
                         CURVE_GROWTH * (now - began))

    def record(self, row: dict[str, Any]) -> None:
        """Keep an evaluation: metrics.jsonl, and the TensorBoard scalars if asked for."""
        self.history.add(row)
        if self.scalars is not None:
            self.scalars.add(row, int(row["examples"]))

    def evaluate(self, began: float, totals: Totals | None = None, closing: bool = False,
                 at: float | None = None) -> dict[str, Any]:
        """Score the global model on the validation set and record the row in the history
        (:meth:`announce` prints it); ``closing``: the run's last evaluation, of the model
        trained until ``at`` seconds (when the workers were stopped: the deltas still
        arriving were made before that, and the done line's time is that one too)."""
        t0 = time.perf_counter()
        if totals is None:
            totals = self.state.totals()
        w = totals.w
        self.last_w = w
        val = evaluate(self.val, w, self.loss, self.spec) if self.val.n_rows else None
        check_diverged(w, self.learning_rate, val.loss if val else None)
        self.last_cost = time.perf_counter() - t0
        self.eval_seconds += self.last_cost
        examples = totals.examples
        # The workers report their training loss every half second or so: a row between two
        # reports would repeat the last one, which the plot drew as a flat line. Such a row
        # has none; the closing one always has the last reported. (Early stopping on the
        # training loss takes it from train_loss, see Monitor.)
        reports = self.state.roster.loss_reports
        fresh = closing or reports != self.loss_reports_seen
        self.loss_reports_seen = reports
        self.deltas_at_last = totals.deltas_received
        losses = [r.train_loss for r in self.state.roster.workers.values()
                  if r.train_loss is not None]
        self.train_loss = float(np.mean(losses)) if losses else None
        if not fresh:
            losses = []
        # The row describes the model taken at t0; training went on while it was evaluated.
        row: dict[str, Any] = {"elapsed": t0 - began if at is None else at,
               "round": totals.rounds,
               "examples": examples, "epochs": examples / max(1, self.train_rows),
               "val_loss": val.loss if val else None,
               "val_accuracy": val.accuracy if val else None,
               "train_loss": float(np.mean(losses)) if losses else None,
               "deltas_received": totals.deltas_received,
               "delta_rounds": totals.delta_rounds,
               "bytes_received": totals.bytes_received,
               "max_staleness": self.state.roster.max_staleness()}
        self.record(row)
        return row

    def announce(self, row: dict[str, Any], best: bool = False, last: bool = False) -> None:
        """Print ``row`` as a progress row, thinned out (see outputs.console.RowThrottle):
        ``best``: its model is the best so far (its row is never thinned out if it is the one
        saved); ``last``: the closing row, always printed (a periodic one held back is
        older)."""
        text = RUN_ROWS.row(row)
        if last:
            self.rows.held = None
            self.rows.offer(text, self.console.out, best=best, due=True)
            self.rows.flush(self.console.out)
        else:
            self.rows.offer(text, self.console.out, done=row["epochs"] / max(1, self.epochs),
                            best=best)

    def initial_row(self) -> dict[str, Any]:
        """The evaluation of the model no worker has trained yet (the curves' first point;
        not weighed by early stopping; printed only as a warm start's, see starting_row)."""
        val = (evaluate(self.val, self.state.model.model_copy(), self.loss, self.spec)
               if self.val.n_rows else None)
        return {"elapsed": 0.0, "round": 0, "examples": 0, "epochs": 0.0,
                "val_loss": val.loss if val else None,
                "val_accuracy": val.accuracy if val else None, "train_loss": None,
                "deltas_received": 0, "delta_rounds": 0, "bytes_received": 0,
                "max_staleness": 0}
