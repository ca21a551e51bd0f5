"""Class weights: the weight of each class from the class_weight setting, and the row weights
(CSRData.weights) they give a data set's rows."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hogwild.config import ConfigError
from hogwild.settings.rules import BALANCED, parse_class_weight

F32 = npt.NDArray[np.float32]


def class_weights(setting: str, classes: tuple[float, ...] | None,
                  counts: npt.ArrayLike | None) -> npt.NDArray[np.float64] | None:
    """The weight of each class (in ``classes`` order, the user's labels ascending) that the
    class_weight setting gives; None when it is empty. ``counts``: training rows of each
    class, needed by ``balanced`` (n_rows / (n_classes x count), scikit-learn's formula).
    ConfigError naming class_weight when a label is not one of the classes."""
    spec = parse_class_weight(setting)
    if spec is None:
        return None
    if not classes:
        raise ConfigError("class_weight", "weighs the classes of a classifier; this data has "
                                          "no classes")
    k = len(classes)
    if spec == BALANCED:
        if counts is None:
            raise ConfigError("class_weight", "balanced counts the training rows of each "
                                              "class, which are not known here (shipping "
                                              "local): give LABEL:WEIGHT pairs instead")
        n = np.asarray(counts, dtype=np.float64)
        # A class without training rows gets weight 1 (it has no row to weigh).
        out: npt.NDArray[np.float64] = np.where(n > 0, n.sum() / (k * np.maximum(n, 1)), 1.0)
        return out
    assert isinstance(spec, dict)
    out = np.ones(k, dtype=np.float64)
    for label, weight in spec.items():
        if label not in classes:
            known = ", ".join(f"{c:g}" for c in classes)
            raise ConfigError("class_weight", f"names label {label:g}, which is not a class "
                                              f"of the data (classes: {known})")
        out[classes.index(label)] = weight
    return out


def class_counts(targets: npt.ArrayLike, n_classes: int) -> npt.NDArray[np.int64]:
    """Rows of each class among training targets: -1/+1 (two classes) or class indices."""
    return np.bincount(target_class(targets, n_classes), minlength=n_classes)


def untrained_classes(classes: tuple[float, ...] | None, train_targets: npt.ArrayLike,
                      all_targets: npt.ArrayLike) -> str | None:
    """The line that names the classes of the data none of whose rows the split left for
    training (None: every class has a training row). Such a class is part of the model, but
    nothing teaches it: the model never predicts it, and its held-out rows count as errors."""
    if not classes:
        return None
    k = len(classes)
    return untrained_note(classes, class_counts(train_targets, k), class_counts(all_targets, k))


def untrained_note(classes: tuple[float, ...], trained: npt.ArrayLike,
                   rows: npt.ArrayLike) -> str | None:
    """:func:`untrained_classes` from counts: ``trained`` training rows and ``rows`` rows in
    all (or held out: only a class's rows outside training are counted) of each class."""
    trained = np.asarray(trained)
    missing = [i for i in range(len(classes)) if trained[i] == 0]
    if not missing:
        return None
    held = int(np.asarray(rows)[missing].sum())
    names = ", ".join(f"{classes[i]:g}" for i in missing)
    one = len(missing) == 1
    subject = f"class {names} has" if one else f"classes {names} have"
    if held == 1:
        where = "its one row is in the validation or test split"
        count = "that row counts as an error"
    else:
        where = (f"{'its' if one else 'their'} {held:,} rows are all in the validation and "
                 "test splits")
        count = "those rows count as errors"
    return (f"{subject} no training row: {where}, so the model never predicts "
            f"{'it' if one else 'them'} and {count} (more rows, another seed, or a "
            f"smaller val_fraction and test_fraction would give {'it' if one else 'them'} "
            "training rows)")


def target_class(targets: npt.ArrayLike, n_classes: int) -> npt.NDArray[np.int64]:
    """The class index of each training target: -1/+1 for two classes (+1 = the second),
    the index itself for more."""
    t = np.asarray(targets)
    if n_classes == 2:
        return (t > 0).astype(np.int64)
    return t.astype(np.int64)


def row_weights(targets: npt.ArrayLike, per_class: npt.ArrayLike,
                base: npt.ArrayLike | None = None) -> F32:
    """Each row's weight: its class's (``per_class`` by class index, for -1/+1 targets of
    two classes or class indices), times its own weight in ``base`` when given."""
    weights = np.asarray(per_class, dtype=np.float64)
    out = weights[target_class(targets, weights.shape[0])]
    if base is not None:
        out = out * np.asarray(base, dtype=np.float64)
    return out.astype(np.float32)


def run_class_weights(setting: str, classes: tuple[float, ...] | None,
                      train_targets: npt.ArrayLike | None) -> tuple[float, ...]:
    """A cluster run's class weights for its workers: those of labels -1 and +1 (two
    classes), or () when the setting is empty. ``train_targets``: the training rows' -1/+1
    targets (None where the coordinator does not hold them: shipping local)."""
    counts = None if train_targets is None or not classes else class_counts(train_targets,
                                                                              len(classes))
    per_class = class_weights(setting, classes, counts)
    return () if per_class is None else tuple(float(w) for w in per_class)
