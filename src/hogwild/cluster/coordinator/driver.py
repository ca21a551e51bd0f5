"""The coordinator's run, start to end: data, registrations, shards, start, evaluate, stop, write."""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from hogwild.cluster.coordinator.checkpoints import checkpoint_file as checkpoint
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.checkpoints.checkpointer import Checkpointer
from hogwild.cluster.coordinator.data.advice import ConflictAdvice
from hogwild.cluster.coordinator.data.loading import (
    data_fingerprint,
    load_data,
    say_data,
    starting_weights,
)
from hogwild.cluster.coordinator.data.worker_shares import Shipper
from hogwild.cluster.coordinator.members.launch import configure_and_start, start_relay
from hogwild.cluster.coordinator.members.links import WorkerLinks
from hogwild.cluster.coordinator.members.rejoin import Rejoins
from hogwild.cluster.coordinator.runconfig import (
    Layout,
    RunConfigs,
    TrainShape,
    round_size,
    run_max_rounds,
)
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import StarRelay
from hogwild.cluster.coordinator.watch.adjust import Adjuster
from hogwild.cluster.coordinator.watch.evaluations import Evaluator, check_diverged
from hogwild.cluster.coordinator.watch.monitor import MemberWatch, Monitor, stop_rules
from hogwild.cluster.coordinator.watch.report import (
    Seconds,
    outputs_failed,
    run_metrics,
    score_trace,
    write_worker_states,
)
from hogwild.cluster.coordinator.watch.stopping import StopRules, StopSignal, regression_warning
from hogwild.cluster.coordinator.watch.trace import ModelTrace, earlier_rows
from hogwild.cluster.transport.health import HealthReporter
from hogwild.cluster.wire.deltanorms import NormWatch
from hogwild.cluster.wire.streams import FinalState
from hogwild.config import Settings
from hogwild.data.transform.classweights import run_class_weights
from hogwild.data.transform.split import shard
from hogwild.engine.guard import SwingGuard
from hogwild.engine.job import test_quality
from hogwild.engine.round_size import momentum_step_scale
from hogwild.engine.runstart import model_spec
from hogwild.errors import OutputError, TrainingDiverged
from hogwild.model.evaluation import evaluate
from hogwild.model.losses import get_loss
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts
from hogwild.outputs.console import NORMAL, Console, run_done, run_saved_line
from hogwild.outputs.history import EvalHistory
from hogwild.outputs.plotter import BackgroundPlot
from hogwild.outputs.results import plot_title, write_outputs
from hogwild.outputs.tensorboard import open_scalars
from hogwild.runtime.warmup import preload_in_background
from hogwild.settings.rules import engaged_note, few_rows_a_worker

if TYPE_CHECKING:
    from hogwild.cluster.coordinator.data.localplan import LocalShipping
    from hogwild.cluster.coordinator.members.records import WorkerRecord

log = logging.getLogger("hogwild.coordinator")


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
        # As given: `engage: auto` and `topology: auto` are resolved once the data is known.
        self.asked = settings
        self.settings = settings = settings.for_run()
        # Where this run writes (its own directory under out_dir, published at the end).
        self.run_dir = run_dir or artifacts.RunDir.existing(settings.out_dir)
        # sys.stdout at call time, not at import (a test may have replaced it since)
        self.out = sys.stdout if out is None else out
        # What to print (-q, -v, --json, as the command line said) and which progress rows.
        self.console = Console(self.out)
        self.state = state
        self.health = health
        self.stop = stop
        self.handed_over = False  # the workers were told to register with a successor
        self.links = WorkerLinks(settings, state)
        self.history = EvalHistory(self.run_dir.path)
        # tensorboard_dir: every evaluation's scalars too (refused now if it cannot be done).
        self.scalars = open_scalars(settings, self.run_dir.name)
        self.final_states: dict[int, FinalState] = {}
        self.started_workers = False
        self.train = TrainShape(0, 0, 0)
        self.local: LocalShipping | None = None  # shipping local: the plan of ranges
        self.advice = ConflictAdvice(settings)
        self.spec = ModelSpec.linear(1)  # the run's model, set once the data is loaded
        self.plot: BackgroundPlot | None = plot  # the loss plot's helper process
        self.resume = resume             # the checkpoint this run continues, if any
        self.relay: StarRelay | None = None  # topology star: relays the sums of deltas
        self.data_fingerprint = ""  # of the rows trained on, kept in every checkpoint
        self.monitor: Monitor | None = None  # while the workers train
        # Set as the run starts (used once the workers train).
        self.trace: ModelTrace | None = None  # trace_interval's copies of the model
        self.adjuster: Adjuster | None = None  # acts on a validation curve that swings
        self.round_size = 0              # examples per thread per round, as configured
        self.worker_threads: int | list[int] = settings.threads  # as the workers report
        self.workers_started = state.roster.n_workers  # registered; `engage` may train on fewer
        self.train_began = time.perf_counter()
        self.train_cpu_seconds = 0.0     # this process's CPU while the workers trained

    @property
    def alive_at(self) -> float | None:
        """time.monotonic() of the monitor loop's last turn; None outside it (liveness)."""
        return self.monitor.alive_at if self.monitor is not None else None

    def _print(self, text: str, level: int = NORMAL) -> None:
        self.console.say(text, level)

    @property
    def first_round(self) -> int:
        """The workers' first round: 1, or after a resume the checkpoint's next one."""
        return 1 if self.resume is None else self.resume.round + 1

    def run(self) -> dict[str, Any]:
        """The whole run; returns the metrics written to metrics.json."""

        s = self.settings
        began = time.perf_counter()
        if self.plot is None:
            self.plot = BackgroundPlot()  # imports matplotlib in its own process meanwhile
        preload_in_background()
        splits, self.local, self.train = load_data(s)
        # combine: auto is decided by the rows each worker will hold (and again once
        # engage: auto has decided how many train, which needs their thread counts).
        s = self.settings = self.advice.settings = self.asked.for_run(self.train.n_rows)
        self.data_fingerprint = data_fingerprint(s, splits, self.local, self.resume)
        say_data(splits, self.local, self._print)
        load_seconds = time.perf_counter() - began
        if self.local is None:
            self.advice.measure(splits.train, load_seconds)
        else:
            self._print("conflicts: not measured (shipping local: the training rows stay with "
                        "the workers)")
        self.health.set(True)
        self._print(f"run {self.state.run_id}: waiting for {self.state.roster.n_workers} "
                    f"worker(s) (register_timeout {s.register_timeout:g}s)")
        loss = get_loss(s.loss)
        try:
            # A resumed run goes on without a worker that did not come back (it may rejoin
            # later; a tree routes around its place from the start).
            workers = self.state.roster.wait_for_workers(
                s.register_timeout, self.stop.is_set,
                go_on_without=self.resume is not None)
            for record in workers:
                self.links.connect(record)
            self._leave_if_stopped()
            s, workers = self._engage(workers)
            n_features = self.train.n_features
            spec = self.spec = model_spec(s, n_features)
            dim = spec.dim
            initial, warm_started = starting_weights(s, splits, spec, self.resume)
            self.state.model.start_model(dim, initial)
            ev = self.evaluator = Evaluator(
                self.state, spec, splits.val, loss, self.history, self.scalars, self.console,
                self.train.n_rows, s.epochs, s.learning_rate, curve_points=s.trace_interval <= 0)
            # Epoch 0: the model before any training (a resumed run has its rows already).
            first = ev.initial_row() if self.resume is None else None
            shards = ([self.local.source(w) for w in range(len(workers))]
                      if self.local is not None
                      else shard(splits.train, len(workers), seed=s.seed, mode=s.shipping))
            self.shipper = Shipper(s, self.state, self.links, shards, self.local, self._print)
            # A resumed run may go on without some; a place whose holder does not answer
            # goes to another worker (or, resumed, is dropped).
            workers = self.shipper.ship_all([r for r in workers if not r.dead],
                                            self.resume is not None, self.stop.is_set,
                                            self._leave_if_stopped)
            live = [r for r in workers if not r.dead]
            if self.local is not None and self.local.plan.sampled:
                # Counted by the workers now: the rounds an epoch come from the real rows.
                rows, nnz = self.local.train_shape()
                self._print(f"the workers counted {rows:,} training rows with {nnz:,} "
                            f"non-zeros (the sample estimated {self.train.n_rows:,})")
                self.train = TrainShape(rows, nnz, self.train.n_features)
                ev.train_rows = rows
            size = self.round_size = round_size(s, self.train, workers, dim)
            s = self._step_scaled(s, workers, size)
            max_rounds = run_max_rounds(s, workers, self.train.n_rows, size)
            layout = Layout(dim, n_features, self.train.n_rows, max_rounds, size, len(workers))
            configs = RunConfigs(s, self.state, spec, layout, self.shipper.max_abs_value(),
                                 run_class_weights(s.class_weight, splits.labels.classes,
                                                   None if self.local is not None
                                                   else splits.train.labels))
            if s.topology != "tree" and (s.delta_norm_bound > 0 or s.norm_clip > 0):
                # A tree's coordinator gets its children's subtree sums: not comparable.
                self.state.model.norms = NormWatch(s.delta_norm_bound, s.norm_clip)
            self.relay = start_relay(s, self.state, workers, dim, self.first_round)
            configure_and_start(self.links, configs, workers, self.first_round,
                                self.resume is not None or warm_started, self._workers_started)
            # The workers' own thread counts: `threads` is theirs to set, not this process's.
            counts = sorted({r.threads for r in workers})
            self.worker_threads = counts[0] if len(counts) == 1 else [r.threads for r in workers]
            each = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
            running = (str(len(live)) if len(live) == len(workers)
                       else f"{len(live)} of {len(workers)}")
            self._print(f"started {running} worker(s), {s.mode} mode, {each} thread(s) each, "
                        f"up to {max_rounds} rounds of {size} examples per thread")
            self.advice.as_started(live, size)
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
                ev.record(first)
            rules = stop_rules(s, self.train.n_rows, self.resume, self._print)
            if (warm_started and initial is not None and first is not None
                    and first["val_loss"] is not None):
                # The model given is a candidate for the one saved: a run that only made it
                # worse hands it back unchanged.
                rules.early.start_from(first["val_loss"], initial,
                                       first["val_accuracy"])
                ev.best_row = ev.starting_row = first
            self.adjuster = (Adjuster(SwingGuard(s.mode, s.staleness, s.swing_tolerance,
                                                 splits.val.n_rows),
                                      self.state.run_id, self.links.call, self._print)
                             if s.swing_tolerance is not None else None)
            self.members = MemberWatch(self.state, spec, splits.val, loss, s.learning_rate,
                                       self._print)
            self.checkpointer = Checkpointer(s, self.state, self.history, self.run_dir,
                                             self.data_fingerprint)
            rejoins = Rejoins(s, self.state, self.links, self.shipper, configs, self.relay,
                              self.adjuster, self.stop.is_set, self._print)
            self.monitor = Monitor(s, self.state, self.stop, ev, self.members, rejoins,
                                   self.checkpointer, self.trace, self.adjuster, self._print)
            reason = self.monitor.run(rules, train_began)
            # Reports that came with the last progress messages; and a run whose last workers
            # were dropped for their divergence has nothing but them to go on.
            self.members.judge_divergence()
            if reason == "no live workers" and self.members.dismissed:
                dropped = ", ".join(f"worker {wid} (round {r})"
                                    for wid, r in sorted(self.members.dismissed.items()))
                raise TrainingDiverged(f"no worker is left, {dropped} dropped after reporting "
                                       "non-finite weights", s.learning_rate)
            if self.stop.hand_over:
                # The trace so far is scored and written for the successor to go on from
                # (it lived in memory only); scored again at the end if this run goes on.
                score_trace(self.trace, splits.val, self.train.n_rows, loss, spec,
                            self.run_dir.path, self._print)
                self._hand_over(train_began, rules)  # raises HandedOver once it is done
            self._stop_workers(reason)
            train_seconds = time.perf_counter() - train_began
            # Receiving, applying and evaluating while the workers trained (on a shared
            # machine this CPU is taken from them).
            self.train_cpu_seconds = time.process_time() - cpu_began
            self.health.set(False)  # draining: no new work is accepted from here on
            self.final_states = self.links.collect_final_states(dim)
        finally:
            if not self.handed_over:  # (else they are registering with the successor)
                self._stop_workers("coordinator shutting down", quiet=True)
            if self.relay is not None:
                self.relay.close()
        try:
            return self._finish(splits, rules, reason, train_seconds, load_seconds, began)
        except (OSError, OutputError) as exc:  # a full disk, a directory gone read-only
            raise outputs_failed(self.run_dir.path, exc) from None

    def _engage(self, workers: list[WorkerRecord]) -> tuple[Settings, list[WorkerRecord]]:
        """The settings of the run of the registered ``workers`` and those that train: with
        ``engage: auto`` as many as the training non-zeros keep busy at the threads they
        registered with; the others are told before anything is shipped that the run does
        not need them (they exit 0) and are taken off the roster. A resumed run goes on with
        its checkpoint's workers. Then topology: auto and combine: auto for those engaged."""
        started = len(workers)
        base = self.asked.replace(workers=started)
        if self.resume is not None:
            base = base.replace(engage="all")
        threads = max((r.threads for r in workers), default=base.threads)
        s = self.settings = self.advice.settings = base.for_run(
            self.train.n_rows, self.train.nnz, threads)
        note = few_rows_a_worker(self.asked.combine, s.combine, self.train.n_rows, s.workers)
        if note is not None:
            log.warning(note)
        if self.local is not None:  # the ranges planned for all, read by those engaged
            self.local.engage(s.workers)
        why = engaged_note(started, s.workers, threads, self.train.nnz, s.mode,
                           self.train.n_rows)
        if why is None:
            return s, workers
        self._print(why)
        self.links.release([r for r in workers if r.worker_id >= s.workers],
                           f"not needed: {why}")
        self.state.roster.engage(s.workers)
        return s, [r for r in workers if r.worker_id < s.workers]

    def _workers_started(self) -> None:
        self.started_workers = True

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
        ckpt = self.checkpointer.write(began, rules)
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

    def _stop_workers(self, reason: str, quiet: bool = False,
                      register_again: bool = False) -> None:
        """Stop every live worker. ``quiet``: only those whose final state was not collected,
        failures not logged. ``register_again``: see :meth:`_hand_workers_over`."""
        if not self.started_workers and not quiet and not register_again:
            return
        self.links.stop(reason, quiet, register_again,
                        skip=self.final_states if quiet else ())

    def _step_scaled(self, s: Settings, workers: list[WorkerRecord], size: int) -> Settings:
        """The run's settings with the workers' step size scaled where sync block momentum's
        rounds are few against the workers (engine.round_size.momentum_step_scale), and said
        so."""
        total = sum(r.threads for r in workers) or s.threads
        scale = momentum_step_scale(s.combine, s.mode, len(workers), self.train.n_rows, total,
                                    size)
        if scale == 1.0:
            return s
        # scale is W / (4 K): the momentum's W rounds take W / K = 4 x scale epochs.
        log.info("learning_rate %g x %g = %g on the workers: block momentum builds its step "
                 "over about %d rounds, %g epochs here; larger local steps make up for it",
                 s.learning_rate, scale, s.learning_rate * scale, len(workers), 4 * scale)
        s = self.settings = self.advice.settings = s.replace(
            learning_rate=s.learning_rate * scale)
        return s

    def _finish(self, splits: Any, rules: StopRules, reason: str, train_seconds: float,
                load_seconds: float, began: float) -> dict[str, Any]:

        s = self.settings
        loss = get_loss(s.loss)
        ev = self.evaluator
        self.members.judge_divergence()  # e.g. a SIGTERM that raced a worker's report
        # From here the model takes no more deltas, so every figure below describes it.
        totals = self.state.seal()
        final_w = totals.w
        # The last evaluation sees every delta, final ones included: the model trained until
        # the workers were stopped, the time the done line says too.
        row = ev.evaluate(self.train_began, totals, closing=True, at=train_seconds)
        metric = row["val_loss"] if row["val_loss"] is not None else row["train_loss"]
        best_now = False
        if metric is not None:
            rules.evaluation(float(metric), final_w, accuracy=row["val_accuracy"])
            best_now = rules.took_best()
            if best_now:
                ev.best_row = row
        ev.announce(row, best=best_now, last=True)
        best = rules.best_weights
        w = best if best is not None else final_w
        saved = ev.best_row if best is not None else row
        test = evaluate(splits.test, w, loss, self.spec)
        val = evaluate(splits.val, w, loss, self.spec) if splits.val.n_rows else None
        check_diverged(w, s.learning_rate, val.loss if val else None)
        warnings = [text for text in [regression_warning(
            [self.history.rows.best_val_loss], val.loss if val else None)] if text]
        for text in warnings:
            log.warning("%s", text)
        plotted = self.history.rows.rows()
        if self.plot is not None:  # the history is final: drawn while the outputs are written
            self.plot.start(self.run_dir.path, plotted, plot_title(s, "run"),
                            saved=None if saved is None else saved.get("epochs"))
        trace_rows = score_trace(self.trace, splits.val, self.train.n_rows, loss, self.spec,
                                 self.run_dir.path, self._print)
        workers_out = write_worker_states(self.run_dir.path, self.spec, self.final_states,
                                          final_w, splits.feature_order, s.final_states)
        metrics = run_metrics(
            s, splits, self.spec, self.state, totals, test, val, reason=reason,
            seconds=Seconds(train_seconds, load_seconds, time.perf_counter() - began,
                            ev.eval_seconds, self.train_cpu_seconds),
            train_rows=self.train.n_rows, n_features=self.train.n_features,
            threads=self.worker_threads, round_size=self.round_size,
            final_states=self.final_states, worker_states=workers_out, shipper=self.shipper,
            evaluations=self.history.count, trace_rows=trace_rows, warnings=warnings,
            conflicts=self.advice.entry, checkpointer=self.checkpointer,
            resumed_at=None if self.resume is None else self.first_round,
            adjuster=self.adjuster, relay=self.relay, saved=saved, final_row=row)
        metrics["workers_started"] = self.workers_started
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
        published = self.run_dir.publish(s.keep_runs)
        if saved is not None and saved is not row:
            self._print(run_saved_line(saved, row))
        done = run_done(
            reason, metrics["epochs"], None if saved is row else metrics["saved_epoch"],
            metrics["rounds"], train_seconds, s.workers, s.mode, test.loss, test.accuracy,
            totals.delta_rounds, totals.bytes_received)
        quarantined = self.state.roster.quarantine.summary()
        if quarantined:
            done.add("faults", f"quarantined for refused deltas: {quarantined}")
        self.console.result(done.text(published))
        self.console.json_result(metrics)
        return metrics

    def close(self) -> None:
        self.links.close()
        if self.scalars is not None:
            self.scalars.close()
        if self.plot is not None:
            self.plot.close()
