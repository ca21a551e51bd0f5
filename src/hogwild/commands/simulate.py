"""`hogwild simulate`: a run of W virtual workers in one process, on the run's own settings."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, TextIO

import numpy as np

from hogwild.base.hosts import machine_cores
from hogwild.base.text import number
from hogwild.config import Settings
from hogwild.data.sources import data_lines
from hogwild.data.transform.labels import MULTICLASS
from hogwild.data.transform.split import shard
from hogwild.engine.calibration import MAX_ROWS, busy_threads, kernel_speed, round_costs
from hogwild.engine.guard import SwingGuard
from hogwild.engine.job import test_quality
from hogwild.engine.network import DEFAULT_SPEED, Network
from hogwild.engine.round_size import (
    choose_round_size,
    fit_round_size,
    max_rounds,
    momentum_step_scale,
)
from hogwild.engine.rules import ExchangeRules
from hogwild.engine.runstart import load_splits, model_spec
from hogwild.engine.simulate import Scenario, SimResult, Simulation, worker_rules
from hogwild.engine.threads import KernelPlan
from hogwild.engine.treeshape import COORDINATOR, neighbours
from hogwild.errors import ConfigError, DataError, TrainingDiverged, UsageError
from hogwild.model.arrays import csr_arrays
from hogwild.model.compression import Compression
from hogwild.model.evaluation import evaluate_model
from hogwild.model.losses import get_loss
from hogwild.outputs import artifacts
from hogwild.outputs.console import QUIET, SIMULATE_ROWS, VERBOSE, Console, simulate_done
from hogwild.outputs.results import write_outputs
from hogwild.settings.rules import (
    engaged_note,
    few_rows_a_worker,
    resolve_combine,
    resolve_topology,
)
from hogwild.settings.simulation import DEFAULT_MAX_EVENTS, WARN_EVENTS

log = logging.getLogger("hogwild.simulate")

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
    max_events: float = DEFAULT_MAX_EVENTS
    calibrate: bool = False          # measure speed and message cost on this machine first
    shared_cores: int = 0            # the nodes share one machine of this many cores
    round_cost: float = 0.0          # seconds of a worker's own arithmetic a round

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
    combine = resolve_combine(settings.combine, train_rows, settings.workers)
    size = choose_round_size(settings.round_size, train_rows, train_nnz, total,
                             combine, settings.workers, kernel.spec.dim)
    if settings.round_size is None:
        size = fit_round_size(size, train_rows, total, settings.epochs)
    rules = ExchangeRules(mode=settings.mode, staleness=settings.staleness,
                          combine=combine,
                          topology=resolve_topology(settings.topology, settings.workers,
                                                    settings.mode),
                          compression=Compression(settings.delta_threshold,
                                                  settings.delta_topk,
                                                  settings.delta_dtype == "float16"))
    scale = momentum_step_scale(combine, settings.mode, settings.workers, train_rows, total,
                                size)
    return Scenario(
        workers=settings.workers,
        kernel=replace(kernel, round_size=size, learning_rate=kernel.learning_rate * scale),
        rules=rules,
        max_rounds=max_rounds(settings.epochs, train_rows, total, size),
        speeds=options.worker_speeds(settings.workers, settings.seed),
        network=options.network, tree_fanout=settings.tree_fanout, slices=options.slices,
        evals_per_epoch=options.evals_per_epoch, seed=settings.seed,
        shared_cores=options.shared_cores, round_cost=options.round_cost)


def estimate_events(scenario: Scenario) -> tuple[int, int, int]:
    """What the simulation will do, before it runs: (deliveries, steps, total). Each of the
    W workers' deltas of each of R rounds reaches every other node, the coordinator included
    (W per delta, directly in a mesh, forwarded over the tree's W edges in star and tree,
    where a busy sender sums what it forwards but still handles each part), and each worker
    trains each round in ``slices`` steps. Measured on a 2-core machine against the runs'
    own counts: within 2 % for a mesh of 8, 16 and 32 workers (R x W x W deliveries)."""
    rounds, workers = scenario.max_rounds, scenario.workers
    deliveries = rounds * workers * workers
    steps = rounds * workers * scenario.slices
    return deliveries, steps, deliveries + steps


def _scaled(settings: Settings, scenario: Scenario) -> str:
    """Words on a step size the run scales (engine.round_size.momentum_step_scale)."""
    lr = scenario.kernel.learning_rate
    if lr == settings.learning_rate:
        return ""
    return (f", learning rate {settings.learning_rate:g} x {lr / settings.learning_rate:g} on "
            "the workers (block momentum's rounds are few against the workers)")


def kernel_plan(settings: Settings, spec: Any) -> KernelPlan:
    """The virtual workers' kernel: the run's model, loss and step sizes (one round size
    is filled in by scenario_of)."""
    return KernelPlan(
        spec=spec, loss=settings.loss, round_size=1, threads=settings.threads,
        learning_rate=settings.learning_rate, lr_schedule=settings.lr_schedule,
        lr_decay=settings.lr_decay, power_t=settings.power_t, l2=settings.l2,
        fit_bias=settings.fit_bias, thread_buffer=False,
        deep_lr_scale=settings.deep_lr_scale if spec.is_mlp else 1.0)


def simulation_of(settings: Settings, splits: Any, scenario: Scenario,
                  spec: Any) -> Simulation:
    """The run's simulation, ready to run: the shards cut as the coordinator cuts them, the
    validation set evaluated as it evaluates it, the swing guard acting as it acts."""
    shards = [csr_arrays(part, spec.n_features)
              for part in shard(splits.train, settings.workers, seed=settings.seed,
                                mode=settings.shipping if settings.shipping in
                                ("partition", "replicate") else "partition")]
    loss = get_loss(settings.loss)

    def evaluate(w: np.ndarray) -> tuple[float, float | None]:
        m = evaluate_model(splits.val, w, loss, spec)
        return m.loss, m.accuracy

    guard = (SwingGuard(settings.mode, settings.staleness, settings.swing_tolerance,
                        splits.val.n_rows)
             if settings.swing_tolerance is not None and splits.val.n_rows else None)
    return Simulation(scenario, shards, evaluate if splits.val.n_rows else None, guard=guard)


def check_cost(scenario: Scenario, topology: str, max_events: float) -> int:
    """The estimated events; UsageError naming what makes them so many when they exceed
    ``max_events``, a warning when they exceed WARN_EVENTS."""
    deliveries, steps, total = estimate_events(scenario)
    w, r = scenario.workers, scenario.max_rounds
    if deliveries >= steps:
        why = (f"--workers {w}: each of {r} rounds sends every worker's delta to every "
               f"other node ({topology}): {r} x {w} x {w} = {deliveries:.3g} deliveries")
    else:
        why = (f"--slices {scenario.slices}: {r} rounds x {w} workers x {scenario.slices} "
               f"steps = {steps:.3g} steps")
    if total > max_events:
        raise UsageError(f"this simulation would take about {total:.3g} events, above "
                         f"--max-events {max_events:.3g} ({why}); use fewer workers, epochs "
                         f"or slices, or raise --max-events to run it anyway")
    if total > WARN_EVENTS:
        log.warning("this simulation takes about %.3g events (%s): minutes on one core",
                    total, why)
    return total


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
    if (splits.hashing or {}).get("weight"):  # the virtual workers train as a cluster's do
        raise ConfigError("data", f"{settings.data}: a weight column (weight=) is used by "
                          "`hogwild train` only, not by cluster runs nor their simulation")
    if splits.labels.task == MULTICLASS:
        raise DataError(f"{settings.data}: {splits.labels.n_classes} label values; simulate "
                        "trains binary classification and regression, as run does")
    for line in data_lines(splits):
        console.say(line)
    # The workers engage: auto trains on, and topology: auto and combine: auto for them.
    asked = settings
    settings = settings.for_run(splits.train.n_rows, splits.train.nnz)
    engaged = engaged_note(asked.workers, settings.workers, settings.threads, splits.train.nnz,
                           settings.mode, splits.train.n_rows)
    if engaged is not None:
        console.say(f"note: {engaged}")
    if len(options.speeds) > 1:
        # One per worker started (refused otherwise); the engaged ones are the first.
        options.worker_speeds(asked.workers, settings.seed)
        options = replace(options, speeds=options.speeds[:settings.workers])
    spec = model_spec(settings, splits.train.n_features)
    kernel = kernel_plan(settings, spec)
    if options.calibrate:
        options = _calibrated(options, splits.train, kernel, settings, console)
    scenario = scenario_of(settings, options, splits.train.n_rows, splits.train.nnz, kernel)
    check_cost(scenario, settings.topology, options.max_events)  # before any shard is cut
    note = few_rows_a_worker(asked.combine, scenario.rules.combine, splits.train.n_rows,
                             settings.workers)
    if note is not None:
        console.say(f"note: {note}")
    net = options.network
    console.say(f"simulating {settings.workers} worker(s) x {settings.threads} thread(s), "
                f"{settings.mode}, {settings.topology}, combine {scenario.rules.combine}"
                f"{_staleness(settings)}; "
                f"{scenario.kernel.round_size} examples per thread per round, "
                f"{scenario.max_rounds} rounds{_scaled(settings, scenario)}; message "
                f"{net.overhead * 1e3:g} ms + "
                f"{net.latency * 1e3:g} ms ({net.jitter}) latency, "
                f"{net.bandwidth / 1e9:g} GB/s")
    began = time.perf_counter()
    simulation = simulation_of(settings, splits, scenario, spec)
    guard = simulation.guard
    result = simulation.run()
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
    metrics["workers_started"] = asked.workers
    slower = slower_than_one(settings.workers, metrics["speedup"], metrics["time_shares"])
    if slower is not None:
        console.say(f"note: {slower}")
    write_outputs(settings, result.best_weights, metrics, result.history,
                  splits.feature_order, spec=spec, hashing=splits.hashing,
                  task=splits.labels.task, classes=splits.labels.classes, run_dir=run.path)
    published = run.publish(settings.keep_runs)
    done = simulate_done(
        result.rounds, result.seconds, wall, result.messages, result.bytes,
        result.max_staleness, metrics["test_accuracy"], metrics["final_test_accuracy"],
        metrics["speedup"], metrics["one_worker_seconds"], metrics["time_shares"])
    console.result(done.text(published))
    return metrics


def slower_than_one(workers: int, speedup: float, shares: dict[str, float]) -> str | None:
    """The line that says a run of several workers took longer than one worker would, and
    what to try instead; None when it did not (or had one worker)."""
    if workers < 2 or speedup >= 1.0:
        return None
    why = ("they spent more time waiting for messages than training"
           if shares["waiting"] > shares["training"]
           else "the exchange between them cost more than the training they share")
    return (f"these {workers} workers took {1.0 / max(speedup, 1e-12):.3g}x one worker's time "
            f"for the same epochs: {why}. Fewer workers (`--workers`) or one process "
            "(`hogwild train`) would be faster here")


def _calibrated(options: SimOptions, train: Any, kernel: KernelPlan, settings: Settings,
                console: Console) -> SimOptions:
    """``options`` with this machine's kernel speed (unless --speeds names them) and the
    measured cost of a delta message (engine.calibration, protocol.msgcost), each measured
    as busy as the run keeps this machine."""
    # deferred: msgcost loads grpc, which a simulation without --calibrate does without
    from hogwild.cluster.transport.msgcost import measure, measure_burst

    rows = csr_arrays(train.slice(0, min(train.n_rows, MAX_ROWS)), kernel.spec.n_features)
    workers, cores = settings.workers, machine_cores()
    concurrent = busy_threads(workers, kernel.threads)
    speed = kernel_speed(rows, kernel, concurrent)
    scenario = scenario_of(settings, options, train.n_rows, train.nnz, kernel)
    topology, fanout = scenario.rules.topology, scenario.tree_fanout
    # One message at a time gives the cost per byte; a sync round's end, with every worker
    # sending at once (to each peer and the coordinator in a mesh, up the tree otherwise),
    # gives what a message costs the run's senders and how long it is in flight.
    alone = measure(kernel.spec.dim)
    # As busy as the run keeps this machine: its training threads on the cores meanwhile.
    burst = measure_burst(kernel.spec.dim, workers, mesh=topology == "mesh", busy=concurrent)
    per_byte = 1.0 / alone.bandwidth
    net = replace(options.network, bandwidth=alone.bandwidth,
                  overhead=max(alone.overhead, burst.sender - burst.dense_bytes * per_byte),
                  latency=burst.latency if burst.workers > 1 and topology == "mesh"
                  else options.network.latency)
    build, apply = round_costs(worker_rules(scenario), kernel.spec.initial_weights(0))
    # What a worker applies a round: a message from every node that sends to it.
    arrivals = sum(0 in neighbours(node, workers, topology, fanout)
                   for node in (COORDINATOR, *range(1, workers)))
    round_cost = build + apply * arrivals
    console.say(f"calibrated on this machine: {speed:.3g} non-zeros/s per thread "
                f"({concurrent} at once); a worker's own arithmetic {round_cost * 1e3:.2f} ms "
                f"a round; a delta message alone {alone.small_seconds * 1e3:.2f} ms "
                f"(16 entries), {alone.dense_seconds * 1e3:.2f} ms ({alone.dense_entries:,}); "
                f"a sync round's {burst.workers} x {burst.destinations} at once beside "
                f"{concurrent} busy core(s) "
                f"{burst.all_acked * 1e3:.2f} ms, the peers' in after "
                f"{burst.peers_in * 1e3:.2f} ms: {net.overhead * 1e3:.2f} ms + "
                f"{net.bandwidth / 1e9:.3g} GB/s a message, {net.latency * 1e3:.2f} ms in flight")
    # The run being predicted is `hogwild run` here: every node on this machine's cores.
    return replace(options, speed=options.speed if options.speeds else speed, network=net,
                   shared_cores=cores, round_cost=round_cost)


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
    print(SIMULATE_ROWS.header(), file=out)
    for i, row in enumerate(rows):
        if i % step and i != len(rows) - 1:
            continue
        span = spans[i - 1] if i else 0
        if row["train_loss"] is not None and i and span * 2 < typical:
            short = (span, typical)
            row = {**row, "train_loss": f"({number(row['train_loss'])})"}
        print(SIMULATE_ROWS.row(row), file=out)
    if short is not None:
        print(f"(training loss over the last {short[0]:,} examples only, against about "
              f"{short[1]:,} per row: too few to compare)", file=out)


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
        # The epoch of the weights saved (the last one's without a validation set).
        "saved_epoch": (best or result.history[-1])["epoch"] if result.history else None,
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
    # One worker with as many threads would train the same examples with no message at all:
    # the sum of the kernel work at the workers' mean speed.
    speeds = scenario.speeds or (DEFAULT_SPEED,)
    per_row = splits.train.nnz / max(1, splits.train.n_rows)
    one = result.examples * per_row / (sum(speeds) / len(speeds) * max(1, settings.threads))
    worker_time = max(result.seconds * scenario.workers, 1e-12)
    metrics.update({
        "one_worker_seconds": one, "speedup": one / max(result.seconds, 1e-12),
        "time_shares": {"training": result.trained / worker_time,
                        "sending": result.sending / worker_time,
                        "waiting": result.waited / worker_time}})
    metrics.update(test_quality(splits.test, result.best_weights, settings.loss, spec,
                                splits.labels.task, splits.labels.classes))
    return metrics
