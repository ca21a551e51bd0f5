"""The saved-model format (version 2): a frozen SavedModel written as model.npz + model.json.

``model.npz`` holds ``w`` (float64; ``(d + 1,)`` for binary classification and regression,
``(K, d + 1)`` for one-vs-rest multiclass, the bias last in every row) and any further arrays
of other model kinds. ``model.json`` holds the metadata: the format name and version, the
model kind, loss, task, the user's class labels, feature count, bias flag, optional hashing
parameters of a ``csv:`` source, and whatever else the writer adds (metrics, settings). The
layout is specified in MODEL_FORMAT.md; this module is its only reader and writer.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild import __version__
from hogwild.base.atomic import atomic_open, atomic_write_text, dumps
from hogwild.data.transform.labelcheck import float32_as_written
from hogwild.errors import ModelError, ModelFormatError
from hogwild.model.files import MODEL_FILE, MODEL_META_FILE
from hogwild.model.losses import LOSS_NAMES
from hogwild.model.spec import ModelSpec

FORMAT_NAME = "hogwild-model"
FORMAT_VERSION = 2
TASKS = ("binary", "multiclass", "regression")
MODEL_KINDS = ("linear", "mlp")
MULTICLASS_SCHEMES = ("ovr",)

# Keys SavedModel owns in model.json; everything else there is kept in ``meta`` as it is.
_OWN_KEYS = frozenset({"format", "format_version", "model", "task", "classes", "multiclass",
                       "hashing", "loss", "n_features", "fit_bias", "bias_index", "hidden",
                       "binary_features"})

Label = int | float
F64 = npt.NDArray[np.float64]


def label_value(value: Any) -> Label:
    """A label as a JSON number: an int when it is integral (so ``1.0`` is written ``1``)."""
    x = float(value)
    if not math.isfinite(x):
        raise ModelError(f"class label {value!r} is not a finite number")
    if x.is_integer() and abs(x) < 2.0**53:
        return int(x)
    if float(np.float32(x)) == x:
        # A parsed (float32) label, as models before the classes were kept as written saved
        # it: 0.10000000149011612 stands for the 0.1 the data said.
        return float32_as_written(x)
    return x


def ovr_proba(margins: npt.ArrayLike) -> F64:
    """Logistic probabilities from margins: ``(n,)`` -> ``(n, 2)`` (negative, positive);
    ``(n, K)`` one-vs-rest -> the K sigmoids normalised to sum to 1."""
    m = np.asarray(margins, dtype=np.float64)
    # 1 / (1 + exp(-m)) without overflow warnings: exp of a non-positive argument only.
    e = np.exp(-np.abs(m))
    pos = np.where(m >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))
    if m.ndim == 1:
        return np.column_stack([1.0 - pos, pos])
    total = pos.sum(axis=1, keepdims=True)
    out: F64 = pos / np.where(total > 0.0, total, 1.0)
    return out


def default_task(loss: str) -> tuple[str, tuple[Label, ...] | None]:
    """``(task, classes)`` of a model trained on +-1 labels: regression for the squared loss,
    else binary with classes ``(-1, 1)``."""
    return ("regression", None) if loss == "squared" else ("binary", (-1, 1))


@dataclass(frozen=True, eq=False)
class SavedModel:
    """A trained model as it is saved: weights plus everything needed to use them.

    ``w`` is copied into a read-only float64 array. ``classes`` are the user's label values,
    ascending: binary ``(negative, positive)`` (internally -1/+1), multiclass the K labels
    (row k of ``w`` scores ``classes[k]`` against the rest), regression ``None``. ``meta`` is
    any further metadata (metrics, settings, ...); ``arrays`` any further named arrays.

    ``model="mlp"``: the sparse-input MLP (hogwild.model.spec). Its parameters are the arrays
    ``W1, b1, ..., W(L+1), b(L+1)`` and ``wide`` (saved without ``w``; a model without
    ``wide`` has zero wide weights); ``w`` is then their flat vector,
    built from the arrays (a ``w`` passed in must equal it, or be empty), and
    ``binary_features`` says whether the first layer ignores the stored values.
    """

    w: F64
    loss: str
    task: str = "binary"
    classes: tuple[Label, ...] | None = (-1, 1)
    fit_bias: bool = True
    multiclass: str | None = None
    hashing: Mapping[str, Any] | None = None
    model: str = "linear"
    meta: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)
    binary_features: bool = False

    def __post_init__(self) -> None:
        w = (self._mlp_weights() if self.model == "mlp"
             else np.array(self.w, dtype=np.float64, order="C", copy=True))
        w.setflags(write=False)
        object.__setattr__(self, "w", w)
        if self.model not in MODEL_KINDS:
            raise ModelError(f"model kind {self.model!r} is not supported by hogwild "
                             f"{__version__} (it reads: {', '.join(MODEL_KINDS)})")
        if self.loss not in LOSS_NAMES:
            raise ModelError(f"unknown loss {self.loss!r} (expected one of "
                             f"{', '.join(LOSS_NAMES)})")
        if self.task not in TASKS:
            raise ModelError(f"unknown task {self.task!r} (expected one of {', '.join(TASKS)})")
        if w.ndim not in (1, 2) or w.shape[-1] < 1:
            raise ModelError(f"weights must have shape (d + 1,) or (K, d + 1), got {w.shape}")
        if not np.isfinite(w).all():
            raise ModelError("the weights hold NaN or infinite values")
        classes = None if self.classes is None else tuple(label_value(c) for c in self.classes)
        object.__setattr__(self, "classes", classes)
        if classes is not None and any(b <= a for a, b in itertools.pairwise(classes)):
            raise ModelError(f"classes must be distinct and ascending, got {list(classes)}")
        multiclass = self.multiclass
        if self.task == "regression":
            if classes is not None:
                raise ModelError("a regression model has no classes (classes must be null)")
        elif classes is None:
            raise ModelError(f"a {self.task} model needs its classes")
        if self.task == "multiclass":
            multiclass = multiclass or "ovr"
            if multiclass not in MULTICLASS_SCHEMES:
                raise ModelError(f"unknown multiclass scheme {multiclass!r} (expected ovr)")
            assert classes is not None
            if w.ndim != 2 or w.shape[0] != len(classes) or len(classes) < 2:
                raise ModelError(f"a multiclass model over {len(classes)} classes needs "
                                 f"weights of shape (K={len(classes)}, d + 1), got {w.shape}")
        else:
            if multiclass is not None:
                raise ModelError(f"multiclass={multiclass!r} given for a {self.task} model")
            if w.ndim != 1:
                raise ModelError(f"a {self.task} model needs weights of shape (d + 1,), "
                                 f"got {w.shape}")
            if classes is not None and len(classes) != 2:
                raise ModelError(f"a binary model needs exactly 2 classes, got {list(classes)}")
        object.__setattr__(self, "multiclass", multiclass)
        object.__setattr__(self, "fit_bias", bool(self.fit_bias))
        object.__setattr__(self, "hashing", None if self.hashing is None else dict(self.hashing))
        object.__setattr__(self, "meta", dict(self.meta))
        extra = {}
        for name, arr in self.arrays.items():
            if name == "w" or not name.isidentifier():
                raise ModelError(f"bad extra array name {name!r}")
            extra[name] = np.asarray(arr)
        object.__setattr__(self, "arrays", extra)

    def _mlp_weights(self) -> F64:
        try:
            spec = self.spec
            w = spec.flatten(self.arrays)
        except (KeyError, ValueError) as exc:
            raise ModelError(f"the MLP's arrays do not fit together: {exc}") from None
        given = np.asarray(self.w, dtype=np.float64)
        if given.size and not np.array_equal(given, w):
            raise ModelError("w does not match the MLP's arrays")
        return w

    # --- shape ---------------------------------------------------------------------------
    @property
    def spec(self) -> ModelSpec:
        """The model's kind and layout; an MLP's hidden sizes come from its arrays' shapes."""
        if self.model != "mlp":
            return ModelSpec.linear(self.n_features)
        shapes = [np.shape(self.arrays[f"W{k}"]) for k in range(1, len(self.arrays) // 2 + 1)
                  if f"W{k}" in self.arrays]
        if len(shapes) < 2 or any(len(x) != 2 for x in shapes):
            raise ModelError("an MLP needs the 2-D arrays W1, W2, ... (at least two layers)")
        try:
            return ModelSpec("mlp", int(shapes[0][0]), tuple(int(x[1]) for x in shapes[:-1]),
                             bool(self.binary_features))
        except ValueError as exc:
            raise ModelError(f"bad MLP arrays: {exc}") from None

    @property
    def n_features(self) -> int:
        """d: the number of input features (the weights per row of ``w`` before the bias,
        or the rows of an MLP's W1)."""
        if self.model == "mlp":
            return int(np.shape(self.arrays["W1"])[0])
        return int(self.w.shape[-1] - 1)

    @property
    def n_outputs(self) -> int:
        """1 for binary and regression models, K for a multiclass one."""
        return 1 if self.w.ndim == 1 else int(self.w.shape[0])

    @property
    def is_classifier(self) -> bool:
        """True for binary and multiclass models."""
        return self.task != "regression"

    @property
    def coef(self) -> F64:
        """The feature weights without the bias: ``(d,)`` or ``(K, d)`` (a read-only view)."""
        return self.w[..., :-1]

    @property
    def intercept(self) -> F64:
        """The bias: shape ``()`` or ``(K,)``."""
        return self.w[..., -1]

    # --- outputs -------------------------------------------------------------------------
    def labels_from_margins(self, margins: npt.ArrayLike) -> npt.NDArray[Any]:
        """The user's label for each row's margin(s): binary ``classes[1]`` when the margin is
        >= 0 (as in training's accuracy), multiclass the class of the largest margin;
        regression returns the margins themselves."""
        m = np.asarray(margins, dtype=np.float64)
        if self.classes is None:
            return m
        classes = np.asarray(self.classes)
        if self.task == "multiclass":
            if m.ndim != 2 or m.shape[1] != len(classes):
                raise ValueError(f"expected margins of shape (n, {len(classes)}), got {m.shape}")
            picked: npt.NDArray[Any] = (classes[np.argmax(m, axis=1)] if m.shape[0]
                                        else classes[:0])
            return picked
        chosen: npt.NDArray[Any] = np.where(m >= 0.0, classes[1], classes[0])
        return chosen

    def proba_from_margins(self, margins: npt.ArrayLike) -> F64:
        """Class probabilities ``(n, K)`` (K = 2 for a binary model, columns in ``classes``
        order) of a logistic model: the sigmoid of the margin; for one-vs-rest the K sigmoids
        normalised to sum to 1. ModelError for any other loss."""
        if self.loss != "logistic" or not self.is_classifier:
            raise ModelError(f"probabilities need a logistic classifier; this model is a "
                             f"{self.task} model with the {self.loss} loss")
        return ovr_proba(margins)

    def encode_labels(self, y: npt.ArrayLike) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """Labels in the user's space -> the training space (binary: -1/+1, multiclass: the
        class index, regression: unchanged) and a mask of the labels the model knows."""
        yv = np.asarray(y, dtype=np.float64).ravel()
        if self.classes is None:
            return yv.astype(np.float32), np.isfinite(yv)
        classes = np.asarray(self.classes, dtype=np.float64)
        pos = np.searchsorted(classes, yv)
        pos_c = np.minimum(pos, len(classes) - 1)
        known = classes[pos_c] == yv
        code = pos_c.astype(np.float32)
        if self.task == "binary":
            code = np.where(pos_c == 1, 1.0, -1.0).astype(np.float32)
        return code, known

    # --- files ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The model.json contents: ``meta`` plus the format's own keys (which win)."""
        d = self.n_features
        doc: dict[str, Any] = {key: value for key, value in self.meta.items()
                               if key not in _OWN_KEYS}
        doc.setdefault("hogwild_version", __version__)
        doc.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        doc.update({
            "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "model": self.model,
            "task": self.task, "classes": None if self.classes is None else list(self.classes),
            "multiclass": self.multiclass, "loss": self.loss, "n_features": d,
            "fit_bias": self.fit_bias, "bias_index": d,
        })
        if self.model == "mlp":
            del doc["bias_index"]
            doc.update({"hidden": list(self.spec.hidden),
                        "binary_features": bool(self.binary_features)})
        if self.hashing is not None:
            doc["hashing"] = dict(self.hashing)
        return doc

    def save(self, out_dir: str | Path) -> Path:
        """Write ``model.npz`` then ``model.json`` into ``out_dir``, each atomically; returns
        the directory."""
        out = Path(out_dir)
        named: dict[str, Any] = (dict(self.arrays) if self.model == "mlp"
                                 else {"w": self.w, **self.arrays})
        # Straight into the file: an in-memory archive and its bytes cost 16 bytes and more
        # per weight at the end of a run (numpy writes a large array in 16 MiB pieces).
        with atomic_open(out / MODEL_FILE) as handle:
            np.savez(handle, **named)
        atomic_write_text(out / MODEL_META_FILE, dumps(self.to_json(), indent=2) + "\n")
        return out

    @classmethod
    def load(cls, path: str | Path) -> SavedModel:
        """Read a model from a run directory or its ``model.npz`` / ``model.json`` file.

        ModelFormatError (one line naming both versions) for a file of another format
        version or without one; ModelError for a missing or unreadable model."""
        npz_path, json_path = model_paths(path)
        doc = _read_json(json_path)
        check_format(doc, json_path)
        arrays = _read_arrays(npz_path)
        if doc.get("model") == "mlp":
            return _load_mlp(doc, arrays, path, json_path)
        if "w" not in arrays:
            raise ModelError(f"{npz_path}: no weight array 'w' in the file")
        w = arrays.pop("w")
        if w.dtype != np.float64:
            raise ModelError(f"{npz_path}: weights must be float64, found {w.dtype}")
        declared = doc.get("n_features")
        if declared is not None and (not isinstance(declared, int)
                                     or declared != w.shape[-1] - 1):
            raise ModelError(f"{path}: model.json says n_features={declared!r} but the weights "
                             f"have shape {w.shape}")
        if not isinstance(doc.get("loss"), str):
            raise ModelError(f"{json_path}: no loss recorded")
        try:
            return cls(
                w=w, loss=doc["loss"], task=doc.get("task", ""),
                classes=_classes(doc.get("classes"), json_path),
                fit_bias=bool(doc.get("fit_bias", True)), multiclass=doc.get("multiclass"),
                hashing=doc.get("hashing"), model=doc.get("model", ""),
                meta={k: v for k, v in doc.items() if k not in _OWN_KEYS}, arrays=arrays)
        except ModelError as exc:
            raise ModelError(f"{path}: {exc}") from None


def _load_mlp(doc: Mapping[str, Any], arrays: dict[str, npt.NDArray[Any]], path: str | Path,
              json_path: Path) -> SavedModel:
    if not isinstance(doc.get("loss"), str):
        raise ModelError(f"{json_path}: no loss recorded")
    try:
        model = SavedModel(
            w=np.zeros(0), loss=doc["loss"], task=doc.get("task", ""),
            classes=_classes(doc.get("classes"), json_path),
            fit_bias=bool(doc.get("fit_bias", True)), multiclass=doc.get("multiclass"),
            hashing=doc.get("hashing"), model="mlp",
            meta={k: v for k, v in doc.items() if k not in _OWN_KEYS}, arrays=arrays,
            binary_features=bool(doc.get("binary_features", False)))
    except ModelError as exc:
        raise ModelError(f"{path}: {exc}") from None
    for key, have in (("n_features", model.n_features), ("hidden", list(model.spec.hidden))):
        if doc.get(key) is not None and doc.get(key) != have:
            raise ModelError(f"{path}: model.json says {key}={doc.get(key)!r} but the arrays "
                             f"give {have!r}")
    return model


def model_paths(path: str | Path) -> tuple[Path, Path]:
    """``(model.npz, model.json)`` for a run directory or either of the two files."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p / MODEL_FILE, p / MODEL_META_FILE
    if not p.exists():
        raise ModelError(f"no model at {p}: give a run directory or its model.npz / model.json")
    pair = (p, p.with_suffix(".json")) if p.suffix == ".npz" else (p.with_suffix(".npz"), p)
    # Every saved model is a .json and a .npz side by side: a lone file (metrics.json, a
    # data file) is not one, whatever it holds.
    if p.suffix not in (".npz", ".json") or not all(f.is_file() for f in pair):
        raise ModelError(f"{p} is not a model file: a saved model is a model.json with its "
                         f"model.npz beside it (give the run directory or one of the two)")
    return pair


def check_format(doc: Mapping[str, Any], where: str | Path) -> None:
    """ModelFormatError unless ``doc`` is model.json metadata of format version 2."""
    version = doc.get("format_version")
    if version is None:
        found = "1 (no format_version key)"
    elif isinstance(version, int) and not isinstance(version, bool):
        found = str(version)
    else:
        found = repr(version)
    if found != str(FORMAT_VERSION):
        raise ModelFormatError(
            f"{where}: model format {found} is not supported by hogwild {__version__}; it "
            f"reads format {FORMAT_VERSION} only (train the model again with this version)")
    if doc.get("format") != FORMAT_NAME:
        raise ModelFormatError(f"{where}: not a hogwild model (format is "
                               f"{doc.get('format')!r}, expected {FORMAT_NAME!r})")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"model metadata not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ModelError(f"{path}: expected a JSON object")
    return doc


def _read_arrays(path: Path) -> dict[str, npt.NDArray[Any]]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: np.array(archive[name]) for name in archive.files}
    except FileNotFoundError:
        raise ModelError(f"model weights not found: {path}") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None


def _classes(value: Any, where: Path) -> tuple[Label, ...] | None:
    if value is None:
        return None
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise ModelError(f"{where}: classes must be a list of numbers or null, got {value!r}")
    return tuple(label_value(v) for v in value)
