"""The user's labels and the training targets: two classes -> -1/+1, K classes -> 0..K-1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.data.transform.labelcheck import float32_as_written, refusal
from hogwild.errors import DataError

BINARY = "binary"
MULTICLASS = "multiclass"
REGRESSION = "regression"
TASKS = (BINARY, MULTICLASS, REGRESSION)

# Most classes a one-vs-rest model trains (one weight vector each); more is almost surely a
# real-valued target given to a classifier loss.
MAX_CLASSES = 1000

LabelArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class LabelMap:
    """How the labels of a data set map to what the kernels train on.

    ``binary``: the two label values (any two, e.g. -1/1, 0/1, 1/2) become -1 (the smaller)
    and +1. ``multiclass``: K sorted values become class indices 0..K-1, and one-vs-rest
    trains row k against the rest with targets +1 / -1. ``regression``: labels are real
    values, taken as they are. ``classes`` holds the user's own values, ascending (None for
    regression).
    """

    task: str
    classes: tuple[float, ...] | None = None

    @classmethod
    def fit(cls, labels: npt.ArrayLike, *, classifier: bool, source: str,
            label_note: str | None = None) -> LabelMap:
        """The map for training labels; DataError (naming ``source``) when a classifier gets a
        single class or more than MAX_CLASSES values, or labels the parser could not keep
        as written (``label_note``, see hogwild.data.transform.labelcheck)."""
        if not classifier:
            return cls(REGRESSION)
        check_class_labels(label_note)
        values = np.unique(np.asarray(labels))
        if values.shape[0] == 0:
            raise DataError(f"{source}: no rows, so no labels to learn")
        if values.shape[0] == 1:
            raise DataError(f"{source}: every training label is {_fmt(values[0])}; a classifier "
                            "needs at least two classes")
        if values.shape[0] > MAX_CLASSES:
            raise DataError(f"{source}: {values.shape[0]} distinct label values (e.g. "
                            f"{_fmt(values[0])}, {_fmt(values[1])}); a real-valued target needs "
                            "loss: squared")
        task = BINARY if values.shape[0] == 2 else MULTICLASS
        return cls(task, tuple(_as_written(v) for v in values))

    @property
    def n_classes(self) -> int:
        return 0 if self.classes is None else len(self.classes)

    def class_index(self, labels: npt.ArrayLike, source: str) -> npt.NDArray[np.int64]:
        """Index in ``classes`` of every label; DataError naming ``source`` and the labels the
        training data did not have."""
        assert self.classes is not None
        y = np.asarray(labels)
        known: npt.NDArray[np.floating[Any]] = np.asarray(self.classes, dtype=np.float64)
        narrow = known.astype(np.float32)
        if y.dtype == np.float32 and np.all(narrow[1:] > narrow[:-1]):
            # Parsed labels are float32 and the classes their shortest decimals (0.1, not
            # 0.10000000149011612): compared as the float32 values both stand for.
            known = narrow
        else:
            y = y.astype(np.float64)
        pos = np.minimum(np.searchsorted(known, y), known.shape[0] - 1)
        bad = known[pos] != y
        if np.any(bad):
            unknown = np.unique(y[bad])
            shown = ", ".join(_fmt(v) for v in unknown[:5]) + (", ..." if unknown.shape[0] > 5
                                                               else "")
            raise DataError(f"{source}: label(s) {shown} not among the training labels "
                            f"{{{', '.join(_fmt(v) for v in known)}}}")
        out: npt.NDArray[np.int64] = pos.astype(np.int64)
        return out

    def encode(self, labels: npt.ArrayLike, source: str) -> LabelArray:
        """The training targets of ``labels``: -1/+1 (binary), class index (multiclass) or the
        labels themselves (regression), as float32."""
        if self.task == REGRESSION:
            return np.asarray(labels, dtype=np.float32)
        index = self.class_index(labels, source)
        if self.task == BINARY:
            return np.where(index == 1, np.float32(1.0), np.float32(-1.0)).astype(np.float32)
        return index.astype(np.float32)

    def decode(self, targets: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The user's labels of encoded targets (a +-1 sign for binary, an index for
        multiclass); regression values pass through."""
        t = np.asarray(targets, dtype=np.float64)
        if self.task == REGRESSION:
            return t
        assert self.classes is not None
        known = np.asarray(self.classes, dtype=np.float64)
        if self.task == BINARY:
            signs: npt.NDArray[np.float64] = np.where(t >= 0.0, known[1], known[0])
            return signs
        picked: npt.NDArray[np.float64] = known[t.astype(np.int64)]
        return picked

    def json_classes(self) -> list[int | float] | None:
        """``classes`` for model.json: integers where the value is whole, else floats."""
        if self.classes is None:
            return None
        return [int(v) if float(v).is_integer() else float(v) for v in self.classes]


def check_class_labels(label_note: str | None) -> None:
    """DataError when the labels of a classifier's data did not survive float32 as written."""
    if label_note is not None:
        raise DataError(refusal(label_note))


def one_vs_rest(index_targets: LabelArray, k: int) -> LabelArray:
    """+1 where the class index is ``k``, -1 elsewhere (float32)."""
    return np.where(index_targets == np.float32(k), np.float32(1.0), np.float32(-1.0)).astype(
        np.float32)


# Up to this many distinct label values are listed by their most common one; more are given
# as a range (a real-valued target, or many classes).
SHOWN_VALUES = 20


def label_summary(values: npt.ArrayLike, counts: npt.ArrayLike) -> str:
    """Labels in a few words, from their distinct ``values`` (ascending) and the rows of each
    (``counts``): the positive share of two values (the larger one is the positive class, as
    in :meth:`LabelMap.fit`), the most common of a few, else their range."""
    vals = np.asarray(values, dtype=np.float64)
    cnts = np.asarray(counts, dtype=np.int64)
    total = int(cnts.sum())
    if total == 0:
        return "no labels"
    if vals.shape[0] == 1:
        return f"every label {_fmt(vals[0])}"
    if vals.shape[0] == 2:
        return f"positive share {cnts[1] / total:.3f}"
    if vals.shape[0] <= SHOWN_VALUES:
        top = int(np.argmax(cnts))
        return (f"{vals.shape[0]} label values, the most common {_fmt(vals[top])} "
                f"(share {cnts[top] / total:.3f})")
    return f"labels from {vals[0]:.6g} to {vals[-1]:.6g} ({vals.shape[0]:,} distinct values)"


def summarize_labels(labels: npt.ArrayLike) -> str:
    """:func:`label_summary` of an array of labels."""
    arr = np.asarray(labels)
    if arr.size:
        # One or two values (the common case, whatever they are) counted without sorting
        # every label, as np.unique would.
        lo, hi = arr.min(), arr.max()
        n_lo, n_hi = int(np.count_nonzero(arr == lo)), int(np.count_nonzero(arr == hi))
        if lo == hi:
            return label_summary([lo], [n_lo])
        if n_lo + n_hi == arr.size:
            return label_summary([lo, hi], [n_lo, n_hi])
    values, counts = np.unique(arr, return_counts=True)
    return label_summary(values, counts)


def as_written(labels: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Labels as float64 holding what the user wrote: float32 labels (what the parser keeps)
    become the shortest decimal of each (0.1 for the float32 nearest to 0.1), so that they
    compare equal to a model's classes; wider labels are only widened."""
    y = np.asarray(labels)
    if y.dtype != np.float32:
        return y.astype(np.float64)
    values, inverse = np.unique(y, return_inverse=True)
    written = np.array([_as_written(v) for v in values], dtype=np.float64)
    out: npt.NDArray[np.float64] = written[inverse.reshape(y.shape)]
    return out


def _as_written(value: np.generic) -> float:
    """A class value as the user wrote it: a float32 label (what the parser keeps) becomes the
    shortest decimal that reads back as the same float32, e.g. 0.1 rather than the
    0.10000000149011612 the float32 holds; wider values are kept exactly."""
    if isinstance(value, np.float32):
        return float32_as_written(float(value))
    return float(value)


def _fmt(value: float) -> str:
    v = float(value)
    return str(int(v)) if v.is_integer() else repr(v)
