"""A finished run's files (model in the input files' ids, metrics.json and .jsonl, plot); train's end."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from hogwild import __version__
from hogwild.config import Settings
from hogwild.data.diagnose.featurespace import frequent_features
from hogwild.data.transform.labels import LabelMap
from hogwild.data.transform.reorder import restore_weights
from hogwild.engine.fit import FitLoop
from hogwild.errors import OutputError, TrainingDiverged
from hogwild.model.evaluation import Metrics, is_finite
from hogwild.model.saved import SavedModel, default_task
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts, plotter
from hogwild.outputs.artifacts import RunDir
from hogwild.outputs.console import train_done, train_saved_line
from hogwild.outputs.plotter import BackgroundPlot
from hogwild.outputs.trainlog import TrainLog


def plot_title(settings: Settings, command: str) -> str:
    """The loss plot's title for a run of `hogwild COMMAND`."""
    return f"hogwild {command}: {settings.data}"


def write_outputs(settings: Settings, w: np.ndarray, metrics: dict[str, Any],
                  history: list[dict[str, Any]], feature_order: np.ndarray | None = None, *,
                  task: str | None = None, classes: Sequence[float] | None = None,
                  spec: ModelSpec | None = None,
                  hashing: Mapping[str, Any] | None = None,
                  plot: BackgroundPlot | None = None, draw_plot: bool = True,
                  history_on_disk: bool = False, run_dir: str | Path | None = None,
                  frequent_order: np.ndarray | None = None) -> Path:
    """Model (format 2, see hogwild.model.saved), metrics.json, metrics.jsonl and the loss
    plot, all atomically, into ``run_dir`` (the run's own directory, which the caller
    publishes once every file is in it; default settings.out_dir itself).

    ``feature_order`` (new_id_of_old) maps internal weights back to the input files' ids,
    and ranks the training features for the model's ``frequent_features``; weights trained
    in the files' own ids (out of core) give no ``feature_order``, and the ranking as
    ``frequent_order``.
    ``w`` is ``(d + 1,)`` or, one-vs-rest, ``(K, d + 1)``. ``task``/``classes`` default to a
    model of +-1 labels (regression for the squared loss). ``spec`` says how a flat vector
    of another model kind (the MLP) is laid out; its named arrays are saved instead of ``w``.
    A model that is not finite is never written. The plot is drawn by ``plot`` (a
    BackgroundPlot) when given, else in this process; with ``draw_plot=False`` not at all (the
    caller draws it later). With ``history_on_disk`` metrics.jsonl is the caller's, written
    already, and ``history`` only what the plot shows."""
    if not is_finite(w):
        raise TrainingDiverged("final model", settings.learning_rate)
    out_dir = Path(settings.out_dir if run_dir is None else run_dir)
    try:
        return _write_outputs(settings, out_dir, w, metrics, history, feature_order, task,
                              classes, spec, hashing, plot, draw_plot, history_on_disk,
                              feature_order if frequent_order is None else frequent_order)
    except OSError as exc:
        raise OutputError.writing(out_dir, exc) from None


def _write_outputs(settings: Settings, out_dir: Path, w: np.ndarray, metrics: dict[str, Any],
                   history: list[dict[str, Any]], feature_order: np.ndarray | None,
                   task: str | None, classes: Sequence[float] | None, spec: ModelSpec | None,
                   hashing: Mapping[str, Any] | None, plot: BackgroundPlot | None,
                   draw_plot: bool, history_on_disk: bool,
                   frequent_order: np.ndarray | None) -> Path:
    if task is None:
        task, default_classes = default_task(settings.loss)
        classes = default_classes if classes is None else classes
    if spec is not None and spec.is_mlp:
        return _write_mlp_outputs(settings, out_dir, spec, w, metrics, history, feature_order,
                                  hashing, task, classes, plot, draw_plot, history_on_disk,
                                  frequent_order)
    if feature_order is not None:
        w = (restore_weights(w, feature_order) if np.ndim(w) == 1
             else np.stack([restore_weights(row, feature_order) for row in w]))
    meta = _model_meta(settings, metrics, frequent_order)
    SavedModel(w=w, loss=settings.loss, task=task,
               classes=None if classes is None else tuple(classes),
               fit_bias=settings.fit_bias, meta=meta, hashing=hashing).save(out_dir)
    _write_run_files(settings, out_dir, metrics, history, plot, draw_plot, history_on_disk)
    return out_dir


def _write_mlp_outputs(settings: Settings, out_dir: Path, spec: ModelSpec, w: np.ndarray,
                       metrics: dict[str, Any], history: list[dict[str, Any]],
                       feature_order: np.ndarray | None,
                       hashing: Mapping[str, Any] | None = None, task: str = "binary",
                       classes: Sequence[float] | None = (-1, 1),
                       plot: BackgroundPlot | None = None, draw_plot: bool = True,
                       history_on_disk: bool = False,
                       frequent_order: np.ndarray | None = None) -> Path:
    """The MLP's model (W1, b1, ... in the input files' ids, see hogwild.model.spec) and the
    same run files as the linear model's."""
    if feature_order is not None:
        w = spec.restore(w, feature_order)
    meta = _model_meta(settings, metrics, frequent_order)
    SavedModel(w=w, loss=settings.loss, task=task,
               classes=None if classes is None else tuple(classes), fit_bias=settings.fit_bias,
               model="mlp", meta=meta, arrays=spec.arrays(w),
               hashing=hashing).save(out_dir)
    _write_run_files(settings, out_dir, metrics, history, plot, draw_plot, history_on_disk)
    return out_dir


def _model_meta(settings: Settings, metrics: dict[str, Any],
                feature_order: np.ndarray | None) -> dict[str, Any]:
    """model.json's own keys beside the format's: version, time, metrics, settings and the
    training data's most frequent features (predict checks new data against them)."""
    meta: dict[str, Any] = {"hogwild_version": __version__,
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "metrics": metrics, "settings": asdict(settings)}
    if feature_order is not None:
        meta["frequent_features"] = frequent_features(feature_order)
    return meta


def _write_run_files(settings: Settings, out_dir: Path, metrics: dict[str, Any],
                     history: list[dict[str, Any]], plot: BackgroundPlot | None,
                     draw_plot: bool, history_on_disk: bool) -> None:
    if not history_on_disk:
        artifacts.write_history(out_dir, history)
    if draw_plot and plot is not None:
        plot.finish(out_dir, history, title=plot_title(settings, metrics["command"]),
                    saved=metrics.get("saved_epoch"))
    elif draw_plot:
        plotter.plot_loss(out_dir, history, title=plot_title(settings, metrics["command"]),
                          saved=metrics.get("saved_epoch"))
    artifacts.write_metrics(out_dir, metrics)


def finish_run(settings: Settings, loop: FitLoop, log: TrainLog, run: RunDir,
               plot: BackgroundPlot, *, test: Callable[[np.ndarray], Metrics],
               quality: Callable[[np.ndarray], dict[str, Any]], fields: dict[str, Any],
               labels: LabelMap, feature_order: np.ndarray | None, title: str,
               started: float, loaded: float, spec: ModelSpec | None = None,
               hashing: Mapping[str, Any] | None = None,
               frequent_order: np.ndarray | None = None) -> dict[str, Any]:
    """The end of a `hogwild train` run, in memory or out of core, once ``loop`` has ended:
    score the model kept on the ``test`` rows (and the loop's validation rows), write its
    files into ``run``'s directory (the plot drawn meanwhile, the last one), publish the
    run, print the result, and return metrics.json's fields: the common ones, then the job's
    own ``fields`` and the test rows' ``quality`` (test_precision, ...). ``started`` and
    ``loaded``: when the job began and when its data was loaded (perf_counter)."""
    log.close()
    w = loop.kept_weights()
    scored = test(w)
    val = loop.validate(w)
    if not (is_finite(w) and np.isfinite(scored.loss)):
        raise TrainingDiverged("test loss", settings.learning_rate)
    # The history is final and the model sound: the helper draws while the outputs are written.
    plotted = log.history.rows.rows()
    saved = loop.best_epoch()
    plot.start(run.path, plotted, title=title, saved=saved)
    metrics: dict[str, Any] = {
        "command": "train", "test_loss": scored.loss, "test_accuracy": scored.accuracy,
        "val_loss": val.loss if val else None, "val_accuracy": val.accuracy if val else None,
        "epochs": loop.epochs, "best_epoch": saved, "saved_epoch": saved,
        "seconds": loop.seconds, "load_seconds": loaded - started,
        "total_seconds": time.perf_counter() - started, "stop_reason": loop.stop_reason,
        "threads": settings.threads, "trainer": settings.trainer,
        "batch_size": settings.batch_size, "loss": settings.loss, **fields,
        "task": labels.task, "classes": labels.json_classes()}
    metrics.update(quality(w))
    log.write_history()
    write_outputs(settings, w, metrics, plotted, feature_order, spec=spec, hashing=hashing,
                  task=labels.task, classes=labels.classes, draw_plot=False,
                  history_on_disk=True, run_dir=run.path, frequent_order=frequent_order)
    try:  # the plot (drawn meanwhile) is the last file: then the run is published whole
        plot.finish(run.path, plotted, title=title, saved=saved)
    except OSError as exc:
        raise OutputError.writing(run.path, exc) from None
    published = run.publish(settings.keep_runs)
    if saved != loop.epochs:  # which model was saved when it is not the last epoch's
        log.console.say(train_saved_line(saved, loop.stopper.kept_loss,
                                         loop.stopper.kept_accuracy))
    log.console.result(train_done(loop.stop_reason, loop.epochs, saved, loop.seconds,
                                  scored.loss, scored.accuracy).text(published))
    log.console.json_result(metrics)
    return metrics
