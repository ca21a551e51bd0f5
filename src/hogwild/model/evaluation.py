"""Scoring a weight vector on a data set: mean loss, accuracy, margins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hogwild.model import kernels
from hogwild.model.arrays import CSRLike, check_weights, csr_arrays
from hogwild.model.losses import Loss, get_loss


@dataclass(frozen=True)
class Metrics:
    """Mean data loss, accuracy (None for regression) and number of rows scored."""

    loss: float
    accuracy: float | None
    n: int


def _n_features(w: npt.NDArray[np.float64]) -> int:
    return int(check_weights(w, writeable=False).shape[0]) - 1


def evaluate(data: CSRLike, w: npt.NDArray[np.float64], loss: Loss | str) -> Metrics:
    """Score ``w`` on ``data``.

    ``loss`` is the plain mean data loss over the rows (no regularisation term), so it compares
    across runs with different l2. Accuracy counts sign(margin) == label, margin 0 as +1.
    An empty data set gives loss 0 and accuracy None.
    """
    loss_obj = get_loss(loss) if isinstance(loss, str) else loss
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


def predict(data: CSRLike, w: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The margin ``w . x + bias`` of every row (its sign is the predicted class)."""
    n_features = _n_features(w)
    a = csr_arrays(data, n_features)
    out = np.empty(a.n_rows, dtype=np.float64)
    kernels.decision(a.indptr, a.indices, a.values, w, n_features, out)
    return out
