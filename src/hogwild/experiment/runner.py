"""Train and measure every run of a plan: wall and CPU time, errors per epoch, test error.

In-process runs use the same Trainer as ``hogwild train`` (features renumbered by frequency,
buffered hot features as the settings say); cluster runs start the real ``hogwild run``
launcher as a child process. Timing covers training only: each epoch is timed with
``time.perf_counter`` and ``time.process_time`` (CPU seconds of every thread of this
process), and the evaluations between epochs run outside the clock.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.cluster.localrun.launcher import child_env, setting_flags
from hogwild.config import Settings
from hogwild.engine.fit import FitLoop
from hogwild.engine.job import train_params
from hogwild.engine.runstart import Splits, load_splits
from hogwild.engine.trainer import EpochStats, Trainer
from hogwild.errors import TrainingDiverged
from hogwild.experiment.plan import DataSpec, ExperimentOptions, RunSpec
from hogwild.model.arrays import csr_arrays, feature_counts
from hogwild.model.evaluation import Metrics, evaluate
from hogwild.model.losses import get_loss
from hogwild.model.warmup import warmup
from hogwild.outputs import artifacts

Record = dict[str, Any]

# A cluster run that takes longer than this is killed and recorded as failed.
CLUSTER_TIMEOUT = 600.0
# Training shorter than this is not timed as a result: thread start-up, the first touch of
# the arrays and scheduler noise are milliseconds each, so a ratio of two runs of a few ms
# measures them, not the trainers (quick runs of 1-12 ms gave "speedups" of either sign).
MIN_TIMED_SECONDS = 0.05
TOO_SHORT = "too short to time"
SERIAL_TOO_SHORT = "serial run too short to time"


def data_settings(base: Settings, data: DataSpec) -> Settings:
    """The settings of one data set: its source, its loss, its own feature count, and the
    test rows split off it (no separate test file); the model is linear, as in the paper."""
    return base.replace(data=data.source, test_data="", loss=data.loss, n_features=None,
                        model="linear")


def _errors(prefix: str, m: Metrics | None, is_classifier: bool) -> Record:
    """``{prefix}_error`` (classification: 1 - accuracy) and ``{prefix}_rmse`` (regression:
    the root mean squared residual; the squared loss is half the squared residual), the one
    that does not apply None."""
    error = rmse = None
    if m is not None and is_classifier:
        error = 1.0 - (m.accuracy if m.accuracy is not None else 0.0)
    elif m is not None:
        rmse = math.sqrt(2.0 * m.loss)
    return {f"{prefix}_error": error, f"{prefix}_rmse": rmse}


def _base_record(spec: RunSpec, opts: ExperimentOptions, repeat: int) -> Record:
    threads_used = spec.threads * max(spec.workers, 1)
    serial = spec.trainer == "serial"
    return {
        "studies": "+".join(spec.studies), "data": spec.data.name, "source": spec.data.source,
        "rows": spec.data.rows, "loss": spec.data.loss, "trainer": spec.trainer,
        "threads": 1 if serial else spec.threads, "batch_size": spec.batch_size,
        "workers": spec.workers, "cores": opts.cores,
        "oversubscribed": (1 if serial else threads_used) > opts.cores, "repeat": repeat,
        "epochs": opts.epochs,
    }


def run_inprocess(spec: RunSpec, splits: Splits, settings: Settings, opts: ExperimentOptions,
                  repeat: int) -> Record:
    """Train ``opts.epochs`` passes; one evaluation of train and validation after each."""
    params = dataclasses.replace(
        train_params(settings), threads=spec.threads, mode=spec.trainer,
        batch_size=spec.batch_size,
        learning_rate=opts.learning_rate(settings.learning_rate, spec.batch_size))
    loss = get_loss(spec.data.loss)
    trainer = Trainer(splits.train.n_features, params)
    rec = _base_record(spec, opts, repeat)
    rec.update(train_rows=splits.train.n_rows, n_features=splits.train.n_features,
               learning_rate=params.learning_rate)
    spent = [0.0, 0.0]  # wall and CPU seconds of training, the evaluations left out
    epochs: list[Record] = []

    def epoch(e: int) -> EpochStats:
        c0 = time.process_time()
        t0 = time.perf_counter()
        stats = trainer.fit_epoch(splits.train, e)
        seconds = time.perf_counter() - t0
        cpu_seconds = time.process_time() - c0
        spent[0] += seconds
        spent[1] += cpu_seconds
        # The row as far as training goes; the last one when the epoch diverged.
        epochs.append({"epoch": e + 1, "seconds": seconds, "cpu_seconds": cpu_seconds,
                       "elapsed": spent[0], "train_loss_during": stats.train_loss})
        return stats

    def row_of(stats: EpochStats | None, va: Metrics | None, _: float) -> Record:
        # Epoch 0 is the model before training, as `hogwild train` and `hogwild run` record
        # it (the curves of in-process and cluster runs start at the same point).
        row = epochs.pop() if stats else {"epoch": 0, "seconds": 0.0, "cpu_seconds": 0.0,
                                          "elapsed": 0.0, "train_loss_during": None}
        tr = evaluate(splits.train, trainer.w, loss)
        return {**row, "train_loss": tr.loss, "val_loss": va.loss if va else None,
                **_errors("train", tr, loss.is_classifier),
                **_errors("val", va, loss.is_classifier)}

    fit = FitLoop(trainer.w, lambda w: evaluate(splits.val, w, loss) if splits.val.n_rows
                  else None, epochs=opts.epochs, learning_rate=params.learning_rate,
                  keep_best=False, row_of=row_of, observe=lambda row, _: epochs.append(row))
    fit.begin()
    status = "ok"
    try:
        fit.run(epoch)
    except TrainingDiverged:
        status = "diverged"
    wall, cpu = spent
    rec.update(wall_seconds=wall, cpu_seconds=cpu, cores_used=cpu / wall if wall > 0 else None,
               status=status, epochs_done=len(epochs) - 1, epoch_rows=epochs)
    if status == "ok":
        test = evaluate(splits.test, trainer.w, loss)
        final = epochs[-1]
        rec.update(val_loss=final["val_loss"], train_error=final["train_error"],
                   train_rmse=final["train_rmse"], test_loss=test.loss,
                   **_errors("test", test, loss.is_classifier))
    else:
        rec.update(val_loss=None, test_loss=None, **_errors("train", None, True),
                   **_errors("test", None, True))
    return rec


def run_cluster(spec: RunSpec, settings: Settings, opts: ExperimentOptions, repeat: int,
                out_dir: Path) -> Record:
    """One `hogwild run` with ``spec.workers`` worker processes on loopback; wall time of the
    whole command, CPU time of all its processes, training seconds and validation history
    as the coordinator measured them."""
    run_dir = out_dir / f"w{spec.workers}-t{spec.threads}-r{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    # engage all: the study measures the workers it names, on sets that may keep fewer busy.
    s = settings.replace(workers=spec.workers, threads=spec.threads, epochs=opts.epochs,
                         patience=0, time_budget=0.0, target_loss=None, out_dir=str(run_dir),
                         trainer="hogwild", batch_size=1, engage="all")
    argv = [sys.executable, "-m", "hogwild.cli", "run", *setting_flags(s, "run")]
    rec = _base_record(spec, opts, repeat)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    log_path = run_dir / "run.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=child_env(),
                                start_new_session=True)
        try:
            code = proc.wait(CLUSTER_TIMEOUT)
        except subprocess.TimeoutExpired:
            # The launcher tears its children down on SIGTERM; its session holds them all.
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30.0)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = None
    total = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rec.update(command_seconds=total, cpu_seconds=cpu, log=str(log_path),
               learning_rate=s.learning_rate)
    # The run's directory under run_dir (a runs root), linked once every file was written.
    published = artifacts.published(run_dir)
    metrics_path = published / artifacts.METRICS_FILE
    if code != 0 or not metrics_path.is_file():
        why = "timed out" if code is None else f"exit code {code}"
        rec.update(status=f"failed ({why}; see {log_path})", wall_seconds=None,
                   test_error=None, test_loss=None, val_loss=None, epoch_rows=[])
        return rec
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    history_path = published / artifacts.HISTORY_FILE
    history = [json.loads(line) for line in history_path.read_text(encoding="utf-8").splitlines()
               if line.strip()] if history_path.is_file() else []
    accuracy = metrics.get("test_accuracy")
    rec.update(status="ok", wall_seconds=float(metrics["seconds"]),
               cores_used=cpu / total if total > 0 else None,
               train_rows=metrics.get("train_rows"), n_features=metrics.get("n_features"),
               val_loss=metrics.get("val_loss"), test_loss=metrics.get("test_loss"),
               test_error=None if accuracy is None else 1.0 - float(accuracy),
               test_rmse=None, train_error=None, train_rmse=None,
               epochs_done=metrics.get("epochs"),
               epoch_rows=[{"elapsed": r.get("elapsed"), "val_loss": r.get("val_loss"),
                            "val_error": None if r.get("val_accuracy") is None
                            else 1.0 - float(r["val_accuracy"])} for r in history])
    return rec


def execute(plan: list[RunSpec], base: Settings, opts: ExperimentOptions, out_dir: Path,
            log: Callable[[str], None]) -> list[Record]:
    """Run the plan data set by data set (one set in memory at a time); within a set the
    repeats are interleaved (every run once, then every run again) so that a burst of load
    on the machine does not land on one configuration only."""
    warmup()  # every kernel compiled or loaded from numba's cache before any clock starts
    records: list[Record] = []
    groups: dict[str, list[RunSpec]] = {}
    for spec in plan:
        groups.setdefault(spec.data.source, []).append(spec)
    for specs in groups.values():
        data = specs[0].data
        settings = data_settings(base, data)
        local = [s for s in specs if not s.workers]
        splits = None
        if local:
            t0 = time.perf_counter()
            splits = load_splits(settings)
            # The trainer's per-data-set checks (index range, feature counts) are cached by
            # array: made here, so the first run timed does not pay for all the others.
            arrays = csr_arrays(splits.train, splits.train.n_features)
            feature_counts(arrays.indices, splits.train.n_features)
            log(f"{data.name}: {splits.train.n_rows:,} train / {splits.val.n_rows:,} validation"
                f" / {splits.test.n_rows:,} test rows ({time.perf_counter() - t0:.1f}s to make)")
        for repeat in range(opts.repeats):
            for spec in specs:
                if spec.workers:
                    rec = run_cluster(spec, settings, opts, repeat, out_dir / "cluster")
                else:
                    assert splits is not None
                    rec = run_inprocess(spec, splits, settings, opts, repeat)
                records.append(rec)
                log(_progress_line(spec, rec))
        del splits
    derive(records, opts)
    return records


def _progress_line(spec: RunSpec, rec: Record) -> str:
    if rec["status"] != "ok":
        return f"  {spec.label()}: {rec['status']}"
    err = rec.get("test_error")
    err_text = (f"test error {err:.4f}" if err is not None
                else f"test RMSE {rec['test_rmse']:.4f}" if rec.get("test_rmse") is not None
                else "")
    short = (f" ({TOO_SHORT}: under {MIN_TIMED_SECONDS * 1000:.0f} ms)"
             if too_short(rec) else "")
    return (f"  {spec.label()} [repeat {rec['repeat'] + 1}]: {rec['wall_seconds']:.3f}s"
            f"{short}, CPU {rec['cpu_seconds']:.3f}s, {err_text}")


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (None if there are none)."""
    xs = [v for v in values if v is not None]
    return float(np.median(xs)) if xs else None


def derive(records: list[Record], opts: ExperimentOptions) -> None:
    """Add the columns that compare runs: speedup over the serial trainer on the same data
    (median serial wall time / this run's), the target validation loss of the data set,
    time to reach it and the speedup in that time."""
    by_source: dict[str, list[Record]] = {}
    for rec in records:
        by_source.setdefault(rec["source"], []).append(rec)
    for rec in records:
        rec["too_short"] = too_short(rec)
    for recs in by_source.values():
        serial = [r for r in recs if r["trainer"] == "serial" and r["status"] == "ok"]
        serial_wall = median(r["wall_seconds"] for r in serial)
        # A ratio is only as good as its worse clock: none against a serial run too short.
        serial_short = any(r["too_short"] for r in serial)
        target: float | None = None
        if opts.target_loss is not None and recs[0]["loss"] != "squared":
            target = opts.target_loss
        else:
            final = median(r["val_loss"] for r in serial)
            target = None if final is None else final * (1.0 + opts.target_slack)
        for rec in recs:
            rec["target_loss"] = target
            rec["time_to_target"] = _time_to(rec, target)
        serial_ttt = median(r["time_to_target"] for r in serial)
        for rec in recs:
            wall, ttt = rec.get("wall_seconds"), rec["time_to_target"]
            timed = not (rec["too_short"] or serial_short)
            rec["timing"] = ("ok" if timed else TOO_SHORT if rec["too_short"]
                             else SERIAL_TOO_SHORT)
            rec["speedup"] = (serial_wall / wall if timed and serial_wall and wall else None)
            rec["speedup_to_target"] = (serial_ttt / ttt if timed and serial_ttt and ttt
                                        else None)


def too_short(rec: Record) -> bool:
    """Whether a finished run trained for less than MIN_TIMED_SECONDS (its times are kept,
    but no speedup is derived from them)."""
    wall = rec.get("wall_seconds")
    return rec.get("status") == "ok" and wall is not None and wall < MIN_TIMED_SECONDS


def _time_to(rec: Record, target: float | None) -> float | None:
    """Training seconds until the first evaluation at or below ``target`` (None: never)."""
    if target is None or rec["status"] != "ok":
        return None
    for row in rec["epoch_rows"]:
        if row.get("val_loss") is not None and row["val_loss"] <= target:
            return float(row["elapsed"])
    return None
