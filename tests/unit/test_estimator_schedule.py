"""The estimators' defaults are the settings schema's, and partial_fit's step-size schedule
follows the examples seen, not the number of calls."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from hogwild import HogwildClassifier, HogwildRegressor
from hogwild.config import Settings
from hogwild.data.sources import load_source

# The regressor's deliberate departures from the schema (squared-loss steps scale with |x|^2).
_REGRESSOR_OWN = {"loss": "squared", "learning_rate": 0.05}


@pytest.mark.parametrize("estimator", [HogwildClassifier, HogwildRegressor])
def test_every_shared_default_is_the_schemas(estimator: Any) -> None:
    schema = {f.name: f.default for f in dataclasses.fields(Settings)}
    defaults = {name: p.default for name, p in
                inspect.signature(estimator.__init__).parameters.items() if name != "self"}
    shared = set(defaults) & set(schema)
    # Every hyperparameter but the estimator's own (row order, partial_fit's epoch, and
    # scikit-learn's warm_start and average) is a setting.
    assert set(defaults) - shared == {"shuffle", "epoch_rows", "warm_start", "average"}
    # The classifier's class_weight: scikit-learn's None for the schema's "" (no weights).
    own = _REGRESSOR_OWN if estimator is HogwildRegressor else {"class_weight": None}
    for name in sorted(shared):
        expected = own.get(name, schema[name])
        assert defaults[name] == expected, (estimator.__name__, name)
        assert type(defaults[name]) is type(expected), (estimator.__name__, name)
    assert estimator().get_params()["lr_schedule"] == schema["lr_schedule"] == "inverse"


@pytest.fixture(scope="module")
def spam() -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
    train = load_source("bundled:spamassassin", cache=False)
    test = load_source("bundled:spamassassin/test", cache=False)
    # The file is sorted by label: fed in chunks as it is, a stream would be one class at a
    # time. One fixed order, the same for fit and partial_fit (which then do not shuffle).
    order = np.random.default_rng(0).permutation(train.n_rows)
    return train.to_scipy()[order], train.labels[order], test.to_scipy(), test.labels


def _fed(clf: HogwildClassifier, X: Any, y: Any, sizes: list[int]) -> HogwildClassifier:
    start = 0
    for size in sizes:
        clf.partial_fit(X[start:start + size], y[start:start + size], classes=[-1, 1])
        start += size
    assert start == X.shape[0]
    return clf


def _chunks(n: int, size: int) -> list[int]:
    return [min(size, n - start) for start in range(0, n, size)]


def test_one_pass_in_any_chunking_scores_like_one_fit_epoch(spam: Any) -> None:
    X, y, X_test, y_test = spam
    n = X.shape[0]
    params: dict[str, Any] = {"threads": 1, "shuffle": False}
    one_epoch = HogwildClassifier(epochs=1, **params).fit(X, y).score(X_test, y_test)
    assert one_epoch > 0.97
    for sizes in (_chunks(n, 100), [n // 3, n - n // 3], _chunks(n, 7)):
        fed = _fed(HogwildClassifier(**params), X, y, sizes)
        assert fed.n_iter_ == len(sizes)
        assert abs(fed.score(X_test, y_test) - one_epoch) <= 0.01, sizes[:2]


def test_partial_fit_with_the_epoch_length_is_fit(spam: Any) -> None:
    X, y, _, _ = spam
    X, y = X[:600], y[:600]
    params: dict[str, Any] = {"threads": 1, "shuffle": False}
    for schedule in ("inverse", "constant", "invscaling"):
        fitted = HogwildClassifier(epochs=1, lr_schedule=schedule, **params).fit(X, y)
        for sizes in ([1] * 600, [250, 350]):
            fed = _fed(HogwildClassifier(lr_schedule=schedule, epoch_rows=600, **params),
                       X, y, sizes)
            assert np.allclose(fed.weights_, fitted.weights_, rtol=1e-12, atol=1e-12), schedule
    with pytest.raises(ValueError, match="epoch_rows must be an integer >= 1"):
        HogwildClassifier(epoch_rows=0).partial_fit(X, y, classes=[-1, 1])


def test_partial_fit_after_fit_and_load_continues_the_schedule(spam: Any,
                                                                tmp_path: Path) -> None:
    X, y, _, _ = spam
    X, y = X[:500], y[:500]
    params: dict[str, Any] = {"threads": 1, "shuffle": False}
    three = HogwildClassifier(epochs=3, **params).fit(X, y)
    two = HogwildClassifier(epochs=2, **params).fit(X, y)
    two.save(tmp_path / "m")
    _fed(two, X, y, [200, 300])
    assert np.allclose(two.weights_, three.weights_, rtol=1e-12, atol=1e-12)
    loaded = HogwildClassifier.load(tmp_path / "m")
    _fed(loaded, X, y, [500])
    assert np.allclose(loaded.weights_, three.weights_, rtol=1e-12, atol=1e-12)
