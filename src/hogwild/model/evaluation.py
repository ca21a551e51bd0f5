"""Scoring a weight vector on a data set: mean loss, accuracy, margins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hogwild.model import kernels, mlp_kernels
from hogwild.model.arrays import CSRLike, check_weights, csr_arrays
from hogwild.model.losses import Loss, get_loss
from hogwild.model.spec import ModelSpec


@dataclass(frozen=True)
class Metrics:
    """Mean data loss, accuracy (None for regression) and number of rows scored."""

    loss: float
    accuracy: float | None
    n: int


def _n_features(w: npt.NDArray[np.float64]) -> int:
    return int(check_weights(w, writeable=False).shape[0]) - 1


def evaluate(data: CSRLike, w: npt.NDArray[np.float64], loss: Loss | str,
             spec: ModelSpec | None = None) -> Metrics:
    """Score ``w`` (the linear model, or the model ``spec`` describes) on ``data``.

    ``loss`` is the plain mean data loss over the rows (no regularisation term), so it compares
    across runs with different l2. Accuracy counts sign(margin) == label, margin 0 as +1.
    An empty data set gives loss 0 and accuracy None.
    """
    loss_obj = get_loss(loss) if isinstance(loss, str) else loss
    if spec is not None and spec.is_mlp:
        return _evaluate_mlp(data, w, loss_obj, spec)
    n_features = _n_features(w)
    a = csr_arrays(data, n_features)
    n = a.n_rows
    if n == 0:
        return Metrics(loss=0.0, accuracy=None, n=0)
    loss_sum, n_correct = kernels.evaluate(
        a.indptr, a.indices, a.values, a.labels, w, n_features, loss_obj.code
    )
    accuracy = float(n_correct) / n if loss_obj.is_classifier else None
    return Metrics(loss=float(loss_sum) / n, accuracy=accuracy, n=n)


def _evaluate_mlp(data: CSRLike, w: npt.NDArray[np.float64], loss: Loss,
                  spec: ModelSpec) -> Metrics:
    spec.check(w, writeable=False)
    a = csr_arrays(data, spec.n_features)
    if a.n_rows == 0:
        return Metrics(loss=0.0, accuracy=None, n=0)
    loss_sum, n_correct = mlp_kernels.mlp_evaluate(
        a.indptr, a.indices, a.values, a.labels, w, spec.n_features, spec.hidden_array(),
        spec.binary_features, loss.code)
    accuracy = float(n_correct) / a.n_rows if loss.is_classifier else None
    return Metrics(loss=float(loss_sum) / a.n_rows, accuracy=accuracy, n=a.n_rows)


def predict(data: CSRLike, w: npt.NDArray[np.float64],
            spec: ModelSpec | None = None) -> npt.NDArray[np.float64]:
    """The margin of every row (its sign is the predicted class): ``w . x + bias`` for the
    linear model, the output of the network ``spec`` describes for the MLP."""
    if spec is not None and spec.is_mlp:
        spec.check(w, writeable=False)
        a = csr_arrays(data, spec.n_features)
        out = np.empty(a.n_rows, dtype=np.float64)
        mlp_kernels.mlp_decision(a.indptr, a.indices, a.values, w, spec.n_features,
                                 spec.hidden_array(), spec.binary_features, out)
        return out
    n_features = _n_features(w)
    a = csr_arrays(data, n_features)
    out = np.empty(a.n_rows, dtype=np.float64)
    kernels.decision(a.indptr, a.indices, a.values, w, n_features, out)
    return out


def scores(data: CSRLike, w: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Margins of every row under each row of a (K, n_features + 1) one-vs-rest model:
    shape (n_rows, K)."""
    n_features = int(w.shape[1]) - 1
    a = csr_arrays(data, n_features)
    out = np.empty((w.shape[0], a.n_rows), dtype=np.float64)
    for k in range(w.shape[0]):
        kernels.decision(a.indptr, a.indices, a.values, np.ascontiguousarray(w[k]), n_features,
                         out[k])
    return out.T


def evaluate_multiclass(data: CSRLike, w: npt.NDArray[np.float64], loss: Loss | str
                        ) -> Metrics:
    """Score a one-vs-rest model ``w`` (K, n_features + 1) on ``data`` whose labels are class
    indices 0..K-1: accuracy is argmax of the K margins == label; loss is the binary loss of
    each of the K problems (+1 for the row's class, -1 for the others), averaged over them."""
    loss_obj = get_loss(loss) if isinstance(loss, str) else loss
    n = int(data.indptr.shape[0]) - 1
    if n == 0:
        return Metrics(loss=0.0, accuracy=None, n=0)
    margins = scores(data, w)
    index = np.asarray(data.labels).astype(np.int64)
    targets = np.where(np.arange(w.shape[0])[None, :] == index[:, None], 1.0, -1.0)
    mean_loss = float(np.mean(loss_obj.value(margins, targets)))
    accuracy = float(np.mean(np.argmax(margins, axis=1) == index))
    return Metrics(loss=mean_loss, accuracy=accuracy, n=n)


def evaluate_model(data: CSRLike, w: npt.NDArray[np.float64], loss: Loss | str,
                   spec: ModelSpec | None = None) -> Metrics:
    """:func:`evaluate_multiclass` for a (K, d + 1) one-vs-rest model, else :func:`evaluate`
    (the linear model, or the model ``spec`` describes)."""
    return evaluate_multiclass(data, w, loss) if w.ndim == 2 else evaluate(data, w, loss, spec)


def is_finite(w: npt.NDArray[np.float64]) -> bool:
    """Whether every weight is a finite number (a diverged run makes them inf or NaN)."""
    return bool(np.isfinite(w).all())
