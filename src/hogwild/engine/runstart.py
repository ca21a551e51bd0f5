"""What a run starts from: its data in three splits, the model spec, the warm start's weights."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.base.text import number
from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.featurespace import check_test_space
from hogwild.data.diagnose.memory import PER_ID, ids_blamed
from hogwild.data.sources import TABLE_SCHEMES, default_test_source, load_source_hashed
from hogwild.data.transform.classweights import (
    class_counts,
    class_weights,
    row_weights,
    untrained_classes,
)
from hogwild.data.transform.labels import MULTICLASS, LabelMap, check_class_labels
from hogwild.data.transform.reorder import frequency_order, renumber, to_internal
from hogwild.data.transform.split import split_shuffled
from hogwild.engine.job import check_feature_memory, feature_memory
from hogwild.errors import ConfigError, DataError, ModelError
from hogwild.model.evaluation import is_finite, predict, scores
from hogwild.model.losses import get_loss
from hogwild.model.saved import SavedModel
from hogwild.model.spec import ModelSpec

log = logging.getLogger("hogwild.train")

# The labels of a data set already in -1/+1 (what Splits holds unless told otherwise).
PLUS_MINUS_ONE = LabelMap("binary", (-1.0, 1.0))


@dataclass(frozen=True)
class Splits:
    """The three parts of a run's data, all with the same feature count."""

    train: CSRData
    val: CSRData
    test: CSRData
    # new_id_of_old: the sets above are renumbered by descending document frequency in the
    # training rows (hot weights share cache lines; threads can buffer the hottest ones).
    # Saved models are mapped back to the ids of the input files.
    feature_order: np.ndarray
    # The feature-hashing parameters of a csv: training source (stored in model.json).
    hashing: dict[str, Any] | None = None
    # The user's labels and the targets the sets above hold (-1/+1, class indices or values).
    labels: LabelMap = PLUS_MINUS_ONE
    # The saved model of the initial_model setting (warm start), checked against the data's
    # feature space as it was loaded; None without one.
    initial: SavedModel | None = None


def load_splits(settings: Settings) -> Splits:
    """Load data (and test data, or split it off), map the labels to training targets, widen
    to one feature count, split validation.

    The data is loaded already shuffled (``shuffle_order(n, seed)``: text files are placed so
    while they are parsed), so the three sets are views of one set of arrays, and the
    renumbering rewrites those arrays in place: the job holds one copy of the data."""
    initial = initial_model(settings)
    fitted: Mapping[str, Any] | None = None
    if initial is not None:
        # The model's feature space, not one fitted anew on this data: its width, and a csv:
        # source hashed with the model's own parameters.
        fitted = _warm_feature_space(settings, initial)
    data, hashing = load_source_hashed(settings.data, n_features=settings.n_features,
                                       zero_based=settings.zero_based, cache=settings.data_cache,
                                       shuffle_seed=settings.seed, hashing=fitted)
    if initial is not None:
        if data.n_features > initial.n_features:
            raise ConfigError("initial_model", f"{settings.initial_model} has "
                              f"{initial.n_features} features, data {settings.data!r} "
                              f"{data.n_features}: not the model's feature space")
        data = data.with_n_features(initial.n_features)
        settings = settings.replace(n_features=initial.n_features)  # the test set's too
    test_spec = settings.test_data or default_test_source(settings.data)
    if test_spec:
        # A csv: test set is hashed with the training set's parameters.
        test, _ = load_source_hashed(test_spec, n_features=settings.n_features,
                                     zero_based=settings.zero_based, cache=settings.data_cache,
                                     hashing=hashing)
    else:
        test = None
    classifier = get_loss(settings.loss).is_classifier
    labels = LabelMap.fit(data.labels, classifier=classifier, source=settings.data,
                          label_note=data.label_note)
    if classifier and test is not None:
        check_class_labels(test.label_note)
    width = max(data.n_features, 0 if test is None else test.n_features)
    vectors = labels.n_classes if labels.task == MULTICLASS else 1  # one-vs-rest: one each
    check_feature_memory(settings, width, vectors)
    with ids_blamed(settings.data, width, settings.zero_based,
                    feature_memory(settings, width, vectors), PER_ID,
                    data.nnz + (0 if test is None else test.nnz)):
        splits = _split_and_renumber(settings, data, test, test_spec, labels, hashing)
    return splits if initial is None else replace(splits, initial=initial)


def _split_and_renumber(settings: Settings, data: CSRData, test: CSRData | None,
                        test_spec: str | None, labels: LabelMap,
                        hashing: Any) -> Splits:
    """The rest of load_splits: encode, widen, split, renumber by frequency."""
    data = replace(data, labels=labels.encode(data.labels, settings.data))
    if test is not None:
        test = replace(test, labels=labels.encode(test.labels, str(test_spec)))
    if test is not None and test.n_features != data.n_features:
        if settings.n_features is not None:
            raise DataError(f"test data has {test.n_features} features, training data "
                            f"{data.n_features}")
        if test.n_features > data.n_features:
            # A test file with higher feature ids than any training row may come from another
            # feature space (another vocabulary or hashing); its extra features get weight 0.
            log.warning("test data %s has %d features but training data %s has %d: the extra "
                        "features get weight 0 (is the test file from the same feature space?)",
                        test_spec, test.n_features, settings.data, data.n_features)
        width = max(test.n_features, data.n_features)
        data, test = data.with_n_features(width), test.with_n_features(width)
    test_fraction = settings.test_fraction if test is None else 0.0
    split = {"val_fraction": settings.val_fraction, "test_fraction": test_fraction}
    train, _, _ = split_shuffled(data, **split)
    if train.n_rows == 0:
        raise DataError(f"no training rows left in {settings.data!r} after the split")
    note = untrained_classes(labels.classes, train.labels, data.labels)
    if note is not None:
        log.warning("%s: %s", settings.data, note)
    per_class = class_weights(settings.class_weight, labels.classes,
                              None if labels.classes is None
                              else class_counts(train.labels, labels.n_classes))
    if per_class is not None:
        # Every set carries them (slices of one set of arrays); training reads the train set's.
        data = data.with_weights(row_weights(data.labels, per_class, data.weights))
    order = frequency_order(train)
    # Freshly loaded arrays that nothing else holds: renumber them where they are.
    data = renumber(data, order, in_place=True)
    train, val, split_test = split_shuffled(data, **split)
    if test is not None:
        check_test_space(test, order, str(test_spec))  # in the file's own ids, before renumbering
    test = split_test if test is None else renumber(test, order, in_place=True)
    if test.n_rows == 0:
        raise DataError("the test set is empty: give test_data or a positive test_fraction")
    return Splits(train=train, val=val, test=test, feature_order=order, hashing=hashing,
                  labels=labels)


def initial_model(settings: Settings) -> SavedModel | None:
    """The saved model the ``initial_model`` setting names (None when empty); ConfigError
    naming the setting when there is no readable model there."""
    if not settings.initial_model:
        return None
    try:
        return SavedModel.load(settings.initial_model)
    except ModelError as exc:
        raise ConfigError("initial_model", str(exc)) from None


def _warm_feature_space(settings: Settings, initial: SavedModel) -> Mapping[str, Any] | None:
    """The hashing parameters that put a csv: source in ``initial``'s feature space (None
    for other sources); ConfigError naming the mismatch when the data cannot be in that
    space (another source kind, feature count or id base)."""
    where = settings.initial_model
    csv = settings.data.strip().partition(":")[0] in TABLE_SCHEMES
    if initial.hashing is not None and not csv:
        raise ConfigError("initial_model", f"{where} was trained on mapped table columns "
                          f"(a csv:, parquet: or arrow: source); data {settings.data!r} is "
                          "not one")
    if initial.hashing is None and csv:
        raise ConfigError("initial_model", f"{where} was not trained on a table source, so "
                          f"its features are not the columns of {settings.data!r}")
    if settings.n_features is not None and settings.n_features != initial.n_features:
        raise ConfigError("initial_model", f"{where} has {initial.n_features} features, "
                          f"setting n_features is {settings.n_features}")
    trained = initial.meta.get("settings")
    if initial.hashing is None and isinstance(trained, dict) and isinstance(
            trained.get("zero_based"), bool) and trained["zero_based"] != settings.zero_based:
        # Ids read with another base would put every weight on the next feature.
        raise ConfigError("initial_model", f"{where} was trained with zero_based "
                          f"{str(trained['zero_based']).lower()}, this run has "
                          f"{str(settings.zero_based).lower()}")
    return initial.hashing


def warm_start_weights(settings: Settings, splits: Splits, spec: ModelSpec) -> np.ndarray:
    """The initial model's weights in the training layout of ``splits`` (features renumbered
    by frequency): ``(dim,)``, or ``(K, d + 1)`` one-vs-rest. ConfigError naming the first
    thing the model and this run do not share (kind, layers, loss, task, classes, width)."""
    model = splits.initial
    if model is None:
        raise ValueError("no initial model")
    where = settings.initial_model

    def refuse(what: str, theirs: object, ours: object) -> ConfigError:
        return ConfigError("initial_model", f"{where} has {what} {theirs}, this run "
                           f"{ours}: not the same model")

    if model.model != spec.kind:
        raise refuse("model kind", model.model, spec.kind)
    if spec.is_mlp:
        theirs = model.spec
        if theirs.hidden != spec.hidden:
            raise refuse("hidden layers", list(theirs.hidden), list(spec.hidden))
        if theirs.binary_features != spec.binary_features:
            raise refuse("binary_features", str(theirs.binary_features).lower(),
                         str(spec.binary_features).lower())
    if model.loss != settings.loss:
        raise refuse("loss", model.loss, settings.loss)
    if model.task != splits.labels.task:
        raise refuse("task", model.task, f"{splits.labels.task} (from the data's labels)")
    ours = splits.labels.json_classes()
    if model.classes is not None and list(model.classes) != ours:
        raise refuse("classes", list(model.classes), f"{ours} (the data's labels)")
    if model.n_features != spec.n_features:
        raise refuse("feature count", model.n_features, spec.n_features)
    order = splits.feature_order
    if spec.is_mlp:
        w = _mlp_to_internal(spec, model.w, order)
    elif model.w.ndim == 2:
        w = np.stack([to_internal(row, order) for row in model.w])
    else:
        w = to_internal(model.w, order)
    check_initial_weights(settings, splits, w, spec)
    return w


# How far from 0 a model's predictions on the run's own rows may start (for the squared loss,
# this many times the largest |target|). A model trained here moves a margin by at most
# learning_rate x |x|^2 per step and ends with margins of a few units (hinge: past 1 a
# row no longer moves it; logistic: its loss is 0 in float64 beyond 37); a million is a
# model no training makes, and its losses print as million-digit numbers while every step
# of training is lost in its rounding (a weight of 1e300 keeps 1e284 as its smallest step).
MAX_INITIAL_MARGIN = 1e6


def check_initial_weights(settings: Settings, splits: Splits, w: np.ndarray,
                          spec: ModelSpec) -> None:
    """ConfigError naming the initial model when a weight is not finite, when a classifier's
    weight is beyond MAX_INITIAL_MARGIN, or when its margins on the training, validation or
    test rows are (for the squared loss: beyond that many times the largest |target|)."""
    where = settings.initial_model
    loss = get_loss(settings.loss)
    if not is_finite(w):
        raise ConfigError("initial_model", f"{where} holds a weight that is not finite")
    scale = 1.0
    if not loss.is_classifier and splits.train.n_rows:
        scale = max(1.0, float(np.abs(splits.train.labels).max()))
    limit = MAX_INITIAL_MARGIN * scale
    largest = float(np.abs(w).max(initial=0.0))
    if loss.is_classifier and largest > limit:
        raise ConfigError("initial_model", f"{where} has a weight of {number(largest)}, "
                          f"beyond {limit:g}: not a trained {settings.loss} model's (its "
                          "margins stay within a few units); a damaged or edited file?")
    for name, rows in (("training", splits.train), ("validation", splits.val),
                       ("test", splits.test)):
        if not rows.n_rows:
            continue
        margins = scores(rows, w) if w.ndim == 2 else predict(rows, w, spec)
        worst = float(np.max(np.abs(margins)))
        if not worst <= limit:  # NaN too
            raise ConfigError("initial_model", f"{where} predicts {number(worst)} on a "
                              f"{name} row, beyond {limit:g}"
                              f"{'' if loss.is_classifier else ' x the largest |target|'}: "
                              f"not a trained {settings.loss} model's; a damaged or edited "
                              "file?")


def _mlp_to_internal(spec: ModelSpec, w: np.ndarray, new_id_of_old: np.ndarray) -> np.ndarray:
    """The inverse of ``spec.restore``: an MLP's rows over the files' ids, renumbered."""
    out = np.array(w, dtype=np.float64)
    d, width = spec.n_features, spec.row_width
    rows = out[: d * width].reshape(d, width)
    rows[np.asarray(new_id_of_old)] = np.asarray(w[: d * width]).reshape(d, width)
    return out


def initial_model_record(settings: Settings, model: SavedModel) -> dict[str, Any]:
    """What metrics.json keeps about the model a run started from."""
    metrics = model.meta.get("metrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    return {"path": str(Path(settings.initial_model).expanduser().resolve()),
            "created": model.meta.get("created"), "epochs": metrics.get("epochs"),
            "test_loss": metrics.get("test_loss")}


def model_spec(settings: Settings, n_features: int) -> ModelSpec:
    """The model the settings ask for over ``n_features`` features; DataError if it cannot
    be built (e.g. an MLP too large to index)."""
    try:
        return ModelSpec(settings.model, n_features, settings.hidden, settings.binary_features)
    except ValueError as exc:
        raise DataError(str(exc)) from None
