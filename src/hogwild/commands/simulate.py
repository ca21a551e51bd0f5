"""`hogwild simulate`: a run of W virtual workers in one process, on the run's own settings."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, TextIO

import numpy as np

from hogwild.config import Settings
from hogwild.data.labels import MULTICLASS
from hogwild.data.sources import data_lines
from hogwild.data.split import shard
from hogwild.engine.guard import SwingGuard
from hogwild.engine.network import DEFAULT_SPEED, Network
from hogwild.engine.rounds import choose_round_size, fit_round_size, max_rounds
from hogwild.engine.rules import ExchangeRules
from hogwild.engine.simulate import Scenario, SimResult, Simulation
from hogwild.engine.threads import KernelPlan
from hogwild.errors import DataError, TrainingDiverged, UsageError
from hogwild.inprocess.common import test_quality
from hogwild.inprocess.local import load_splits, model_spec
from hogwild.inprocess.results import write_outputs
from hogwild.model.arrays import csr_arrays
from hogwild.model.compression import Compression
from hogwild.model.evaluation import evaluate_model
from hogwild.model.losses import get_loss
from hogwild.outputs import artifacts
from hogwild.outputs.console import QUIET, VERBOSE, Console

# Progress rows printed at most (evenly spread over the run's evaluations, the last always).
PRINTED_ROWS = 12


@dataclass(frozen=True)
class SimOptions:
    """What the simulator adds to the run's settings: the machines and the network."""

    speeds: tuple[float, ...] = ()   # non-zeros per second per thread, one per worker
    speed: float = DEFAULT_SPEED     # everyone's, when speeds is empty
    spread: float = 0.0              # log-normal sigma of the workers' speeds around speed
    network: Network = field(default_factory=Network)
    slices: int = 4
    evals_per_epoch: float = 4.0

    def worker_speeds(self, workers: int, seed: int) -> tuple[float, ...]:
        """One speed per worker: as given, or ``speed`` scattered by ``spread`` (seeded)."""
        if self.speeds:
            if len(self.speeds) == 1:
                return self.speeds * workers
            if len(self.speeds) != workers:
                raise UsageError(f"--speeds: {len(self.speeds)} values for {workers} workers "
                                 "(give one, or one per worker)")
            return self.speeds
        if self.spread <= 0:
            return (self.speed,) * workers
        rng = np.random.default_rng(seed + 1)
        return tuple(float(self.speed * math.exp(z))
                     for z in rng.normal(0.0, self.spread, workers))


def scenario_of(settings: Settings, options: SimOptions, train_rows: int, train_nnz: int,
                kernel: KernelPlan) -> Scenario:
    """The run ``settings`` describe, as the coordinator would lay it out (combine rule,
    round size, rounds), on the machines and network of ``options``."""
    total = settings.workers * settings.threads
    combine = settings.combine
    size = choose_round_size(settings.round_size, train_rows, train_nnz, total,
                             combine, settings.workers)
    if settings.round_size is None:
        size = fit_round_size(size, train_rows, total, settings.epochs)
    rules = ExchangeRules(mode=settings.mode, staleness=settings.staleness,
                          combine=combine, topology=settings.topology,
                          compression=Compression(settings.delta_threshold,
                                                  settings.delta_topk,
                                                  settings.delta_dtype == "float16"))
    return Scenario(
        workers=settings.workers, kernel=replace(kernel, round_size=size), rules=rules,
        max_rounds=max_rounds(settings.epochs, train_rows, total, size),
        speeds=options.worker_speeds(settings.workers, settings.seed),
        network=options.network, tree_fanout=settings.tree_fanout, slices=options.slices,
        evals_per_epoch=options.evals_per_epoch, seed=settings.seed)


def simulate_job(settings: Settings, options: SimOptions,
                 out: TextIO | None = None) -> dict[str, Any]:
    """Run `hogwild simulate`: load and split as `run` does, simulate, write the outputs
    (lines to ``out``, default sys.stdout, as the process's verbosity says)."""
    console = Console(out)
    started = time.perf_counter()
    root = artifacts.check_runs_root(settings.out_dir)
    # The run's own directory under the runs root, published whole once written (latest).
    with artifacts.run_held(artifacts.RunDir.create(root), "simulate") as run:
        return _simulate(settings, options, console, started, run)


def _simulate(settings: Settings, options: SimOptions, console: Console, started: float,
              run: artifacts.RunDir) -> dict[str, Any]:
    splits = load_splits(settings)
    if splits.labels.task == MULTICLASS:
        raise DataError(f"{settings.data}: {splits.labels.n_classes} label values; simulate "
                        "trains binary classification and regression, as run does")
    for line in data_lines(splits):
        console.say(line)
    spec = model_spec(settings, splits.train.n_features)
    kernel = KernelPlan(
        spec=spec, loss=settings.loss, round_size=1, threads=settings.threads,
        learning_rate=settings.learning_rate, lr_schedule=settings.lr_schedule,
        lr_decay=settings.lr_decay, power_t=settings.power_t, l2=settings.l2,
        fit_bias=settings.fit_bias, thread_buffer=False,
        deep_lr_scale=settings.deep_lr_scale if spec.is_mlp else 1.0)
    scenario = scenario_of(settings, options, splits.train.n_rows, splits.train.nnz, kernel)
    shards = [csr_arrays(part, spec.n_features)
              for part in shard(splits.train, settings.workers, seed=settings.seed,
                                mode=settings.shipping if settings.shipping in
                                ("partition", "replicate") else "partition")]
    loss = get_loss(settings.loss)

    def evaluate(w: np.ndarray) -> tuple[float, float | None]:
        m = evaluate_model(splits.val, w, loss, spec)
        return m.loss, m.accuracy

    net = options.network
    console.say(f"simulating {settings.workers} worker(s) x {settings.threads} thread(s), "
                f"{settings.mode}, {settings.topology}, combine {scenario.rules.combine}"
                f"{_staleness(settings)}; "
                f"{scenario.kernel.round_size} examples per thread per round, "
                f"{scenario.max_rounds} rounds; message {net.overhead * 1e3:g} ms + "
                f"{net.latency * 1e3:g} ms ({net.jitter}) latency, "
                f"{net.bandwidth / 1e9:g} GB/s")
    began = time.perf_counter()
    guard = (SwingGuard(settings.mode, settings.staleness, settings.swing_tolerance,
                        splits.val.n_rows)
             if settings.swing_tolerance is not None and splits.val.n_rows else None)
    result = Simulation(scenario, shards, evaluate if splits.val.n_rows else None,
                        guard=guard).run()
    wall = time.perf_counter() - began
    if result.diverged:
        raise TrainingDiverged("the simulated run", settings.learning_rate)
    if console.level > QUIET:
        _print_rows(result, console.out, every=console.level >= VERBOSE)
    if guard is not None:
        for adjustment in guard.adjustments:
            console.say(adjustment.describe())
    metrics = _metrics(settings, splits, spec, result, scenario, wall,
                       time.perf_counter() - started)
    write_outputs(settings, result.best_weights, metrics, result.history,
                  splits.feature_order, spec=spec, hashing=splits.hashing,
                  task=splits.labels.task, classes=splits.labels.classes, run_dir=run.path)
    published = run.publish(settings.keep_runs)
    final, best = metrics["final_test_accuracy"], metrics["test_accuracy"]
    acc = ("-" if best is None else
           f"{best:.4f} (best validated model; the last one {final:.4f})")
    console.result(f"done: {result.rounds} rounds in {result.seconds:.3g} simulated s "
                   f"({wall:.2f}s here), {result.messages} messages, {result.bytes / 1e6:.1f} MB, "
                   f"max staleness {result.max_staleness}; test accuracy {acc}; outputs in "
                   f"{published}")
    return metrics


def _staleness(settings: Settings) -> str:
    """The header's staleness bound: async runs only (a sync run waits for every round)."""
    if settings.mode != "async":
        return ""
    return f", staleness {'unbounded' if settings.staleness is None else settings.staleness}"


def _print_rows(result: SimResult, out: TextIO, every: bool = False) -> None:
    """The progress table. A row's training loss is the mean over the examples trained since
    the row before; the last row's may cover only the short stretch the workers trained
    after the last evaluation due (a few dozen examples, against a quarter epoch for the
    others), a mean too noisy to compare: it is shown in parentheses, with a note."""
    rows = result.history
    step = 1 if every else max(1, math.ceil(len(rows) / PRINTED_ROWS))
    spans = [b["examples"] - a["examples"] for a, b in pairwise(rows)]
    typical = sorted(spans)[len(spans) // 2] if spans else 0
    short: tuple[int, int] | None = None
    print(f"{'epoch':>6} {'sim_ms':>9} {'train_loss':>10} {'val_loss':>9} {'val_acc':>8}",
          file=out)
    for i, row in enumerate(rows):
        if i % step and i != len(rows) - 1:
            continue
        train = _fmt(row["train_loss"])
        span = spans[i - 1] if i else 0
        if row["train_loss"] is not None and i and span * 2 < typical:
            train, short = f"({train})", (span, typical)
        print(f"{row['epoch']:>6.2f} {row['elapsed'] * 1e3:>9.2f} "
              f"{train:>10} {_fmt(row['val_loss']):>9} "
              f"{_fmt(row['val_accuracy']):>8}", file=out)
    if short is not None:
        print(f"(training loss over the last {short[0]:,} examples only, against about "
              f"{short[1]:,} per row: too few to compare)", file=out)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _metrics(settings: Settings, splits: Any, spec: Any, result: SimResult,
             scenario: Scenario, wall: float, total: float) -> dict[str, Any]:
    loss = get_loss(settings.loss)
    test = evaluate_model(splits.test, result.best_weights, loss, spec)
    last = evaluate_model(splits.test, result.weights, loss, spec)
    best = result.best
    metrics: dict[str, Any] = {
        "command": "simulate", "test_loss": test.loss, "test_accuracy": test.accuracy,
        "final_test_loss": last.loss, "final_test_accuracy": last.accuracy,
        "val_loss": best["val_loss"] if best else None,
        "val_accuracy": best["val_accuracy"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "workers": settings.workers, "threads": settings.threads, "mode": settings.mode,
        "topology": settings.topology, "combine": scenario.rules.combine,
        "staleness": settings.staleness, "round_size": scenario.kernel.round_size,
        "rounds": result.rounds, "examples": result.examples,
        "simulated_seconds": result.seconds, "seconds": wall, "total_seconds": total,
        "messages": result.messages, "bytes": result.bytes,
        "max_staleness": result.max_staleness, "waited_seconds": result.waited,
        "speeds": list(scenario.speeds), "network": {
            "latency": scenario.network.latency, "jitter": scenario.network.jitter,
            "overhead": scenario.network.overhead, "bandwidth": scenario.network.bandwidth},
        "loss": settings.loss, "train_rows": splits.train.n_rows,
        "test_rows": splits.test.n_rows, "n_features": splits.train.n_features,
        "model": spec.kind, "task": splits.labels.task,
        "classes": splits.labels.json_classes(),
        "adjustments": result.adjustments,
    }
    metrics.update(test_quality(splits.test, result.best_weights, settings.loss, spec,
                                splits.labels.task, splits.labels.classes))
    return metrics
