"""Quality metrics of predictions, vectorised numpy: classification and regression scores.

Classification: accuracy, precision, recall, F1 (of the positive class, ``classes[1]``, for a
binary model; macro-averaged over the classes for multiclass) and ROC AUC (of the margin;
multiclass: the mean over classes of the one-vs-rest AUC of that class's margin). A ratio
whose denominator is zero (no predicted or no true member of a class) counts as 0, as
scikit-learn does by default; the AUC of a class that is absent or alone is undefined
(None, and left out of the macro mean). Regression: RMSE, MAE and R^2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.model.losses import get_loss

F64 = npt.NDArray[np.float64]


def _ratio(num: F64, den: F64) -> F64:
    out: F64 = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return out


def average_ranks(x: F64) -> F64:
    """1-based ranks of ``x``, ties sharing the mean of their ranks (scipy's
    ``rankdata(method="average")``, without importing scipy.stats: half a second per run)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    # first position of each run of equal values, and the run lengths
    starts = np.flatnonzero(np.concatenate(([True], xs[1:] != xs[:-1])))
    lengths = np.diff(np.append(starts, xs.shape[0]))
    mean_rank = starts + (lengths + 1) / 2.0
    ranks = np.empty(x.shape[0], dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, lengths)
    return ranks


def roc_auc(y_positive: npt.NDArray[np.bool_], score: npt.ArrayLike) -> float | None:
    """Area under the ROC curve: the probability that a random positive scores above a
    random negative, ties counting one half (Mann-Whitney U from average ranks)."""
    pos = np.asarray(y_positive, dtype=bool)
    n_pos = int(np.count_nonzero(pos))
    n_neg = pos.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = average_ranks(np.asarray(score, dtype=np.float64))
    u = float(ranks[pos].sum()) - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def classification(y_true: npt.ArrayLike, y_pred: npt.ArrayLike, margins: npt.ArrayLike,
                   classes: Sequence[float]) -> dict[str, float | None]:
    """accuracy, precision, recall, f1, roc_auc for labels in the user's space.

    ``margins`` is ``(n,)`` (binary, positive class ``classes[1]``) or ``(n, K)``
    (one-vs-rest, column k for ``classes[k]``, macro averages)."""
    yt = np.asarray(y_true, dtype=np.float64).ravel()
    yp = np.asarray(y_pred, dtype=np.float64).ravel()
    m = np.asarray(margins, dtype=np.float64)
    cls = np.asarray(classes, dtype=np.float64)
    n = yt.shape[0]
    if n == 0:
        return {"accuracy": None, "precision": None, "recall": None, "f1": None,
                "roc_auc": None}
    accuracy = float(np.mean(yt == yp))
    # One-hot truth and prediction, (n, K): the confusion counts per class in three sums.
    truth = yt[:, None] == cls[None, :]
    guess = yp[:, None] == cls[None, :]
    tp = np.count_nonzero(truth & guess, axis=0).astype(np.float64)
    n_pred = np.count_nonzero(guess, axis=0).astype(np.float64)
    n_true = np.count_nonzero(truth, axis=0).astype(np.float64)
    precision = _ratio(tp, n_pred)
    recall = _ratio(tp, n_true)
    f1 = _ratio(2.0 * tp, n_pred + n_true)
    if m.ndim == 1:
        k = 1 if cls.shape[0] == 2 else 0
        return {"accuracy": accuracy, "precision": float(precision[k]),
                "recall": float(recall[k]), "f1": float(f1[k]),
                "roc_auc": roc_auc(truth[:, k], m)}
    aucs = [roc_auc(truth[:, c], m[:, c]) for c in range(cls.shape[0])]
    defined = [a for a in aucs if a is not None]
    return {"accuracy": accuracy, "precision": float(precision.mean()),
            "recall": float(recall.mean()), "f1": float(f1.mean()),
            "roc_auc": float(np.mean(defined)) if defined else None}


def regression(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> dict[str, float | None]:
    """rmse, mae and r2 (1 - residual / total sum of squares; None when y is constant)."""
    yt = np.asarray(y_true, dtype=np.float64).ravel()
    yp = np.asarray(y_pred, dtype=np.float64).ravel()
    if yt.shape[0] == 0:
        return {"rmse": None, "mae": None, "r2": None}
    err = yp - yt
    ss_res = float(np.dot(err, err))
    centred = yt - yt.mean()
    ss_tot = float(np.dot(centred, centred))
    return {"rmse": float(np.sqrt(ss_res / yt.shape[0])), "mae": float(np.mean(np.abs(err))),
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0.0 else None}


def mean_loss(loss: str, margins: npt.ArrayLike, y_internal: npt.ArrayLike) -> float | None:
    """The model's own data loss averaged over rows; for one-vs-rest margins ``(n, K)`` and
    class indices ``y_internal``, the K binary losses (+1 for the row's class, -1 for the
    others) averaged over rows and classes."""
    m = np.asarray(margins, dtype=np.float64)
    y = np.asarray(y_internal, dtype=np.float64).ravel()
    if y.shape[0] == 0:
        return None
    if m.ndim == 2:
        signs = np.where(np.arange(m.shape[1])[None, :] == y[:, None], 1.0, -1.0)
        return float(np.mean(get_loss(loss).value(m, signs)))
    return float(np.mean(get_loss(loss).value(m, y)))


def report(task: str, loss: str, classes: Sequence[float] | None, margins: npt.ArrayLike,
           y_true: npt.ArrayLike, y_pred: npt.ArrayLike,
           y_internal: npt.ArrayLike) -> dict[str, Any]:
    """Every metric of a task, plus ``loss`` (the model's own loss) and ``rows``."""
    out: dict[str, Any] = {"rows": int(np.asarray(y_true).shape[0]),
                           "loss": mean_loss(loss, margins, y_internal)}
    if task == "regression":
        out.update(regression(y_true, y_pred))
    else:
        assert classes is not None
        out.update(classification(y_true, y_pred, margins, classes))
    return out


def report_internal(task: str, loss: str, classes: Sequence[float] | None,
                    margins: npt.ArrayLike, y_internal: npt.ArrayLike) -> dict[str, Any]:
    """:func:`report` for labels in the training space (binary -1/+1, multiclass the class
    index, regression the target), mapped to ``classes`` for the comparisons."""
    m = np.asarray(margins, dtype=np.float64)
    y = np.asarray(y_internal, dtype=np.float64).ravel()
    if task == "regression" or classes is None:
        return report(task, loss, classes, m, y, m, y)
    cls = np.asarray(classes, dtype=np.float64)
    if task == "multiclass":
        y_true = cls[y.astype(np.int64)]
        y_pred = cls[np.argmax(m, axis=1)] if m.shape[0] else cls[:0]
    else:
        y_true = np.where(y > 0, cls[1], cls[0])
        y_pred = np.where(m >= 0.0, cls[1], cls[0])
    return report(task, loss, classes, m, y_true, y_pred, y)
