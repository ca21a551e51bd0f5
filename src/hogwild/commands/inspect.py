"""`hogwild inspect`: a saved model's summary and its largest positive and negative weights."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from hogwild.base import atomic
from hogwild.data.hashing.crosses import tuple_buckets
from hogwild.data.transform.encodings import buckets_for, signed_buckets_for
from hogwild.errors import ModelError, UsageError
from hogwild.model.saved import SavedModel, model_paths

DEFAULT_TOP = 10
# Values named per hashed bucket before the rest are counted ("+3 more").
NAMED_PER_BUCKET = 3


def inspect_command(path: str, *, top: int = DEFAULT_TOP, as_json: bool = False,
                    out: TextIO | None = None) -> dict[str, Any]:
    """Print the summary of the model at ``path`` (a run directory, runs/latest, or its
    model.npz / model.json) and its ``top`` largest positive and negative weights, each named
    (hashed CSV columns by the values they stand for). UsageError for a path without a
    model; ModelError for a model that cannot be read. Returns the JSON document."""
    out = sys.stdout if out is None else out
    if top < 0:
        raise UsageError(f"--top must be at least 0, got {top}")
    model = SavedModel.load(_model_path(path))
    doc = describe_model(model, path, top)
    if as_json:
        print(atomic.dumps(doc), file=out)
    else:
        for line in summary_lines(doc):
            print(line, file=out)
    return doc


def _model_path(path: str) -> str:
    """``path`` if a model is there (as `predict --model` reads it); else UsageError naming
    the path, since a wrong path is a mistake on the command line."""
    try:
        npz, meta = model_paths(path)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    missing = [p.name for p in (meta, npz) if not p.is_file()]
    if missing:
        raise UsageError(f"no model in {Path(path).expanduser()}: {' and '.join(missing)} "
                         "not found (give a run directory, runs/latest, or a model.npz / "
                         "model.json)")
    return path


def describe_model(model: SavedModel, path: str, top: int) -> dict[str, Any]:
    """The summary and top weights of ``model`` as one JSON-ready document."""
    metrics = model.meta.get("metrics")
    trained = model.meta.get("settings")
    doc: dict[str, Any] = {
        "model": path, "kind": model.model, "task": model.task, "loss": model.loss,
        "classes": None if model.classes is None else list(model.classes),
        "n_features": model.n_features, "created": model.meta.get("created"),
        "hogwild_version": model.meta.get("hogwild_version"),
        "epochs": metrics.get("epochs") if isinstance(metrics, dict) else None,
        # The epoch of the weights saved (the best validated one, not always the last);
        # models written before the key existed: `train`'s best_epoch.
        "saved_epoch": (metrics.get("saved_epoch", metrics.get("best_epoch"))
                        if isinstance(metrics, dict) else None),
        "data": trained.get("data") if isinstance(trained, dict) else None,
        "top": top, "notes": [],
    }
    if model.model == "mlp":
        doc["layers"] = [{"name": name, "shape": list(np.shape(model.arrays[name]))}
                         for name in _layer_names(model.arrays)]
        doc["parameters"] = int(model.w.shape[0])
        doc["norm"] = float(np.linalg.norm(model.w))
        doc["nonzero"] = int(np.count_nonzero(model.w))
        doc["notes"].append("top weights: not shown for an MLP (a feature acts through its "
                            "embedding and the hidden layers, not through one weight)")
        return doc
    namer = FeatureNamer(model)
    doc["notes"].extend(namer.notes)
    rows = model.w if model.w.ndim == 2 else model.w[None, :]
    labels: Sequence[Any] = (list(model.classes or ()) if model.task == "multiclass"
                             else [None])
    parts = [_weights_part(row, label, namer, top) for row, label in zip(rows, labels)]
    if model.task == "multiclass":
        doc["per_class"] = parts
        doc["nonzero"] = sum(p["nonzero"] for p in parts)
    else:
        doc.update({key: value for key, value in parts[0].items() if key != "class"})
    return doc


def _layer_names(arrays: Mapping[str, Any]) -> list[str]:
    layers = sum(1 for name in arrays if name.startswith("W") and name[1:].isdigit())
    names = [f"{kind}{k}" for k in range(1, layers + 1) for kind in ("W", "b")]
    return [name for name in [*names, "wide"] if name in arrays]


def _weights_part(row: npt.NDArray[np.float64], label: Any, namer: FeatureNamer,
                  top: int) -> dict[str, Any]:
    """One weight vector's (bias last) counts, bias, norm and top weights."""
    coef = row[:-1]
    part: dict[str, Any] = {"class": label, "nonzero": int(np.count_nonzero(coef)),
                            "bias": float(row[-1]), "norm": float(np.linalg.norm(coef))}
    order = np.argsort(coef, kind="stable")
    positive = [int(i) for i in order[::-1][:top] if coef[i] > 0]
    negative = [int(i) for i in order[:top] if coef[i] < 0]
    part["positive"] = [namer.entry(i, float(coef[i])) for i in positive]
    part["negative"] = [namer.entry(i, float(coef[i])) for i in negative]
    return part


class FeatureNamer:
    """Names a weight's feature: the id as the training files wrote it (svmlight), or the
    CSV column and value it stands for (a ``csv:`` source), inverting the hashing with the
    values the model keeps (``top_values``) as Vowpal Wabbit's ``--invert_hash`` does."""

    def __init__(self, model: SavedModel) -> None:
        self.notes: list[str] = []
        trained = model.meta.get("settings")
        zero_based = isinstance(trained, dict) and bool(trained.get("zero_based", False))
        self.first_id = 0 if zero_based else 1
        self.columns: list[Mapping[str, Any]] = []
        self.seed = 0
        # Per hashed column: (values, their bucket per sub-block, their sign per sub-block).
        self._codes: dict[str, tuple[list[str], npt.NDArray[np.int64],
                                     npt.NDArray[np.float64]]] = {}
        hashing = model.hashing
        if hashing is None:
            return
        columns = hashing.get("columns")
        if not isinstance(columns, list):
            self.notes.append("the model's hashing parameters list no columns: features "
                              "are shown by index")
            return
        self.columns = sorted((c for c in columns if isinstance(c, Mapping)),
                              key=lambda c: int(c.get("offset", 0)))
        self.seed = int(hashing.get("seed", 0))
        old = [str(c.get("name")) for c in self.columns
               if c.get("kind") in ("hashed", "text", "cross") and "top_values" not in c]
        if old:
            self.notes.append(f"column(s) {', '.join(old)}: the model keeps no values of its "
                              "hashed columns (saved by an earlier hogwild), so their "
                              "features are shown by bucket only")

    def entry(self, index: int, weight: float) -> dict[str, Any]:
        """``{"feature", "name", "weight"}``: feature is the id in the training files (an
        svmlight model) or the weight's index (a csv: model)."""
        if not self.columns:
            feature = index + self.first_id
            return {"feature": feature, "name": f"feature {feature}", "weight": weight}
        return {"feature": index, "name": self._hashed_name(index), "weight": weight}

    def _hashed_name(self, index: int) -> str:
        column = self._column_of(index)
        if column is None:
            return f"index {index} (beyond the hashed columns)"
        name, kind = str(column["name"]), column["kind"]
        pos = index - int(column["offset"])
        if kind == "numeric":
            return name
        if kind == "onehot":
            values = column.get("values") or []
            return f"{name}={values[pos]}" if pos < len(values) else f"{name}[{pos}]"
        if kind == "sparse":
            return f"{name}[{pos}]"
        if kind == "cross":
            return self._cross_name(column, pos)
        buckets = int(column["buckets"])
        sub, bucket = divmod(pos, buckets)
        where = f"{name}[bucket {bucket}" + (f", hash {sub + 1}]" if int(column["k"]) > 1
                                             else "]")
        if "top_values" not in column:
            return where
        values, codes, signs = self._column_codes(column)
        hits = np.flatnonzero(codes[:, sub] == bucket) if len(values) else np.zeros(0, int)
        if hits.size == 0:
            return f"{where}: none of the {len(values)} most frequent values"
        sep = " " if kind == "text" else "="
        shown = [("-" if signs[i, sub] < 0 else "") + f"{name}{sep}{values[i]}"
                 for i in hits[:NAMED_PER_BUCKET].tolist()]
        more = f" +{hits.size - NAMED_PER_BUCKET} more" if hits.size > NAMED_PER_BUCKET else ""
        return " | ".join(shown) + more

    def _operand_name(self, column: str, value: str) -> str:
        """How one operand of a crossed value reads: ``col=value``, ``col word``, ``col``."""
        spec = next((c for c in self.columns if c.get("name") == column
                     or c.get("indices") == column), None)
        kind = None if spec is None else spec.get("kind")
        if kind == "numeric":
            return column
        if kind == "sparse":
            return f"{column}[{value}]"
        return f"{column}{' ' if kind == 'text' else '='}{value}"

    def _cross_name(self, column: Mapping[str, Any], bucket: int) -> str:
        """A cross's bucket by the crossed values that land in it (of those the model
        keeps), e.g. ``color=red * size=L``."""
        name = str(column["name"])
        where = f"{name}[bucket {bucket}]"
        names = [str(c) for c in column.get("columns") or []]
        if "top_values" not in column or not names:
            return where
        key = f"\x00cross:{name}"
        if key not in self._codes:
            tuples = [[str(v) for v in t] for t in column["top_values"]]
            codes, signs = tuple_buckets(names, tuples, int(column["buckets"]), self.seed)
            self._codes[key] = (["\x1f".join(t) for t in tuples], codes[:, None],
                                signs[:, None])
        joined, codes, signs = self._codes[key]
        hits = np.flatnonzero(codes[:, 0] == bucket)
        if hits.size == 0:
            return f"{where}: none of the {len(joined)} most frequent crossed values"
        shown = [("-" if signs[i, 0] < 0 else "") + " * ".join(
                     self._operand_name(c, v) for c, v in zip(names, joined[i].split("\x1f")))
                 for i in hits[:NAMED_PER_BUCKET].tolist()]
        more = f" +{hits.size - NAMED_PER_BUCKET} more" if hits.size > NAMED_PER_BUCKET else ""
        return " | ".join(shown) + more

    def _column_of(self, index: int) -> Mapping[str, Any] | None:
        for column in self.columns:
            start = int(column["offset"])
            if start <= index < start + int(column["width"]):
                return column
        return None

    def _column_codes(self, column: Mapping[str, Any]
                      ) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The kept values of a hashed column, hashed again as when it was fitted."""
        name = str(column["name"])
        if name not in self._codes:
            values = [str(v) for v in column.get("top_values") or []]
            k, buckets = int(column["k"]), int(column["buckets"])
            if column.get("signed"):
                codes, signs = signed_buckets_for(name, values, k, buckets, self.seed)
            else:
                codes = buckets_for(name, values, k, buckets, self.seed)
                signs = np.ones(codes.shape, dtype=np.float64)
            self._codes[name] = (values, codes, signs)
        return self._codes[name]


def _number(value: Any) -> Any:
    """An epoch count as a person reads it: 5, 2.75 (`run` counts fractions of epochs)."""
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return value


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The human-readable report of a :func:`describe_model` document."""
    classes = "" if doc["classes"] is None else f", classes {doc['classes']}"
    what = f"{doc['kind']}, {doc['task']}, {doc['loss']} loss{classes}"
    lines = [f"model: {doc['model']} ({what})"]
    trained = [f"{key} {doc[key]}" for key in ("epochs", "data", "created") if doc.get(key)]
    saved = doc.get("saved_epoch")
    if doc.get("epochs") and saved is not None and saved != doc["epochs"]:
        trained.insert(1, f"weights of epoch {_number(saved)} (the best validated)")
    if trained:
        lines.append("trained: " + ", ".join(trained))
    if doc["kind"] == "mlp":
        lines.append(f"features: {doc['n_features']:,}; parameters: {doc['parameters']:,} "
                     f"({doc['nonzero']:,} nonzero), norm {doc['norm']:.6g}")
        lines.append("layers: " + ", ".join(f"{layer['name']} {'x'.join(map(str, layer['shape']))}"
                                            for layer in doc["layers"]))
        lines.extend(f"note: {note}" for note in doc["notes"])
        return lines
    lines.append(f"features: {doc['n_features']:,} ({doc['nonzero']:,} nonzero weights)")
    lines.extend(f"note: {note}" for note in doc["notes"])
    for part in doc.get("per_class") or [doc]:
        head = "" if part.get("class") is None else f"class {part['class']}: "
        lines.append(f"{head}bias {part['bias']:.6g}, norm {part['norm']:.6g}")
        for sign in ("positive", "negative") if doc["top"] else ():
            entries = part[sign]
            if not entries:
                lines.append(f"  no {sign} weights")
                continue
            lines.append(f"  top {len(entries)} {sign} weights:")
            lines.extend(f"  {e['weight']:>+12.6g}  " + (
                e["name"] if e["name"] == f"feature {e['feature']}"
                else f"{e['name']}  (index {e['feature']})") for e in entries)
    return lines
