"""Quality metrics against scikit-learn's on the same predictions."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm

from hogwild.model import metrics


@pytest.mark.parametrize("classes", [(-1, 1), (0, 1), (1, 2)])
def test_binary_metrics_equal_sklearn(classes: tuple[int, int]) -> None:
    rng = np.random.default_rng(3)
    n = 500
    y = rng.choice(classes, size=n)
    # Rounded scores: many ties, which the AUC must count as one half.
    score = np.round(rng.normal(size=n) + (y == classes[1]) * 0.8, 1)
    pred = np.where(score >= 0, classes[1], classes[0])
    got = metrics.classification(y, pred, score, classes)
    pos = classes[1]
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), abs=1e-12)
    assert got["precision"] == pytest.approx(skm.precision_score(y, pred, pos_label=pos), abs=1e-12)
    assert got["recall"] == pytest.approx(skm.recall_score(y, pred, pos_label=pos), abs=1e-12)
    assert got["f1"] == pytest.approx(skm.f1_score(y, pred, pos_label=pos), abs=1e-12)
    assert got["roc_auc"] == pytest.approx(skm.roc_auc_score(y == pos, score), abs=1e-12)


def test_multiclass_macro_metrics_equal_sklearn() -> None:
    rng = np.random.default_rng(5)
    n, classes = 600, (2, 3, 7, 11)
    y = rng.choice(classes, size=n)
    margins = rng.normal(size=(n, 4)) + 1.2 * (y[:, None] == np.array(classes)[None, :])
    pred = np.array(classes)[np.argmax(margins, axis=1)]
    got = metrics.classification(y, pred, margins, classes)
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), abs=1e-12)
    for name, fn in (("precision", skm.precision_score), ("recall", skm.recall_score),
                     ("f1", skm.f1_score)):
        assert got[name] == pytest.approx(fn(y, pred, average="macro"), abs=1e-12), name
    per_class = [skm.roc_auc_score(y == c, margins[:, k]) for k, c in enumerate(classes)]
    assert got["roc_auc"] == pytest.approx(np.mean(per_class), abs=1e-12)


def test_zero_division_and_undefined_auc_follow_sklearn() -> None:
    y = np.array([1, 1, 1, -1])
    pred = np.array([-1, -1, -1, -1])
    got = metrics.classification(y, pred, np.full(4, -0.5), (-1, 1))
    assert got["precision"] == 0.0 == skm.precision_score(y, pred, zero_division=0)
    assert got["recall"] == 0.0 and got["f1"] == 0.0
    one_class = metrics.classification(np.ones(3), np.ones(3), np.ones(3), (-1, 1))
    assert one_class["roc_auc"] is None and one_class["accuracy"] == 1.0
    assert metrics.classification([], [], [], (-1, 1))["accuracy"] is None


def test_regression_metrics_equal_sklearn() -> None:
    rng = np.random.default_rng(7)
    y = rng.normal(size=300) * 3
    pred = y + rng.normal(size=300)
    got = metrics.regression(y, pred)
    assert got["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(y, pred)), abs=1e-12)
    assert got["mae"] == pytest.approx(skm.mean_absolute_error(y, pred), abs=1e-12)
    assert got["r2"] == pytest.approx(skm.r2_score(y, pred), abs=1e-12)
    assert metrics.regression(np.ones(4), np.ones(4))["r2"] is None


def test_loss_and_internal_report() -> None:
    margins = np.array([2.0, -0.5, 0.25])
    y = np.array([1.0, 1.0, -1.0])
    assert metrics.mean_loss("hinge", margins, y) == pytest.approx((0 + 1.5 + 1.25) / 3)
    rep = metrics.report_internal("binary", "hinge", (0, 1), margins, y)
    assert rep["accuracy"] == pytest.approx(1 / 3) and rep["rows"] == 3
    assert rep["recall"] == pytest.approx(0.5)
    multi = np.array([[1.0, -1.0], [0.0, 2.0]])
    rep = metrics.report_internal("multiclass", "squared", (4, 9), multi, np.array([0, 0]))
    assert rep["accuracy"] == 0.5
    # rows' true class gets +1, the other -1: (0 + 0 + 0.5 + 4.5) / 4
    assert rep["loss"] == pytest.approx((0.0 + 0.0 + 0.5 + 4.5) / 4)


def test_average_ranks_equal_scipy() -> None:
    from scipy.stats import rankdata

    from hogwild.model.metrics import average_ranks

    rng = np.random.default_rng(3)
    for x in (rng.normal(size=500), rng.integers(0, 4, size=500).astype(np.float64),
              np.zeros(4), np.array([2.0]), np.array([np.inf, -np.inf, 0.0, 0.0])):
        assert np.array_equal(average_ranks(x), rankdata(x))
