"""Single-node training job (`hogwild train`): load, split, train T Hogwild threads, evaluate, write."""

from __future__ import annotations

import logging
import time
from typing import Any, TextIO

import numpy as np

from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.conflicts import startup_report
from hogwild.data.diagnose.conflicts import warmup as warmup_conflicts
from hogwild.data.sources import (
    data_lines,
)
from hogwild.data.transform.labels import MULTICLASS
from hogwild.engine.gpu import gpu_trainer
from hogwild.engine.gpu_device import cuda_device
from hogwild.engine.gpu_mlp import gpu_mlp_trainer
from hogwild.engine.job import (
    test_quality,
    train_params,
)
from hogwild.engine.mlp import MLPTrainer
from hogwild.engine.ovr import OneVsRest
from hogwild.engine.runstart import (
    initial_model_record,
    load_splits,
    model_spec,
    warm_start_weights,
)
from hogwild.engine.trainer import Trainer
from hogwild.errors import ConfigError, DataError
from hogwild.inprocess import outofcore
from hogwild.model.evaluation import evaluate_model
from hogwild.model.losses import get_loss
from hogwild.model.mlp_kernels import BUFFERED_FLUSH_ROWS
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts
from hogwild.outputs.console import Console
from hogwild.outputs.plotter import BackgroundPlot
from hogwild.outputs.results import finish_run, plot_title
from hogwild.outputs.trainlog import TrainLog
from hogwild.runtime.warmup import preload_in_background

log = logging.getLogger("hogwild.train")


def make_trainer(settings: Settings, spec: ModelSpec) -> Trainer:
    """The in-process trainer of the model ``spec`` describes."""
    params = train_params(settings)
    if settings.device != "cpu":  # a GPU (numba.cuda loads on the GPU trainer's first use)
        if spec.is_mlp:
            return gpu_mlp_trainer(settings.device, spec, params, seed=settings.seed,
                                   deep_lr_scale=settings.deep_lr_scale)
        return gpu_trainer(settings.device, spec.n_features, params)
    if not spec.is_mlp:
        return Trainer(spec.n_features, params)
    return MLPTrainer(spec, params, seed=settings.seed,
                      flush_rows=BUFFERED_FLUSH_ROWS if settings.thread_buffer else 1,
                      deep_lr_scale=settings.deep_lr_scale)


def train_job(settings: Settings, out: TextIO | None = None,
              plot: BackgroundPlot | None = None,
              console: Console | None = None) -> dict[str, Any]:
    """Run `hogwild train`: print progress rows (to ``out``, default the current sys.stdout;
    thinned out as ``console`` says, default the process's verbosity), write outputs, return
    metrics. ``plot``: the loss plot's helper, if the caller has started it already."""
    if console is None:
        console = Console(out)
    started = time.perf_counter()
    # A bad out_dir (a file, read-only) is found now, not after training.
    root = artifacts.check_runs_root(settings.out_dir)
    # This run's own directory under the runs root, published whole at the end (latest).
    with artifacts.run_held(artifacts.RunDir.create(root), "train") as run:
        if plot is None:
            plot = BackgroundPlot()  # imports matplotlib in its own process meanwhile
        try:
            return _train(settings, console, started, plot, run)
        finally:
            plot.close()


def warm_kernels(settings: Settings) -> None:
    """Train, score and sample conflicts as this job will, on four rows: numba loads the
    kernels the job calls and no others.

    Each kernel loaded keeps its code and numba's records of it for the life of the
    process: loading all of them (the distributed and MLP ones too, as the job used to) took
    its peak RSS on 200k rows from 303 to 310 MB (3 runs each, the same every run); wall time
    did not differ beyond the noise (15 pairs: medians 1.84 against 1.86 s)."""
    tiny = CSRData(np.array([0, 2, 3, 5, 6], dtype=np.int64),
                   np.array([0, 1, 1, 2, 3, 3], dtype=np.int32), np.ones(6, dtype=np.float32),
                   np.array([1.0, -1.0, 1.0, -1.0], dtype=np.float32), 4)
    spec = model_spec(settings, tiny.n_features)
    trainer = make_trainer(settings, spec)
    trainer.fit(tiny, 1)
    evaluate_model(tiny, trainer.w, get_loss(settings.loss), spec)
    test_quality(tiny, trainer.w, settings.loss, spec)
    warmup_conflicts()  # both of its paths: which one runs depends on the data's size


def _train(settings: Settings, console: Console, started: float,
           plot: BackgroundPlot, run: artifacts.RunDir) -> dict[str, Any]:
    if settings.device != "cpu":  # no GPU: refused before any data is read or CUDA is warmed
        cuda_device(settings.device)
    preload_in_background(lambda: warm_kernels(settings))
    if settings.out_of_core:
        if settings.initial_model:
            raise ConfigError("initial_model", "not with out_of_core (warm start trains "
                              "from data in memory)")
        return outofcore.train_job(settings, console, started, plot, run)
    splits = load_splits(settings)
    loaded = time.perf_counter()
    say = console.say
    for line in data_lines(splits):
        say(line)
    conflicts_line, conflicts = startup_report(splits.train, threads=settings.threads,
                                               load_seconds=loaded - started, seed=settings.seed)
    # The theory's bound for threads sharing one process: no setting of this command acts
    # on it (threads only trade speed), so it is kept in metrics.json and the log, not
    # printed as a warning on every run.
    log.info("%s", conflicts_line)
    spec = model_spec(settings, splits.train.n_features)
    what = (f"an MLP (hidden {list(spec.hidden)}, {spec.dim} parameters), {settings.loss}"
            if spec.is_mlp else settings.loss)
    say(f"loaded in {loaded - started:.2f}s; training {what} with {settings.threads} "
        f"{settings.trainer} thread(s) for up to {settings.epochs} epochs")

    loss = get_loss(settings.loss)
    ovr: OneVsRest | None = None
    trainer: Trainer | None = None
    if splits.labels.task == MULTICLASS:
        if settings.device != "cpu":
            raise DataError(f"{settings.data}: {splits.labels.n_classes} label values; device "
                            f"{settings.device} trains binary and regression only")
        if spec.is_mlp:
            raise DataError(f"{settings.data}: {splits.labels.n_classes} label values; model mlp "
                            "trains binary and regression only (model linear trains "
                            "multiclass one-vs-rest)")
        ovr = OneVsRest(splits.train.n_features, splits.labels.n_classes,
                        train_params(settings))
        model_w = ovr.w
    else:
        trainer = make_trainer(settings, spec)
        model_w = trainer.w
    if splits.initial is not None:
        # Copied into the trainer's own array, which its threads (or GPU) train in place.
        model_w[...] = warm_start_weights(settings, splits, spec)
        say(f"starting from the model in {settings.initial_model}")
    record = TrainLog(settings, console, run.path, run.name, splits.train.n_rows)
    loop = record.fit_loop(model_w, lambda w: (evaluate_model(splits.val, w, loss, spec)
                                               if splits.val.n_rows else None))
    loop.begin(warm_started=splits.initial is not None)
    if ovr is not None:
        per_class = ovr.targets(splits.train)
        loop.run(lambda epoch: ovr.fit_epoch(per_class, epoch))
    elif trainer is not None:
        trainer.fit(splits.train, settings.epochs, callback=loop.after_epoch)
        loop.end()
    fields = {"train_rows": splits.train.n_rows, "test_rows": splits.test.n_rows,
              "n_features": splits.train.n_features, "conflicts": conflicts,
              "model": spec.kind, "initial_model": (
                  None if splits.initial is None
                  else initial_model_record(settings, splits.initial))}
    return finish_run(settings, loop, record, run, plot,
                      test=lambda w: evaluate_model(splits.test, w, loss, spec),
                      quality=lambda w: test_quality(splits.test, w, settings.loss, spec,
                                                     splits.labels.task, splits.labels.classes),
                      fields=fields, labels=splits.labels, feature_order=splits.feature_order,
                      title=plot_title(settings, "train"), started=started, loaded=loaded,
                      spec=spec, hashing=splits.hashing)
