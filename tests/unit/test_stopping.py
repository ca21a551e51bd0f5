"""Early stopping: patience, target loss, divergence, best weights kept."""

from __future__ import annotations

import math

import numpy as np

from hogwild.stopping import EarlyStopping


def test_patience_counts_evaluations_without_improvement() -> None:
    stopper = EarlyStopping(patience=2, min_delta=0.01)
    assert stopper.update(1.0, np.array([1.0])) is None
    assert stopper.update(0.5, np.array([2.0])) is None
    assert stopper.update(0.495, np.array([3.0])) is None  # below min_delta: no progress
    assert stopper.update(0.6, np.array([4.0])) == "early stopping"
    assert stopper.best_index == 1
    assert stopper.best_weights is not None and stopper.best_weights[0] == 2.0


def test_best_weights_are_a_copy() -> None:
    stopper = EarlyStopping()
    w = np.zeros(3)
    stopper.update(1.0, w)
    w[:] = 5
    assert stopper.best_weights is not None and not stopper.best_weights.any()


def test_target_loss_and_divergence() -> None:
    assert EarlyStopping(target_loss=0.2).update(0.2) == "target loss"
    assert EarlyStopping().update(math.nan) == "diverged"
    never = EarlyStopping(patience=0)
    assert all(never.update(1.0) is None for _ in range(10))
