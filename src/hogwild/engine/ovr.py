"""One-vs-rest multiclass training: K binary Hogwild trainers, one per row of a (K, d + 1) model."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from hogwild.engine.trainer import EpochStats, Trainer, TrainParams
from hogwild.model.arrays import CSRLike, csr_arrays


class _Relabelled(NamedTuple):
    """The rows of a data set with other labels (the arrays are shared, not copied)."""

    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int32]
    values: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32]
    n_features: int
    weights: npt.NDArray[np.float32] | None = None


class OneVsRest:
    """Trains row k of ``w`` (K, n_features + 1) on "class k (+1) against the rest (-1)".

    Each epoch runs the K binary problems one after the other, each with the T threads of a
    :class:`Trainer` sharing that row, so a multiclass epoch costs K binary epochs.
    """

    def __init__(self, n_features: int, n_classes: int, params: TrainParams) -> None:
        if n_classes < 3:
            raise ValueError(f"n_classes: one-vs-rest needs at least 3 (got {n_classes})")
        self.n_features = n_features
        self.w: npt.NDArray[np.float64] = np.zeros((n_classes, n_features + 1), dtype=np.float64)
        self.trainers = [Trainer(n_features, params, w=self.w[k]) for k in range(n_classes)]

    def targets(self, data: CSRLike) -> list[_Relabelled]:
        """Data whose labels are class indices -> one +1/-1 relabelled view per class."""
        a = csr_arrays(data, self.n_features)
        index = a.labels
        return [_Relabelled(a.indptr, a.indices, a.values,
                            np.where(index == np.float32(k), np.float32(1.0),
                                     np.float32(-1.0)).astype(np.float32), self.n_features,
                            a.weights)
                for k in range(self.w.shape[0])]

    def fit_epoch(self, per_class: list[_Relabelled], epoch: int) -> EpochStats:
        """One epoch of every binary problem; the loss is their mean, the time their sum."""
        stats = [t.fit_epoch(d, epoch) for t, d in zip(self.trainers, per_class)]
        return EpochStats(epoch=epoch, seconds=sum(s.seconds for s in stats),
                          train_loss=float(np.mean([s.train_loss for s in stats])),
                          examples=stats[0].examples)
