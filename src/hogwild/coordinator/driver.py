"""The coordinator's run, start to end: data, registrations, shards, start, evaluate, stop, write."""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import grpc
import numpy as np
import numpy.typing as npt

from hogwild.config import Settings
from hogwild.coordinator import checkpoint, fingerprint
from hogwild.coordinator.adjust import Adjuster
from hogwild.coordinator.checkpoint import Checkpoint
from hogwild.coordinator.relay import StarRelay
from hogwild.coordinator.shipping import SLOW_LINK_BYTES_PER_S, NoAnswer, Shipment, ship
from hogwild.coordinator.state import RunState, Totals, WorkerRecord
from hogwild.coordinator.stopping import StallWatch, StopRules, StopSignal, regression_warning
from hogwild.coordinator.trace import ModelTrace, earlier_rows
from hogwild.coordinator.tree_root import TreeRoot
from hogwild.data.labels import MULTICLASS
from hogwild.engine.guard import SwingGuard
from hogwild.engine.rounds import choose_round_size, fit_round_size, max_rounds, round_rule
from hogwild.errors import (
    ClusterError,
    ConfigError,
    DataError,
    HogwildError,
    OutputError,
    TrainingDiverged,
)
from hogwild.model.evaluation import evaluate, is_finite
from hogwild.model.losses import get_loss
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts
from hogwild.outputs.console import NORMAL, Console
from hogwild.outputs.history import EvalHistory
from hogwild.outputs.plotter import BackgroundPlot
from hogwild.outputs.tensorboard import open_scalars
from hogwild.protocol import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.protocol.codec import value_bound
from hogwild.protocol.health import HealthReporter
from hogwild.protocol.security import from_settings
from hogwild.protocol.streams import FinalState, receive_state, state_chunks

if TYPE_CHECKING:
    from hogwild.coordinator.localplan import LocalShipping

log = logging.getLogger("hogwild.coordinator")

T = TypeVar("T")
# No delta for this long (and for 4 barrier_timeouts, and 10 times the longest gap between
# deltas so far) is said to be a stall on the console; each later warning waits twice as long.
STALL_WARNING_AFTER = 30.0
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


@dataclass
class Layout:
    """The shape of the run every worker is configured with."""

    dim: int
    n_features: int
    train_rows: int
    max_rounds: int
    round_size: int
    workers: int


@dataclass(frozen=True)
class TrainShape:
    """The size of the training set, whether the coordinator holds it or the workers read it."""

    n_rows: int
    nnz: int
    n_features: int


class Interrupted(Exception):
    """SIGTERM before training began: the coordinator exits 130 without writing outputs."""


class HandedOver(Exception):
    """SIGTERM under ``on_sigterm: checkpoint``: the run is left to a successor that resumes
    it (checkpoint written, workers told to register again); the coordinator exits 143."""


class RunDriver:
    """Drives one distributed run over a :class:`RunState` that the servicer also updates."""

    def __init__(self, settings: Settings, state: RunState, health: HealthReporter,
                 stop: StopSignal, out: TextIO | None = None,
                 resume: Checkpoint | None = None, plot: BackgroundPlot | None = None,
                 run_dir: artifacts.RunDir | None = None) -> None:
        self.settings = settings
        # Where this run writes (its own directory under out_dir, published at the end).
        self.run_dir = run_dir or artifacts.RunDir.existing(settings.out_dir)
        # sys.stdout at call time, not at import (a test may have replaced it since)
        self.out = sys.stdout if out is None else out
        # What to print (-q, -v, --json, as the command line said) and which progress rows.
        self.console = Console(self.out)
        self._rows = self.console.rows()
        self.state = state
        self.health = health
        self.stop = stop
        self.handed_over = False  # the workers were told to register with a successor
        self.channels: dict[int, grpc.Channel] = {}
        self.stubs: dict[int, Any] = {}
        self.history = EvalHistory(self.run_dir.path)
        # tensorboard_dir: every evaluation's scalars too (refused now if it cannot be done).
        self.scalars = open_scalars(settings, self.run_dir.name)
        self.shipments: list[Shipment] = []
        self.final_states: dict[int, FinalState] = {}
        self.started_workers = False
        self.train_began = time.perf_counter()
        # time.monotonic() of the monitor loop's last turn; None outside it (liveness watch).
        self.alive_at: float | None = None
        self.eval_seconds = 0.0          # validation evaluations during training
        self._last_eval_cost = 0.0       # seconds the last of them took (curve points)
        self._loss_reports_seen = -1     # state.loss_reports at the last evaluation
        self._deltas_at_last_eval = -1   # state.deltas_received at the last evaluation
        self._eval_train_loss: float | None = None  # the last evaluation's training loss
        self._best_row: dict[str, Any] | None = None  # the evaluation whose model is kept
        self.train_cpu_seconds = 0.0     # this process's CPU while the workers trained
        self.trace: ModelTrace | None = None  # trace_interval's copies of the model
        self.round_size = 0              # examples per thread per round, as configured
        self.worker_threads: int | list[int] = self.settings.threads  # as the workers report
        self.shards: list[Any] = []
        self.train = TrainShape(0, 0, 0)
        self.local: LocalShipping | None = None  # shipping local: the plan of ranges
        self.layout = Layout(0, 0, 0, 0, 0, 0)
        self._announced_drops: dict[int, int] = {}  # worker id -> drops announced
        # Workers dropped because they reported their weights non-finite (id -> round).
        self._dismissed_claims: dict[int, int] = {}
        self._rejoin_lock = threading.Lock()
        self.conflicts: dict[str, Any] | None = None  # the data's conflict statistics
        self.spec = ModelSpec.linear(1)  # the run's model, set once the data is loaded
        self.plot: BackgroundPlot | None = plot  # the loss plot's helper process
        self.resume = resume             # the checkpoint this run continues, if any
        self.warm_started = False        # the workers start from the initial_model setting's
        self.checkpoints = 0
        self.checkpoint_seconds = 0.0
        self.relay: StarRelay | None = None  # topology star: relays the sums of deltas
        self.data_fingerprint = ""  # of the rows trained on, kept in every checkpoint
        self.max_abs_value: float | None = None  # largest |x| shipped (None: not seen here)
        # Acts on a validation curve that swings (swing_tolerance; set when training starts).
        self.adjuster: Adjuster | None = None

    def _print(self, text: str, level: int = NORMAL) -> None:
        self.console.say(text, level)

    # ------------------------------------------------------------------------ run

    def run(self) -> dict[str, Any]:
        """The whole run; returns the metrics written to metrics.json."""
        from hogwild.data import shard
        from hogwild.data.sources import describe
        from hogwild.inprocess.local import load_splits, model_spec
        from hogwild.runtime.warmup import preload_in_background

        s = self.settings
        began = time.perf_counter()
        if self.plot is None:
            self.plot = BackgroundPlot()  # imports matplotlib in its own process meanwhile
        preload_in_background()
        if s.shipping == "local":
            if s.initial_model:
                raise ConfigError("initial_model", "not with shipping local (the coordinator "
                                  "fits the warm start's feature space to the data it loads)")
            from hogwild.coordinator.localplan import load_local

            splits, self.local = load_local(s)
            self.train = TrainShape(self.local.plan.train_rows, self.local.plan.train_nnz,
                                    splits.val.n_features)
        else:
            splits = load_splits(s)
            self.train = TrainShape(splits.train.n_rows, splits.train.nnz,
                                    splits.train.n_features)
        if splits.labels.task == MULTICLASS:
            classes = ", ".join(f"{v:g}" for v in splits.labels.classes or ())
            raise DataError(f"{s.data}: labels {{{classes}}} are {splits.labels.n_classes} "
                            "classes; the cluster trains binary and regression models only "
                            "(`hogwild train` trains multiclass one-vs-rest)")
        self._check_same_data(splits)
        train_line = self.local.describe() if self.local else describe(splits.train, splits.labels)
        self._print(f"data: train {train_line}")
        self._print(f"      validation {describe(splits.val, splits.labels)}")
        self._print(f"      test {describe(splits.test, splits.labels)}")
        if splits.hashing is not None:
            from hogwild.data.hashing import encoding_lines

            for line in encoding_lines(splits.hashing):
                self._print(f"      {line}")
        load_seconds = time.perf_counter() - began
        if self.local is None:
            self._conflicts(splits.train, load_seconds)
        else:
            self._print("conflicts: not measured (shipping local: the training rows stay with "
                        "the workers)")
        self.health.set(True)
        self._print(f"run {self.state.run_id}: waiting for {s.workers} worker(s) "
                    f"(register_timeout {s.register_timeout:g}s)")
        try:
            # A resumed run goes on without a worker that did not come back (it may rejoin
            # later; a tree routes around its place from the start).
            workers = self.state.wait_for_workers(
                s.register_timeout, self.stop.is_set,
                go_on_without=self.resume is not None)
            for record in workers:
                self._connect(record)
            self._leave_if_stopped()
            n_features = self.train.n_features
            spec = self.spec = model_spec(s, n_features)
            dim = spec.dim
            initial = spec.initial_weights(s.seed) if spec.is_mlp else None
            if splits.initial is not None and self.resume is None:  # warm start
                from hogwild.inprocess.local import warm_start_weights

                initial = warm_start_weights(s, splits, spec)
                self.warm_started = True
            if self.resume is not None:
                if self.resume.w.shape != (dim,):
                    raise ClusterError(f"the checkpoint's model has {self.resume.w.shape[0]} "
                                       f"weights, this data set's {dim}: not the same run")
                initial = self.resume.w
            self.state.start_model(dim, initial)
            # Epoch 0: the model before any training (a resumed run has its rows already).
            first = self._initial_row(splits) if self.resume is None else None
            if self.local is not None:
                self.shards = [self.local.source(w) for w in range(len(workers))]
            else:
                self.shards = shard(splits.train, len(workers), seed=s.seed, mode=s.shipping)
            # A resumed run may go on without some; a place whose holder does not answer
            # goes to another worker (or, resumed, is dropped).
            workers = self._ship([r for r in workers if not r.dead])
            live = [r for r in workers if not r.dead]
            round_size = self.round_size = self._round_size(workers)
            max_rounds = self._max_rounds(workers, self.train.n_rows, round_size)
            self.layout = Layout(dim, n_features, self.train.n_rows, max_rounds, round_size,
                                 len(workers))
            self.max_abs_value = self._max_abs_value()
            self._start_relay(workers, dim)
            self._configure(workers)
            # The workers' own thread counts: `threads` is theirs to set, not this process's.
            counts = sorted({r.threads for r in workers})
            self.worker_threads = counts[0] if len(counts) == 1 else [r.threads for r in workers]
            each = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
            started = (str(len(live)) if len(live) == len(workers)
                       else f"{len(live)} of {len(workers)}")
            self._print(f"started {started} worker(s), {s.mode} mode, {each} thread(s) each, "
                        f"up to {max_rounds} rounds of {round_size} examples per thread")
            self._conflicts_as_started(live, round_size)
            if s.mode == "async" and self.settings.combine == "average" and s.topology != "mesh":
                # (mesh workers keep their change whole until the peers' round arrives)
                log.warning("combine average in async mode with topology %s: each worker "
                            "trains on from its own change cut to 1/%d until its peers' "
                            "deltas arrive, which costs epochs; topology mesh does not",
                            s.topology, len(workers))
            if s.trace_interval > 0:
                # A resumed run's trace goes on from the rows its predecessor wrote.
                self.trace = ModelTrace(s.trace_interval, dim, earlier_rows(
                    self.run_dir.path, self.resume.elapsed) if self.resume is not None else ())
            train_began = self.train_began = time.perf_counter()
            cpu_began = time.process_time()
            if self.resume is not None:  # the clock, the time budget and the history go on
                train_began = self.train_began = train_began - self.resume.elapsed
                self._print(f"resumed run {self.state.run_id} at round {self.first_round} "
                            f"after {self.resume.elapsed:.2f}s of training")
            # Started anew, or cut after a resumed run's rows; each evaluation appends one.
            self.history.begin(self.resume.history if self.resume is not None else None)
            if first is not None:
                self._record(first)
            reason, rules = self._monitor(splits, train_began)
            # Reports that came with the last progress messages; and a run whose last workers
            # were dropped for their divergence has nothing but them to go on.
            self._judge_divergence(splits, get_loss(s.loss))
            if reason == "no live workers" and self._dismissed_claims:
                dropped = ", ".join(f"worker {wid} (round {r})"
                                    for wid, r in sorted(self._dismissed_claims.items()))
                raise TrainingDiverged(f"no worker is left, {dropped} dropped after reporting "
                                       "non-finite weights", s.learning_rate)
            if self.stop.hand_over:
                # The trace so far is scored and written for the successor to go on from
                # (it lived in memory only); scored again at the end if this run goes on.
                self._score_trace(splits, get_loss(s.loss))
                self._hand_over(train_began, rules)  # raises HandedOver once it is done
            self._stop_workers(reason)
            train_seconds = time.perf_counter() - train_began
            # Receiving, applying and evaluating while the workers trained (on a shared
            # machine this CPU is taken from them).
            self.train_cpu_seconds = time.process_time() - cpu_began
            self.health.set(False)  # draining: no new work is accepted from here on
            self._collect_final_states(dim)
        finally:
            if not self.handed_over:  # (else they are registering with the successor)
                self._stop_workers("coordinator shutting down", quiet=True)
            if self.relay is not None:
                self.relay.close()
        try:
            return self._finish(splits, rules, reason, train_seconds, load_seconds, began)
        except (OSError, OutputError) as exc:  # a full disk, a directory gone read-only
            raise self._outputs_failed(exc) from None

    def _outputs_failed(self, exc: OSError | OutputError) -> OutputError:
        """One line for outputs that could not be written, and where the run can go on."""
        out = self.run_dir.path
        text = str(exc if isinstance(exc, OutputError) else OutputError.writing(out, exc))
        if (out / checkpoint.CHECKPOINT_FILE).exists():
            text += (f"; the last checkpoint is kept: once there is room, `hogwild coordinator "
                     f"--resume {out}` with the same settings (and its workers started again) "
                     "goes on from it")
        return OutputError(text)

    def _check_same_data(self, splits: Any) -> None:
        """Fingerprint the rows the checkpoints will be taken on; a resume refuses other ones
        (another file, seed, fraction, hashing...) before any worker is waited for."""
        s = self.settings
        if not s.checkpoint_interval and s.on_sigterm != "checkpoint" and self.resume is None:
            return
        self.data_fingerprint = (fingerprint.of_plan(self.local.plan, splits.val)
                                 if self.local is not None
                                 else fingerprint.of_splits(splits.train, splits.val))
        taken_on = self.resume.data if self.resume is not None else ""
        if taken_on and taken_on != self.data_fingerprint:
            raise ConfigError("resume", f"the checkpoint in {s.resume} was taken on other "
                              "training or validation rows than these (another data file, "
                              "seed, val_fraction, test_fraction, shipping or feature hashing): "
                              "resume with the run's own data and settings, or start anew "
                              "without resume")

    def _start_relay(self, workers: list[WorkerRecord], dim: int) -> None:
        """Topology star (tree): start relaying deltas before any worker can send one. The
        tree's root relays like a star whose points are its children (the subtrees' sums)."""
        s = self.settings
        if s.topology not in ("star", "tree"):
            return
        security = from_settings(s)
        points = {r.worker_id: r.address for r in workers}

        def channel(wid: int, address: str) -> grpc.Channel:
            return security.channel(address, self.state.coordinator_key(wid))

        first = self.first_round
        if s.topology == "tree":
            self.state.tree_fanout = s.tree_fanout
            self.relay = TreeRoot(self.state, points, dim, s.mode, s.barrier_timeout,
                                  s.rpc_timeout, s.chunk_bytes, channel, s.tree_fanout,
                                  half=s.delta_dtype == "float16", first_round=first)
        else:
            self.relay = StarRelay(self.state, points, dim, s.mode, s.barrier_timeout,
                                   s.rpc_timeout, s.chunk_bytes, channel,
                                   half=s.delta_dtype == "float16", first_round=first)
        self.relay.start()

    def _conflicts(self, train: Any, load_seconds: float) -> None:
        """Print the data's conflict statistics and the safe in-flight bound (bounded cost)."""
        from hogwild.data.conflicts import startup_report

        s = self.settings
        rounds = choose_round_size(s.round_size, train.n_rows, train.nnz, s.workers * s.threads,
                                   s.combine, s.workers)
        line, self.conflicts = startup_report(train, threads=s.threads, workers=s.workers,
                                              round_size=rounds, distributed=True, seed=s.seed,
                                              load_seconds=load_seconds)
        self._report_conflicts(line, s.threads, s.workers)

    def _report_conflicts(self, line: str, threads: int, workers: int) -> None:
        """The conflicts line as a warning where a setting acts on it, else at info level
        (the statistics are in metrics.json either way).

        With combine sum every worker's steps of a round count in full, so the examples in
        flight (threads x workers x round_size) are what the bound n/(2Δ) is about; when
        threads x workers alone are within it, round_size decides, and the warning names it.
        Where even one example per thread exceeds the bound (dense rows: n/(2Δ) < 1 on most
        real text data), no round size is covered, and a warning on every run would say
        nothing a user can act on."""
        from hogwild.data.conflicts import Recommendation

        entry = self.conflicts
        rec = Recommendation(**entry["recommendation"]) if entry is not None else None
        if (rec is None or rec.tau is None or rec.fits or self.settings.combine != "sum"
                or threads * workers > rec.tau):
            log.info("%s", line)
            return
        log.warning("%s: with combine sum so many examples in flight may overshoot; "
                    "round_size %d or less keeps them within the bound (or combine average)",
                    line, rec.round_size)

    def _conflicts_as_started(self, live: list[WorkerRecord], round_size: int) -> None:
        """The safe in-flight advice again, for the threads the workers registered with and
        the round size the run uses, when they differ from what the coordinator assumed
        before any worker registered (its own ``threads`` and ``workers`` settings): a
        worker's thread count is its own setting, as in compose or Kubernetes."""
        from hogwild.data.conflicts import Recommendation, advice, recommend_for

        entry = self.conflicts
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
            self._report_conflicts("conflicts as started (the workers' own threads and the "
                                   f"run's round size): {now}", max(r.threads for r in live),
                                   len(live))

    # ---------------------------------------------------------------- shipping

    def _ship_to(self, record: WorkerRecord) -> Shipment:
        """Worker ``record``'s shard (or plan of ranges), shipped and checked."""
        return ship(self.stubs[record.worker_id], record, self.shards[record.worker_id],
                    len(self.shards), self.settings, self.state.run_id, self.local)

    def _ship(self, live: list[WorkerRecord]) -> list[WorkerRecord]:
        """Ship every live worker its part; the run's workers then (dead ones included).

        A worker whose address does not answer as that worker (a process that crashed after
        it registered, a registration by someone who serves nothing) gives its place back,
        said in one line; the next worker to register takes it and is shipped the same part,
        until register_timeout, when the run fails. A resumed run drops it instead (it
        rejoins if it registers again) and goes on with the others."""
        s = self.settings
        shipped: dict[int, Shipment] = {}
        pending = live
        while pending:
            results = _parallel(self._ship_or_no_answer, pending)
            silent = [(r, why) for r, why in zip(pending, results) if isinstance(why, str)]
            shipped.update((r.worker_id, x) for r, x in zip(pending, results)
                           if isinstance(x, Shipment))
            if not silent:
                break
            for record, why in silent:
                if self.resume is not None:  # announced with the other drops
                    self.state.mark_dead(record.worker_id, why)
                    continue
                self._print(f"{why}: its place goes to the next worker that registers "
                            f"(within register_timeout={s.register_timeout:g}s)")
                self.state.release(record.worker_id)
            if self.resume is not None:
                if not shipped:
                    raise ClusterError("no worker of the resumed run answered its shipment")
                break
            pending = self.state.wait_for_places([r.worker_id for r, _ in silent],
                                                 s.register_timeout, self.stop.is_set)
            for record in pending:
                self._connect(record)
            self._leave_if_stopped()
        self.shipments = [shipped[wid] for wid in sorted(shipped)]
        workers = list(self.state.workers.values())
        total = sum(x.nbytes for x in self.shipments)
        slowest = max(x.seconds for x in self.shipments)
        if self.local is not None:
            planned = sum(x.plan_bytes for x in self.shipments)
            self._print(f"{len(self.shipments)} worker(s) read their own rows (local), each range "
                        f"checked against its digest, in {slowest:.2f}s; 0 rows shipped "
                        f"({planned / 1e6:.2f} MB of plans and feature order)")
            return workers
        self._print(f"shipped {len(self.shipments)} shard(s) ({s.shipping}), {total / 1e6:.1f} "
                    f"MB in {slowest:.2f}s ({total / 1e6 / max(slowest, 1e-9):.0f} MB/s)")
        return workers

    def _ship_or_no_answer(self, record: WorkerRecord) -> Shipment | str:
        """The worker's shipment, or why nobody of this run answered at its address."""
        try:
            return self._ship_to(record)
        except NoAnswer as exc:
            return str(exc)

    def _leave_if_stopped(self) -> None:
        """Before the run started: nothing trained, nothing to write; tell whoever
        registered (Interrupted, or HandedOver to a successor), then leave."""
        if not self.stop.is_set():
            return
        if self.stop.hand_over:
            self._hand_workers_over()
            raise HandedOver(f"{self.stop.name} before the run started: left to a "
                             "successor; the workers register again")
        raise Interrupted(f"{self.stop.name} before the run started: no outputs written")

    @property
    def first_round(self) -> int:
        """The workers' first round: 1, or after a resume the checkpoint's next one."""
        return 1 if self.resume is None else self.resume.round + 1

    def _round_size(self, workers: list[WorkerRecord]) -> int:
        train = self.train
        combine = self.settings.combine
        threads = sum(r.threads for r in workers)
        size = choose_round_size(self.settings.round_size, train.n_rows, train.nnz, threads,
                                 combine, len(workers))
        work, at_least = round_rule(combine, len(workers))
        if self.settings.round_size is None:
            size = fit_round_size(size, train.n_rows, threads, self.settings.epochs)
            log.info("round_size auto: %d examples per thread (about %d non-zeros of work per "
                     "round, at least %d round(s) per epoch, whole rounds making %g epochs)",
                     size, work, at_least, self.settings.epochs)
        elif size != self.settings.round_size:
            log.info("round_size %d capped to %d examples per thread (at least %d round(s) per "
                     "epoch with combine %s)", self.settings.round_size, size, at_least, combine)
        return size

    def _max_rounds(self, workers: list[WorkerRecord], train_rows: int, round_size: int) -> int:
        return max_rounds(self.settings.epochs, train_rows, sum(r.threads for r in workers),
                          round_size)

    def _max_abs_value(self) -> float | None:
        """The largest |x| of the rows shipped to the workers; None with shipping local (the
        workers read their rows themselves)."""
        if self.local is not None:
            return None
        return max((float(np.max(np.abs(sh.values))) for sh in self.shards
                    if sh.values.shape[0]), default=0.0)

    def _value_bound_fields(self, record: WorkerRecord) -> tuple[float | None, int]:
        """(max_abs_value, run_threads) for a worker's RunConfig, and the coordinator's own
        bound on delta values updated to match. Every place counted with the most threads
        any worker registered with: at least the sum, and room for a worker that comes
        back with more (the bound only grows, so no delta it once admitted is refused)."""
        most = max([record.threads, *(r.threads for r in self.state.workers.values())])
        run_threads = max(self.layout.workers, len(self.state.workers), 1) * most
        lay, s = self.layout, self.settings
        bound = value_bound(
            model=self.spec.kind, loss=s.loss, lr_schedule=s.lr_schedule,
            learning_rate=s.learning_rate, lr_decay=s.lr_decay, l2=s.l2,
            max_abs_value=self.max_abs_value, run_threads=run_threads,
            round_size=lay.round_size, max_rounds=lay.max_rounds)
        # Only ever raised (the first config sets it from inf: no bound before the run).
        held = self.state.max_delta_value
        if held == math.inf or bound > held:
            self.state.max_delta_value = bound
        return self.max_abs_value, run_threads

    def _run_config(self, record: WorkerRecord, peers: list[WorkerRecord],
                    first_round: int = 1, examples_base: int = 0,
                    down: list[WorkerRecord] | None = None,
                    topology: str | None = None) -> pb.RunConfig:
        """``down``: peers dead now, named all the same (mesh) so that the worker takes
        them back when they rejoin (its PeerJoined refuses a worker that is no peer).
        ``topology``: this worker's, if not the run's (a tree's worker taken back: star)."""
        s, lay, keys = self.settings, self.layout, self.state.keys
        down_ids = {r.worker_id for r in down or []}
        replicate = s.shipping == "replicate"
        start_offset = (lay.train_rows * record.worker_id // lay.workers) if replicate else 0
        max_abs_value, run_threads = self._value_bound_fields(record)
        return pb.RunConfig(
            protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
            worker_id=record.worker_id,
            peers=[pb.Peer(worker_id=r.worker_id, address=r.address,
                           send_key=keys.key(record.worker_id, r.worker_id),
                           receive_key=keys.key(r.worker_id, record.worker_id),
                           down=r.worker_id in down_ids)
                   for r in [*peers, *(down or [])] if r.worker_id != record.worker_id],
            dim=lay.dim, n_features=lay.n_features, mode=s.mode,
            staleness=-1 if s.staleness is None else s.staleness, threads=record.threads,
            round_size=lay.round_size, max_rounds=lay.max_rounds, train_rows=lay.train_rows,
            start_offset=start_offset, loss=s.loss, learning_rate=s.learning_rate,
            lr_schedule=s.lr_schedule, lr_decay=s.lr_decay, power_t=s.power_t, l2=s.l2,
            fit_bias=s.fit_bias, barrier_timeout=s.barrier_timeout,
            rpc_timeout=s.rpc_timeout, seed=s.seed, thread_buffer=s.thread_buffer,
            model=self.spec.kind, hidden=list(self.spec.hidden),
            binary_features=self.spec.binary_features, deep_lr_scale=s.deep_lr_scale,
            first_round=first_round, examples_base=examples_base,
            delta_threshold=s.delta_threshold, delta_topk=s.delta_topk,
            delta_dtype=s.delta_dtype, topology=topology or s.topology,
            tree_fanout=s.tree_fanout,
            combine=self.settings.combine, max_abs_value=max_abs_value,
            run_threads=run_threads)

    def _configure(self, workers: list[WorkerRecord]) -> None:
        """Configure and start the live workers. A dead one (a resumed run that went on
        without it) is named down: mesh peers take it back if it rejoins, tree neighbours
        route around it (it comes back as a leaf of the coordinator)."""
        first = self.first_round
        live = [r for r in workers if not r.dead]
        named = self.settings.topology in ("mesh", "tree")
        down = [r for r in workers if r.dead] if named else []

        def configure(record: WorkerRecord) -> None:
            self._call(record, "Configure", self._run_config(
                record, live if named else workers, first_round=first,
                examples_base=record.examples, down=down))
            # Every worker starts from the checkpointed model, or the warm start's.
            if self.resume is not None or self.warm_started:
                self._load_model(record)

        _parallel(configure, live)
        start = pb.StartRequest(protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id)
        self.started_workers = True
        _parallel(lambda r: self._call(r, "Start", start), live)

    def _wait_ready(self, record: WorkerRecord, timeout: float) -> None:
        """Until the worker's health says SERVING: a new process loads its kernels after it
        registers, and a shard shipped meanwhile would miss its deadline."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self.channels[record.worker_id])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"worker {record.worker_id} at {record.address} was not ready "
                           f"within {timeout:g}s")

    def _load_model(self, record: WorkerRecord,
                    weights: npt.NDArray[np.float64] | None = None) -> None:
        """Send a worker the model to start from (LoadModel): ``weights``, or the global
        model now."""
        model = FinalState(worker_id=record.worker_id,
                           weights=self.state.model_copy() if weights is None else weights)
        try:
            self.stubs[record.worker_id].LoadModel(
                state_chunks(model, self.state.run_id, self.settings.chunk_bytes),
                timeout=self.settings.rpc_timeout + self.layout.dim * 8
                / SLOW_LINK_BYTES_PER_S)
        except grpc.RpcError as exc:
            raise ClusterError(f"LoadModel to worker {record.worker_id} failed: "
                               f"{exc.code().name} {exc.details()}") from None

    # ------------------------------------------------------------------ rejoining

    def _start_rejoins(self) -> None:
        """Bring back every worker that registered again (restarted, or resynchronising after
        its peers dropped it), each on its own thread so evaluations go on meanwhile."""
        for wid in self.state.take_rejoins():
            threading.Thread(target=self._rejoin, args=(wid,), name=f"rejoin-{wid}",
                             daemon=True).start()

    def _rejoin(self, wid: int) -> None:
        """Ship the worker its shard again, configure it to start after the current round
        with the global model, tell its live peers it is back, start it.

        Deltas its peers built between the model snapshot and their PeerJoined reach the
        global model but not this worker's copy (at most about a round of them): its weights
        may differ from the global model by those (reported as max_abs_diff_to_global).
        """
        record = self.state.workers[wid]
        try:
            self._connect(record)
            self._wait_ready(record, self.settings.register_timeout)
            self._ship_to(record)
            # One rejoin at a time from here: each sees the ones before it live (and tells
            # them), and names the ones after it down; two taken together saw each other
            # as dead and told nobody. Shipping, the long part, stays in parallel.
            with self._rejoin_lock:
                peers, dead = self.state.others(wid)
                # A peer that is dead now may come back later: named (down), so this worker
                # takes it back then. Star: no peer traffic (and its averaging counts the peers).
                down = dead if self.settings.topology == "mesh" else []
                round_ = self.state.max_round()
                # Tree: its neighbours re-attached around it for good; it comes back as a
                # leaf of the coordinator, which is a star worker's place.
                config = self._run_config(record, peers, first_round=round_ + 1,
                                          examples_base=record.examples, down=down,
                                          topology="star" if self.relay else None)
                self._call(record, "Configure", config)
                if self.relay is not None:
                    self._rejoin_star(record, round_ + 1, self.relay)
                    return
                self._load_model(record)
                joined = pb.PeerJoinedRequest(protocol_version=PROTOCOL_VERSION,
                                              run_id=self.state.run_id, worker_id=wid,
                                              address=record.address)

                def tell(peer: WorkerRecord) -> int:
                    try:
                        return int(self._call(peer, "PeerJoined", joined).round)
                    except ClusterError as exc:
                        log.warning("%s", exc)
                        return 0

                # It starts where its peers start sending to it and waiting for it.
                first = max([round_ + 1, *_parallel(tell, peers)])
                self.state.rejoined(wid, first - 1)
                self._start_rejoined(record, first, f"{len(peers)} peer(s) told")
        except (ClusterError, HogwildError) as exc:
            log.warning("worker %d could not rejoin: %s", wid, exc)
            self.state.mark_dead(wid, f"rejoin failed: {exc}")

    def _rejoin_star(self, record: WorkerRecord, first_round: int, relay: StarRelay) -> None:
        """(Rejoin lock held, the worker configured.) Topology star: the relay is its only
        peer. It takes the worker back and gives the model to send; the worker's aggregates
        wait until it holds that model (they leave out what the model holds already)."""
        wid = record.worker_id
        first, model = relay.take_back(wid, first_round)
        self._load_model(record, model)
        relay.release(wid, record.address)
        self._start_rejoined(record, first, (
            "as a leaf of the coordinator: its place in the tree stays routed around"
            if self.settings.topology == "tree" else "through the star relay"))

    def _start_rejoined(self, record: WorkerRecord, first: int, how: str) -> None:
        """Start a worker taken back at round ``first``, and say so."""
        if self.adjuster is not None:  # it trains with the run's current step size
            self.adjuster.catch_up(record)
        self._call(record, "Start", pb.StartRequest(
            protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id, first_round=first))
        self._print(f"worker {record.worker_id} rejoined at round {first} (incarnation "
                    f"{record.incarnation}, {how})")

    def _announce_drops(self) -> None:
        """Say once that a worker was dropped, and why."""
        for record in self.state.dead_workers():
            if self._announced_drops.get(record.worker_id, 0) != record.drops:
                self._announced_drops[record.worker_id] = record.drops
                self._print(f"worker {record.worker_id} dropped: {record.dead_reason}")

    def _connect(self, record: WorkerRecord) -> None:
        """A channel and stub to a registered worker's (current) address."""
        old = self.channels.pop(record.worker_id, None)
        if old is not None:
            old.close()
        self.channels[record.worker_id] = from_settings(self.settings).channel(
            record.address, self.state.coordinator_key(record.worker_id))
        self.stubs[record.worker_id] = pb_grpc.WorkerStub(  # type: ignore[no-untyped-call]
            self.channels[record.worker_id])

    def _call(self, record: WorkerRecord, rpc: str, message: Any) -> Any:
        try:
            return getattr(self.stubs[record.worker_id], rpc)(
                message, timeout=self.settings.rpc_timeout)
        except grpc.RpcError as exc:
            raise ClusterError(f"{rpc} to worker {record.worker_id} at {record.address} failed: "
                               f"{exc.code().name} {exc.details()}") from None

    # -------------------------------------------------------------- monitoring

    def _monitor(self, splits: Any, began: float) -> tuple[str, StopRules]:
        s = self.settings
        rules = StopRules.from_settings(s, self.train.n_rows)
        if self.resume is not None and self.resume.early:
            # Early stopping goes on counting, and the best model so far is still the one
            # to save if nothing better comes.
            rules.early.restore(self.resume.early, self.resume.best_w)
            if rules.early.best_index is not None:
                best = rules.early.best_loss
                self._print(f"early stopping goes on: best validation loss {best:.4f}, "
                            f"{rules.early.state()['since_best']} evaluation(s) since")
        loss = get_loss(s.loss)
        if s.swing_tolerance is not None:
            guard = SwingGuard(s.mode, s.staleness, s.swing_tolerance, splits.val.n_rows)
            self.adjuster = Adjuster(guard, self.state.run_id, self._call, self._print)
        self._print(f"{'elapsed':>8} {'round':>6} {'examples':>10} {'epochs':>7} "
                    f"{'val_loss':>9} {'val_acc':>8} {'deltas':>7} {'MB_in':>8} {'stale':>5}")
        self._rows = self.console.rows()
        next_eval = time.perf_counter() + s.eval_interval
        try:
            return self._monitor_loop(splits, rules, loss, began, next_eval)
        finally:
            self.alive_at = None

    def _monitor_loop(self, splits: Any, rules: StopRules, loss: Any, began: float,
                      next_eval: float) -> tuple[str, StopRules]:
        s = self.settings
        evaluated_deltas = -1
        reports_at_eval = -1  # state.loss_reports at the last periodic evaluation
        next_checkpoint = time.perf_counter() + s.checkpoint_interval
        trace = self.trace
        stall = StallWatch(max(STALL_WARNING_AFTER, 4 * s.barrier_timeout))
        next_curve = self._next_curve(began)
        while True:
            self.alive_at = time.monotonic()
            self._judge_divergence(splits, loss)
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
                return self.stop.name, rules
            self._start_rejoins()
            self._announce_drops()
            silent = stall.observe(self.state.deltas_received, time.monotonic())
            if silent is not None:
                self._warn_stalled(silent)
            if s.checkpoint_interval and time.perf_counter() >= next_checkpoint:
                next_checkpoint = time.perf_counter() + s.checkpoint_interval
                self._checkpoint(began, rules)
            now = time.perf_counter()
            reason = rules.budget(now - began, self.state.examples(),
                                  self.state.all_finished(), len(self.state.live_workers()))
            if reason is not None:
                return reason, rules
            if now < next_eval and now >= next_curve:
                # A model no delta changed since the last row adds nothing to the curve.
                if self.state.deltas_received != self._deltas_at_last_eval:
                    self._evaluate(splits, loss, began, announce=False)
                next_curve = self._next_curve(began)
            if now >= next_eval:
                row = self._evaluate(splits, loss, began)
                if self.adjuster is not None and row["deltas_received"] != evaluated_deltas:
                    self.adjuster.observe(row, self.state.live_workers())
                # Counted from the evaluation's end: one slower than eval_interval never
                # runs back to back with the next, taking a core from the workers.
                next_eval = time.perf_counter() + s.eval_interval
                next_curve = self._next_curve(began)
                metric = row["val_loss"]
                if metric is None and self._loss_reports_seen != reports_at_eval:
                    # No validation set: the training loss, if a worker reported one since
                    # the previous evaluation (repeated, it counted as no progress each time).
                    metric = self._eval_train_loss
                reports_at_eval = self._loss_reports_seen
                # The same model as at the last evaluation (no delta since: a round longer
                # than eval_interval, e.g. the MLP's) says nothing about progress, so it does
                # not count towards `patience`.
                if metric is not None and row["deltas_received"] != evaluated_deltas:
                    evaluated_deltas = row["deltas_received"]
                    decision = rules.evaluation(float(metric), self._last_w)
                    if rules.took_best():
                        self._best_row = row
                    if decision is not None:
                        return decision, rules

    def _warn_stalled(self, silent: float) -> None:
        """One console line: no delta for ``silent`` seconds, and where each worker was."""
        where = ", ".join(f"{r.worker_id} at round {r.round}"
                          for r in sorted(self.state.live_workers(), key=lambda r: r.worker_id))
        self._print(f"no delta from any worker for {silent:.0f}s (live: {where or 'none'}): "
                    "training may be stalled, the workers waiting on each other; their logs "
                    "say what each waits for (SIGTERM ends the run with the model so far)")

    _last_w: np.ndarray

    def _checkpoint(self, began: float, rules: StopRules) -> Checkpoint | None:
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
        ckpt.model = checkpoint.model_settings(self.settings)
        ckpt.best_w = rules.best_weights
        try:
            checkpoint.save(self.run_dir.path, ckpt)
        except OSError as exc:
            log.warning("checkpoint not written: %s", exc)
            return None
        self.checkpoint_seconds += time.perf_counter() - t0
        self.checkpoints += 1
        return ckpt

    def _hand_over(self, began: float, rules: StopRules) -> None:
        """Leave the run to a successor started with ``resume``: a checkpoint of every delta
        received, then the workers told to register again (they stop training at once and
        will start from the checkpoint's model), then HandedOver. If the checkpoint cannot be
        written this returns, and the run ends as SIGTERM ends it without the setting
        (workers stopped, outputs written): nothing is left to a successor with nothing to
        resume from."""
        # From here a worker registering (a rejoin) must wait for the successor: one taken in
        # now would be neither in the checkpoint's run nor told to register again. (Said
        # again when the workers are sent away; needed first for the checkpoint's time.)
        self.state.hand_over()
        ckpt = self._checkpoint(began, rules)
        if ckpt is None:
            log.warning("%s with on_sigterm checkpoint, but the checkpoint could not be "
                        "written: finishing the run here instead (outputs written)",
                        self.stop.name)
            return
        self._hand_workers_over()
        raise HandedOver(
            f"{self.stop.name}: the run was left to a successor at round {ckpt.round} "
            f"after {ckpt.elapsed:.2f}s of training; checkpoint written to "
            f"{self.run_dir.path / checkpoint.CHECKPOINT_FILE}: `hogwild coordinator "
            f"--resume {self.run_dir.path}` with the same settings goes on from it, and the "
            "workers register with it")

    def _hand_workers_over(self) -> None:
        """Tell every live worker to leave the run and register again (with a successor);
        from now on this coordinator refuses their registrations, which are the successor's
        (before training too, where nothing else would send them away from here)."""
        self.state.hand_over()
        self.handed_over = True
        # One that misses it finds the coordinator gone and registers again all the same.
        self._stop_workers(f"the coordinator was sent {self.stop.name} and hands the run over "
                           "to a successor that resumes it: register again",
                           register_again=True)

    def _check_diverged(self, w: np.ndarray, val_loss: float | None = None,
                        reported: str = "") -> None:
        """TrainingDiverged if the global model ``w`` or its validation loss is not finite:
        the run ends at once and nothing is saved. ``reported``: who said so first."""
        where = None
        if not is_finite(w):
            where = "the global model"
        elif val_loss is not None and not math.isfinite(val_loss):
            where = "the global model's validation loss"
        if where is not None:
            raise TrainingDiverged(f"{where}, {reported}" if reported else where,
                                   self.settings.learning_rate)

    def _judge_divergence(self, splits: Any, loss: Any) -> None:
        """Weigh the workers' reports of non-finite weights against the global model.

        A report is one member's word about its own weights; a buggy or deceived worker can
        send it on a healthy run. The run diverged if the global model or its validation
        loss is not finite (TrainingDiverged), or if no worker is left to train once the
        reporters are dropped (every worker diverged: a learning rate far too large, whose
        non-finite weights are never sent on as deltas). Else the reporters are dropped
        (their deltas refused from now on; they may register again and rejoin from the
        global model), and one line says so and why."""
        claims = self.state.take_divergence_claims()
        if not claims:
            return
        who = ", ".join(f"worker {wid} (round {r})" for wid, r in sorted(claims.items()))
        totals = self.state.totals()
        val = evaluate(splits.val, totals.w, loss, self.spec) if splits.val.n_rows else None
        val_loss = val.loss if val else None
        self._check_diverged(totals.w, val_loss,
                             reported=f"after {who} reported non-finite weights")
        measured = ("its validation loss " + _fmt(val_loss) if val_loss is not None
                    else "no validation set to score it on")
        why = (f"the global model is finite ({measured}, {totals.deltas_received} deltas), "
               "so the report is taken as about its own weights")
        for wid, round_ in sorted(claims.items()):
            # Said once, here: not again among the drops.
            self._announced_drops[wid] = self.state.dismiss_divergence(wid, round_, why)
            self._dismissed_claims[wid] = round_
        left = len(self.state.live_workers())
        self._print(f"divergence report from {who} not taken for the run: {why}; "
                    f"dropped, {left} worker(s) go on")
        if not left:
            raise TrainingDiverged(f"{who} reported non-finite weights and no worker is left "
                                   "to train the global model", self.settings.learning_rate)

    def _next_curve(self, began: float) -> float:
        """When the next curve point is due (see CURVE_MIN_GAP), counted from now. Never with
        a trace: trace.jsonl, scored after training, is the fine curve then, and takes no CPU
        from the workers for it."""
        if self.trace is not None:
            return math.inf
        now = time.perf_counter()
        return now + max(CURVE_MIN_GAP, CURVE_COST_SHARE * self._last_eval_cost,
                         CURVE_GROWTH * (now - began))

    def _evaluate(self, splits: Any, loss: Any, began: float,
                  totals: Totals | None = None, announce: bool = True,
                  closing: bool = False) -> dict[str, Any]:
        """Score the global model on the validation set and record the row in the history;
        ``announce``: print it as a progress row too (the periodic evaluations);
        ``closing``: the run's last evaluation."""
        t0 = time.perf_counter()
        if totals is None:
            totals = self.state.totals()
        w = totals.w
        self._last_w = w
        val = evaluate(splits.val, w, loss, self.spec) if splits.val.n_rows else None
        self._check_diverged(w, val.loss if val else None)
        self._last_eval_cost = time.perf_counter() - t0
        self.eval_seconds += self._last_eval_cost
        examples = totals.examples
        # The workers report their training loss every half second or so: a row between two
        # reports would repeat the last one, which the plot drew as a flat line. Such a row
        # has none; the closing one always has the last reported. (Early stopping on the
        # training loss takes it from _eval_train_loss, see _monitor_loop.)
        reports = self.state.loss_reports
        fresh = closing or reports != self._loss_reports_seen
        self._loss_reports_seen = reports
        self._deltas_at_last_eval = totals.deltas_received
        losses = [r.train_loss for r in self.state.workers.values() if r.train_loss is not None]
        self._eval_train_loss = float(np.mean(losses)) if losses else None
        if not fresh:
            losses = []
        # The row describes the model taken at t0; training went on while it was evaluated.
        row: dict[str, Any] = {"elapsed": t0 - began, "round": totals.rounds,
               "examples": examples, "epochs": examples / max(1, self.train.n_rows),
               "val_loss": val.loss if val else None,
               "val_accuracy": val.accuracy if val else None,
               "train_loss": float(np.mean(losses)) if losses else None,
               "deltas_received": totals.deltas_received,
               "bytes_received": totals.bytes_received,
               "max_staleness": self.state.max_staleness()}
        self._record(row)
        if not announce:
            return row
        text = (f"{row['elapsed']:>7.2f}s {row['round']:>6} {examples:>10} "
                f"{row['epochs']:>7.2f} {_fmt(row['val_loss']):>9} "
                f"{_fmt(row['val_accuracy']):>8} {row['deltas_received']:>7} "
                f"{row['bytes_received'] / 1e6:>8.2f} {row['max_staleness']:>5}")
        if closing:  # the last row is always shown (a periodic one held back is older)
            self._rows.held = None
            self._print(text)
        else:  # thinned out: see hogwild.outputs.console.RowThrottle
            self._rows.offer(text, self.out, done=row["epochs"] / max(1, self.settings.epochs))
        return row

    def _initial_row(self, splits: Any) -> dict[str, Any]:
        """The evaluation of the model no worker has trained yet (the curves' first point;
        not printed, nor weighed by early stopping)."""
        val = (evaluate(splits.val, self.state.model_copy(), get_loss(self.settings.loss),
                        self.spec) if splits.val.n_rows else None)
        return {"elapsed": 0.0, "round": 0, "examples": 0, "epochs": 0.0,
                "val_loss": val.loss if val else None,
                "val_accuracy": val.accuracy if val else None, "train_loss": None,
                "deltas_received": 0, "bytes_received": 0, "max_staleness": 0}

    def _record(self, row: dict[str, Any]) -> None:
        """Keep an evaluation: metrics.jsonl, and the TensorBoard scalars if asked for."""
        self.history.add(row)
        if self.scalars is not None:
            self.scalars.add(row, int(row["examples"]))

    def _score_trace(self, splits: Any, loss: Any) -> int:
        """Score the trace's copies of the model (training is over) into trace.jsonl."""
        if self.trace is None:
            return 0
        t0 = time.perf_counter()
        rows = self.trace.score(splits.val, self.train.n_rows, loss, self.spec)
        artifacts.write_trace(self.run_dir.path, rows)
        self._print(f"trace: {len(rows)} copies of the model scored in "
                    f"{time.perf_counter() - t0:.2f}s, written to {artifacts.TRACE_FILE}")
        return len(rows)

    # ---------------------------------------------------------------- stopping

    def _stop_workers(self, reason: str, quiet: bool = False,
                      register_again: bool = False) -> None:
        """Stop every live worker. ``quiet``: only those whose final state was not collected,
        failures not logged. ``register_again``: see :meth:`_hand_workers_over`."""
        if not self.started_workers and not quiet and not register_again:
            return
        request = pb.StopRequest(protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
                                 reason=reason, register_again=register_again)

        def stop(record: WorkerRecord) -> None:
            try:
                self.stubs[record.worker_id].Stop(request, timeout=self.settings.rpc_timeout)
            except grpc.RpcError as exc:
                if not quiet:
                    log.warning("Stop%s to worker %d failed: %s",
                                " (register again)" if register_again else "",
                                record.worker_id, exc.code().name)

        live = [r for r in self.state.live_workers() if r.worker_id in self.stubs]
        if quiet:
            live = [r for r in live if r.worker_id not in self.final_states]
        if live:
            _parallel(stop, live, swallow=True)

    def _collect_final_states(self, dim: int) -> None:
        s = self.settings
        request = pb.FinalStateRequest(protocol_version=PROTOCOL_VERSION,
                                       run_id=self.state.run_id)
        # A worker first waits (up to barrier_timeout) for its peers' final deltas.
        timeout = s.barrier_timeout + 2 * s.rpc_timeout + dim * 8 / SLOW_LINK_BYTES_PER_S

        def collect(record: WorkerRecord) -> FinalState | None:
            try:
                chunks = self.stubs[record.worker_id].GetFinalState(request, timeout=timeout)
                return receive_state(chunks, dim, self.state.run_id)
            except grpc.RpcError as exc:
                log.warning("no final state from worker %d: %s %s", record.worker_id,
                            exc.code().name, exc.details())
                self.state.mark_dead(record.worker_id, "final state not collected")
            except HogwildError as exc:  # InvalidMessage: a corrupt stream
                log.warning("bad final state from worker %d: %s", record.worker_id, exc)
            return None

        live = self.state.live_workers()
        for record, result in zip(live, _parallel(collect, live, swallow=True)):
            if result is not None:
                self.final_states[record.worker_id] = result

    def _finish(self, splits: Any, rules: StopRules, reason: str, train_seconds: float,
                load_seconds: float, began: float) -> dict[str, Any]:
        from hogwild.inprocess.local import (
            initial_model_record,
            plot_title,
            test_quality,
            write_outputs,
        )

        s = self.settings
        loss = get_loss(s.loss)
        self._judge_divergence(splits, loss)  # e.g. a SIGTERM that raced a worker's report
        # From here the model takes no more deltas, so every figure below describes it.
        totals = self.state.seal()
        final_w = totals.w
        # The last evaluation sees every delta, final ones included.
        row = self._evaluate(splits, loss, self.train_began, totals, closing=True)
        metric = row["val_loss"] if row["val_loss"] is not None else row["train_loss"]
        if metric is not None:
            rules.evaluation(float(metric), final_w)
            if rules.took_best():
                self._best_row = row
        best = rules.best_weights
        w = best if best is not None else final_w
        saved = self._best_row if best is not None else row
        test = evaluate(splits.test, w, loss, self.spec)
        val = evaluate(splits.val, w, loss, self.spec) if splits.val.n_rows else None
        self._check_diverged(w, val.loss if val else None)
        warnings = [text for text in [regression_warning(
            [self.history.rows.best_val_loss], val.loss if val else None)] if text]
        for text in warnings:
            log.warning("%s", text)
        plotted = self.history.rows.rows()
        if self.plot is not None:  # the history is final: drawn while the outputs are written
            self.plot.start(self.run_dir.path, plotted, plot_title(s, "run"))
        trace_rows = self._score_trace(splits, loss)
        examples = totals.examples
        workers_out = self._write_worker_states(final_w, splits.feature_order)
        shipped = sum(x.nbytes for x in self.shipments)
        ship_seconds = max((x.seconds for x in self.shipments), default=0.0)
        metrics: dict[str, Any] = {
            "command": "run", "test_loss": test.loss, "test_accuracy": test.accuracy,
            "val_loss": val.loss if val else None, "val_accuracy": val.accuracy if val else None,
            "epochs": examples / max(1, self.train.n_rows), "examples": examples,
            "rounds": totals.rounds, "seconds": train_seconds,
            "load_seconds": load_seconds, "total_seconds": time.perf_counter() - began,
            "stop_reason": reason, "workers": s.workers, "threads": self.worker_threads,
            "mode": s.mode,
            "staleness": s.staleness, "shipping": s.shipping, "loss": s.loss,
            "deltas_received": totals.deltas_received,
            "bytes_received": totals.bytes_received,
            "duplicates_ignored": totals.duplicates,
            # As measured by the workers (bounded by `staleness`); the coordinator's own view of
            # the round gap also counts messages still in flight, so it can be larger.
            "max_staleness": max([st.max_staleness for st in self.final_states.values()]
                                 + [r.max_staleness for r in self.state.workers.values()],
                                 default=0),
            "coordinator_round_gap": self.state.max_staleness(),
            "coordinator_apply_seconds": self.state.apply_seconds, "round_size": self.round_size,
            "eval_seconds": self.eval_seconds, "evaluations": self.history.count,
            "coordinator_cpu_seconds": self.train_cpu_seconds,
            "trace_snapshots": trace_rows, "warnings": warnings,
            "shipped_bytes": shipped, "ship_seconds": ship_seconds,
            "plan_bytes": sum(x.plan_bytes for x in self.shipments),
            "local_ranges": (self.local.ranges_report(len(self.shards))
                             if self.local is not None else None),
            "coordinator_peak_rss_bytes": _peak_rss(),
            "train_rows": self.train.n_rows, "test_rows": splits.test.n_rows,
            "n_features": self.train.n_features, "run_id": self.state.run_id,
            "task": splits.labels.task, "classes": splits.labels.json_classes(),
            "model": self.spec.kind,
            "coordinator_applied_from": {str(k): v for k, v in totals.applied_from.items()},
            "dropped_workers": sorted(r.worker_id for r in self.state.workers.values() if r.dead),
            "peer_reports": [{"reporter": a, "peer": b, "round": c, "reason": d}
                             for a, b, c, d in self.state.peer_reports],
            # Reports not acted on: the accused peer answered, or they came too often; and
            # divergence reports the global model did not bear out (their workers dropped).
            "peer_reports_refused": self.state.peer_reports_refused,
            "divergence_reports_dismissed": self.state.divergence_reports_dismissed,
            "worker_states": workers_out, "conflicts": self.conflicts,
            "checkpoints": self.checkpoints, "checkpoint_seconds": self.checkpoint_seconds,
            "resumed_at_round": None if self.resume is None else self.first_round,
            "initial_model": (None if splits.initial is None
                              else initial_model_record(s, splits.initial)),
            "topology": s.topology,
            # The rule the deltas were added up with, and the setting it came from (auto).
            "combine": s.combine,
            # What the coordinator changed when the validation curve swung (engine/guard.py).
            "adjustments": self.adjuster.record() if self.adjuster else [],
            "adjustments_unreached": ({str(k): v for k, v in self.adjuster.unreached.items()}
                                      if self.adjuster else {}),
            "relay_messages": self.relay.messages_sent() if self.relay else 0,
            "relay_bytes": self.relay.bytes_sent() if self.relay else 0,
            # Which evaluation's model was saved (the best validated one; None: a resumed
            # run's best, evaluated before the resume).
            "saved_model": None if saved is None else {
                key: saved.get(key) for key in ("elapsed", "round", "epochs", "val_loss",
                                                "val_accuracy")} | {"final": saved is row},
        }
        metrics.update(test_quality(splits.test, w, s.loss, self.spec, splits.labels.task,
                                    splits.labels.classes))
        try:  # every evaluation in metrics.jsonl, or none of this
            self.history.write_all()
        except OSError as exc:
            raise OutputError.writing(self.run_dir.path, exc) from None
        write_outputs(s, w, metrics, plotted, splits.feature_order, spec=self.spec,
                      hashing=splits.hashing, task=splits.labels.task,
                      classes=splits.labels.classes, plot=self.plot, history_on_disk=True,
                      run_dir=self.run_dir.path)
        # Every file is written: nothing to resume any more, and the run is published whole
        # (its directory renamed to its final name, out_dir/latest pointed at it).
        checkpoint.remove(self.run_dir.path)
        published = self.run_dir.publish()
        acc = "-" if test.accuracy is None else f"{test.accuracy:.4f}"
        if saved is not None and saved is not row:
            self._print(f"saved the best validated model, from round {saved['round']} "
                        f"(epoch {saved['epochs']:.2f}, validation loss "
                        f"{_fmt(saved['val_loss'])}) rather than the last one "
                        f"(validation loss {_fmt(row['val_loss'])})")
        self.console.result(
            f"done ({reason}): {metrics['epochs']:.2f} epochs, {metrics['rounds']} "
            f"rounds in {train_seconds:.2f}s with {s.workers} worker(s) ({s.mode}); "
            f"test loss {test.loss:.4f}, test accuracy {acc}; "
            f"{totals.deltas_received} deltas, "
            f"{totals.bytes_received / 1e6:.1f} MB received; outputs in {published}")
        self.console.json_result(metrics)
        return metrics

    def _write_worker_states(self, global_w: np.ndarray,
                             feature_order: np.ndarray) -> list[dict[str, Any]]:
        """Each collected worker model beside the global one (final_states/, in the input
        files' feature ids), with counters."""
        out = self.run_dir.path / "final_states"
        rows = []
        if self.final_states:
            artifacts.save_weights(out / "global.npz", self.spec.restore(global_w, feature_order))
        for wid, st in sorted(self.final_states.items()):
            artifacts.save_weights(out / f"worker-{wid}.npz",
                                   self.spec.restore(st.weights, feature_order))
            rows.append({"worker_id": wid, "rounds": st.rounds, "examples": st.examples,
                         "deltas_sent": st.deltas_sent,
                         "applied_from": {str(k): v for k, v in st.applied_from.items()},
                         "acked_by": {str(k): v for k, v in st.acked_by.items()},
                         "acked_by_coordinator": st.acked_by_coordinator,
                         "dropped_peers": st.dropped_peers,
                         "max_staleness": st.max_staleness,
                         "bytes_sent": st.bytes_sent,
                         "bytes_to_coordinator": st.bytes_to_coordinator,
                         "timings": {name: {"seconds": sec, "count": n}
                                     for name, (sec, n) in st.timings.items()},
                         "max_abs_diff_to_global": float(np.max(np.abs(st.weights - global_w)))})
        return rows

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        if self.scalars is not None:
            self.scalars.close()
        if self.plot is not None:
            self.plot.close()


def _peak_rss() -> int:
    """This process's peak resident set size in bytes (0 where it cannot be read)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return 0
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _parallel(fn: Callable[[WorkerRecord], T], items: list[WorkerRecord],
              swallow: bool = False) -> list[T]:
    """``fn`` over every worker at once (one thread each); the first error is re-raised."""
    if not items:
        return []
    with futures.ThreadPoolExecutor(max_workers=len(items)) as pool:
        jobs = [pool.submit(fn, item) for item in items]
        results = []
        for job in jobs:
            try:
                results.append(job.result())
            except Exception:
                if not swallow:
                    raise
                results.append(None)  # type: ignore[arg-type]
        return results
