"""`hogwild predict` and `hogwild eval`: score a data file with a saved model, report metrics."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from hogwild.base import atomic
from hogwild.base.text import number
from hogwild.data.diagnose.featurespace import foreign_space_warning
from hogwild.data.formats._textformat import MAX_VALUE_BYTES, format_table
from hogwild.data.hashing.tables import apply_hashing
from hogwild.data.sources import load_source
from hogwild.data.transform.labels import as_written
from hogwild.errors import DataError, ModelError
from hogwild.model import metrics as quality
from hogwild.model.evaluation import predict
from hogwild.model.saved import SavedModel
from hogwild.model.scoring import drop_unknown_features, margins
from hogwild.outputs import artifacts
from hogwild.outputs.console import NORMAL, QUIET

OUTPUTS = ("label", "raw", "proba")
# Significant digits written: labels exactly as stored (float64 round trip), scores 9.
LABEL_DIGITS = 17
SCORE_DIGITS = 9
# Lines formatted at a time (32 bytes of buffer per value).
CHUNK_ROWS = 1 << 20
_SUMMARY_KEYS = ("accuracy", "loss")
_CLASSIFICATION_KEYS = ("accuracy", "precision", "recall", "f1", "roc_auc", "loss")
_REGRESSION_KEYS = ("rmse", "mae", "r2", "loss")


@dataclass(frozen=True)
class Scored:
    """A data set scored by a model: margins, predicted labels, metrics (None without usable
    labels), the feature entries dropped for lying beyond the model, and timings."""

    model: SavedModel
    margins: npt.NDArray[np.float64]
    labels: npt.NDArray[Any]
    metrics: dict[str, Any] | None
    dropped_entries: int
    data_features: int
    note: str
    load_seconds: float
    score_seconds: float


def score_file(model: SavedModel, spec: str, *, threads: int | None = None,
               zero_based: bool | None = None, warn: TextIO | None = None,
               prog: str = "hogwild predict", any_feature_space: bool = False) -> Scored:
    """Load ``spec`` with hogwild's own loader (svmlight files, bundled:..., synthetic:...),
    score it, and compute the metrics when its labels fit the model. Data that looks like
    another feature space than the model's is refused (DataError), unless
    ``any_feature_space``: then it is scored with a warning."""
    if zero_based is None:
        settings = model.meta.get("settings")
        zero_based = bool(settings.get("zero_based", False)) if isinstance(settings, dict) \
            else False
    started = time.perf_counter()
    if model.hashing is not None:
        # Trained on a csv: source: hash the new file's columns exactly the same way.
        data = apply_hashing(model.hashing, spec)
    else:
        data = load_source(spec, zero_based=zero_based)
    loaded = time.perf_counter()
    frequent = model.meta.get("frequent_features")
    if isinstance(frequent, list) and all(isinstance(i, int) for i in frequent):
        foreign = foreign_space_warning(data, frequent, spec)
        if foreign is not None and not any_feature_space:
            # Its predictions and metrics would be numbers without meaning.
            raise DataError(f"{foreign} Not scored: give --any-feature-space to score it "
                            "anyway.")
        if foreign is not None:
            print(f"{prog}: warning: {foreign}", file=sys.stderr if warn is None else warn,
                  flush=True)
    d = model.n_features
    dropped = 0
    if data.n_features > d:
        trimmed, dropped = drop_unknown_features(data, d)
        if dropped:
            print(f"{prog}: warning: {spec} has {data.n_features:,} features, the model "
                  f"{d:,}: {dropped:,} entries of the features beyond are ignored",
                  file=sys.stderr if warn is None else warn, flush=True)
        data_used: Any = trimmed
    else:
        data_used = data.with_n_features(d)
    if model.model == "mlp":
        m = predict(data_used, model.w, model.spec)
    else:
        m = margins(model.w, data_used, threads)
    scored = time.perf_counter()
    if not np.isfinite(m).all():
        raise DataError(f"{spec}: a margin overflowed (feature values too large for the model)")
    labels = model.labels_from_margins(m)
    # Against a classifier's classes the parsed float32 labels count as written (0.1, not
    # the float32 nearest to it, which no class equals).
    y_user = data.labels if model.classes is None else as_written(data.labels)
    y_internal, known = model.encode_labels(y_user)
    note = ""
    report: dict[str, Any] | None = None
    missing = np.isnan(y_user)
    if missing.all():
        note = "the data has no labels: no metrics"
    elif missing.any():
        note = f"{int(missing.sum()):,} of {missing.shape[0]:,} rows have no label: no metrics"
    elif model.classes is not None and data.label_note is not None:
        note = f"{data.label_note}, so the labels cannot be told apart as written: no metrics"
    elif not known.all():
        unknown = np.unique(y_user[~known])
        shown = ", ".join(f"{x:g}" for x in unknown[:5]) + (", ..." if unknown.size > 5 else "")
        note = (f"{int((~known).sum()):,} of {known.shape[0]:,} labels are not among the "
                f"model's classes {list(model.classes or [])} ({shown}): no metrics")
    elif data.n_rows:
        report = quality.report(model.task, model.loss, model.classes, m, y_user, labels,
                                y_internal)
    return Scored(model=model, margins=m, labels=labels, metrics=report,
                  dropped_entries=dropped, data_features=data.n_features, note=note,
                  load_seconds=loaded - started, score_seconds=scored - loaded)


def format_columns(table: npt.ArrayLike, digits: int) -> bytes:
    """Rows of numbers as text lines (compiled; integral values written as integers)."""
    t = np.asarray(table, dtype=np.float64)
    if t.ndim == 1:
        t = t[:, None]
    t = np.ascontiguousarray(t)
    out = np.empty(max(1, t.size) * MAX_VALUE_BYTES + t.shape[0], dtype=np.uint8)
    n = format_table(t, digits, out)
    return out[:n].tobytes()


def prediction_chunks(scored: Scored, output: str,
                      rows_per_chunk: int = CHUNK_ROWS) -> Iterator[bytes]:
    """The predictions file in pieces of ``rows_per_chunk`` lines (bounded memory): a label
    per line (``label``), the margin(s) (``raw``: K space-separated columns for multiclass),
    or the positive-class probability (``proba``; K columns, in ``classes`` order, for
    multiclass)."""
    model = scored.model
    if output == "raw":
        table, digits = scored.margins, SCORE_DIGITS
    elif output == "proba":
        proba = model.proba_from_margins(scored.margins)
        table, digits = (proba[:, 1] if model.task == "binary" else proba), SCORE_DIGITS
    else:
        # Class labels exactly as stored; a regression's predictions are scores.
        digits = LABEL_DIGITS if model.is_classifier else SCORE_DIGITS
        table = scored.labels.astype(np.float64)
    for start in range(0, table.shape[0], rows_per_chunk):
        yield format_columns(table[start:start + rows_per_chunk], digits)


def _fmt(value: Any) -> str:
    return number(value) if value is None or isinstance(value, float) else str(value)


def summary_lines(scored: Scored, full: bool) -> list[str]:
    """What predict prints: rows and timing, then accuracy and loss (or all metrics)."""
    head = (f"scored {scored.margins.shape[0]:,} rows in {scored.score_seconds:.3f}s "
            f"(loaded in {scored.load_seconds:.2f}s)")
    lines = [head]
    if scored.note:
        lines.append(scored.note)
    if scored.metrics is not None:
        keys: tuple[str, ...]
        if full:
            keys = _REGRESSION_KEYS if scored.model.task == "regression" else _CLASSIFICATION_KEYS
        else:
            keys = ("rmse", "loss") if scored.model.task == "regression" else _SUMMARY_KEYS
        lines.append("  ".join(f"{k} {_fmt(scored.metrics.get(k))}" for k in keys))
    return lines


def predict_command(model_path: str, data: str, *, out: str | None = None,
                    output: str = "label", full_metrics: bool = False,
                    threads: int | None = None, zero_based: bool | None = None,
                    stdout: TextIO | None = None, stderr: TextIO | None = None,
                    as_json: bool = False, level: int = NORMAL,
                    any_feature_space: bool = False) -> Scored:
    """`hogwild predict`: predictions to ``out`` (written atomically) or to stdout; the
    summary goes to stdout when the predictions go to a file, else to stderr. ``as_json``
    (with ``out``): the summary as one JSON object on stdout instead. ``level`` QUIET: the
    metrics line alone (no warnings), else every line. ``any_feature_space``: see
    score_file."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}")
    if out:
        # Before the model is loaded and every row scored, not after.
        artifacts.check_out_file(out)
    model = SavedModel.load(model_path)
    if output == "proba" and (model.loss != "logistic" or not model.is_classifier):
        raise ModelError(f"--proba needs a model trained with the logistic loss; this one "
                         f"uses {model.loss} ({model.task})")
    scored = score_file(model, data, threads=threads, zero_based=zero_based,
                        warn=stderr if level > QUIET else io.StringIO(),
                        any_feature_space=any_feature_space)
    if out:
        with artifacts.writing(out), atomic.atomic_open(Path(out)) as handle:
            for chunk in prediction_chunks(scored, output):
                handle.write(chunk)
        report_to = stdout
    else:
        stdout.flush()
        buffer = getattr(stdout, "buffer", None)
        for chunk in prediction_chunks(scored, output):
            if buffer is not None:
                buffer.write(chunk)
            else:
                stdout.write(chunk.decode("ascii"))
        if buffer is not None:
            buffer.flush()
        report_to = stderr
    if as_json and out:
        doc = {"model": str(model_path), "data": data, "task": model.task, "predictions": out,
               "rows": int(scored.margins.shape[0]), "output": output,
               "dropped_entries": scored.dropped_entries, **(scored.metrics or {})}
        if scored.note:
            doc["note"] = scored.note
        print(atomic.dumps(doc), file=stdout, flush=True)
        return scored
    lines = summary_lines(scored, full_metrics)
    if out:
        lines.insert(1, f"predictions in {out}")
    if level <= QUIET:  # the result: the metrics line, or why there is none
        lines = lines[-1:]
    for line in lines:
        print(line, file=report_to, flush=True)
    return scored


def eval_command(model_path: str, data: str, *, as_json: bool = False,
                 threads: int | None = None, zero_based: bool | None = None,
                 stdout: TextIO | None = None, stderr: TextIO | None = None,
                 level: int = NORMAL, any_feature_space: bool = False) -> Scored:
    """`hogwild eval`: every metric of the model on a labelled data file (DataError when the
    labels do not fit the model). ``level`` QUIET: the metrics line alone (no warnings).
    ``any_feature_space``: see score_file."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    model = SavedModel.load(model_path)
    scored = score_file(model, data, threads=threads, zero_based=zero_based,
                        warn=stderr if level > QUIET else io.StringIO(), prog="hogwild eval",
                        any_feature_space=any_feature_space)
    if scored.metrics is None:
        # Zero rows have no labels either: say which it is.
        rows = scored.margins.shape[0]
        raise DataError(f"{data}: {scored.note if rows else 'no rows to evaluate'}")
    if as_json:
        doc = {"model": str(model_path), "data": data, "task": model.task, **scored.metrics}
        print(json.dumps(doc, sort_keys=True), file=stdout)
    else:
        lines = summary_lines(scored, True)
        for line in lines[-1:] if level <= QUIET else lines:
            print(line, file=stdout)
    return scored
