"""The scikit-learn estimators: sklearn's own estimator checks, model selection, labels,
partial_fit, save/load, and the lazy `import hogwild`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from hogwild import HogwildClassifier, HogwildRegressor, config
from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.sources import load_source
from hogwild.errors import ConfigError, ModelError

# The estimators run sklearn's checks with one thread and a fixed seed: several lock-free
# threads race on the shared weights by design, so two fits differ in the last digits and
# checks that compare two fits (check_fit_idempotent, ...) would fail for that reason alone.
_REGRESSOR_EXPECTED_FAILURES = {
    # These three fit X drawn around a mean of 100 (2 features, so |x|^2 ~ 2e4) with targets of
    # scale 1. Plain SGD with the default step 0.01 diverges on such unscaled inputs (sklearn's
    # SGDRegressor with the same step does too); hogwild refuses to return non-finite weights
    # and raises ValueError("training diverged ...; lower learning_rate") instead.
    "check_fit_idempotent": "SGD diverges on unscaled X (mean 100); fit raises ValueError",
    "check_fit_check_is_fitted": "SGD diverges on unscaled X (mean 100); fit raises ValueError",
    "check_n_features_in": "SGD diverges on unscaled X (mean 100); fit raises ValueError",
}


# A row of weight c is one SGD step of c times its gradient, not c steps: the same objective,
# so fits agree statistically (tests/unit/test_row_weights.py), not to the digit as this
# check asks (scikit-learn's SGD estimators are exempt from it for the same reason).
_WEIGHT_EQUIVALENCE = {
    "check_sample_weight_equivalence_on_dense_data":
        "SGD: a weighted row is one scaled step, equivalent to repeated rows statistically",
    "check_sample_weight_equivalence_on_sparse_data":
        "SGD: a weighted row is one scaled step, equivalent to repeated rows statistically",
}


# The check weighs one class 1000 and the other 1e-4 on noisy unscaled blobs, giving
# iterative models max_iter=1000 (hogwild names it epochs, which keeps its default 10): the
# hinge model then predicts 86% of the test rows as the heavy class, against 87% asked
# (100 epochs: 100%; the logistic one passes with 98%).
_HINGE_CLASS_WEIGHT = {
    "check_class_weight_classifiers":
        "10 epochs (the check sets max_iter): 86% of rows in the heavy class, 87% asked",
}


def _expected_failures(estimator: Any) -> dict[str, str]:
    own = _REGRESSOR_EXPECTED_FAILURES if isinstance(estimator, HogwildRegressor) else {}
    if isinstance(estimator, HogwildClassifier) and estimator.loss == "hinge":
        own = _HINGE_CLASS_WEIGHT
    return {**own, **_WEIGHT_EQUIVALENCE}


@parametrize_with_checks([HogwildClassifier(threads=1, seed=0),
                          HogwildClassifier(threads=1, seed=0, loss="logistic"),
                          HogwildRegressor(threads=1, seed=0)],
                         expected_failed_checks=_expected_failures)
def test_sklearn_estimator_checks(estimator: Any, check: Any) -> None:
    check(estimator)


def test_regressor_divergence_is_an_error_not_a_model() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(loc=100, size=(50, 2))
    with pytest.raises(ValueError, match="training diverged"):
        HogwildRegressor(threads=1).fit(X, rng.normal(size=50))
    # Scaled inputs of the same data train fine.
    Xs = (X - X.mean(axis=0)) / X.std(axis=0)
    y = Xs @ np.array([2.0, -1.0]) + 0.5
    reg = HogwildRegressor(threads=1, epochs=30).fit(Xs, y)
    assert reg.score(Xs, y) > 0.99


def _binary(n: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(n, 30, n_informative=8, random_state=0)
    return X, y


def test_model_selection_round_trips() -> None:
    X, y = _binary()
    scores = cross_val_score(HogwildClassifier(threads=1, learning_rate=0.01), X, y, cv=3)
    assert scores.shape == (3,) and scores.min() > 0.7
    search = GridSearchCV(HogwildClassifier(threads=2),
                          {"learning_rate": [0.01, 0.5], "loss": ["hinge", "logistic"]}, cv=3)
    search.fit(sp.csr_matrix(X), y)
    assert search.best_params_["learning_rate"] in (0.01, 0.5)
    assert search.best_estimator_.n_iter_ == 10
    assert search.score(X, y) > 0.7
    assert clone(search.best_estimator_).get_params() == search.best_estimator_.get_params()


def test_arbitrary_labels_binary_and_multiclass() -> None:
    X, y = make_classification(1200, 20, n_informative=10, n_classes=3, random_state=1)
    names = np.array(["ham", "spam", "eggs"])[y]
    clf = HogwildClassifier(threads=2, loss="logistic", epochs=15).fit(sp.csr_matrix(X), names)
    assert clf.classes_.tolist() == ["eggs", "ham", "spam"]
    assert clf.coef_.shape == (3, 20) and clf.intercept_.shape == (3,)
    margins = clf.decision_function(X)
    assert np.allclose(margins, X @ clf.coef_.T + clf.intercept_, atol=1e-4)
    assert (clf.predict(X) == clf.classes_[np.argmax(margins, axis=1)]).all()
    assert clf.score(X, names) > 0.6
    proba = clf.predict_proba(X)
    assert proba.shape == (1200, 3) and np.allclose(proba.sum(axis=1), 1.0)
    Xb, yb = _binary()
    labels = np.where(yb == 1, 7, 3)
    binary = HogwildClassifier(threads=1).fit(Xb, labels)
    assert binary.classes_.tolist() == [3, 7] and binary.coef_.shape == (1, 30)
    assert set(np.unique(binary.predict(Xb))) <= {3, 7}
    assert not hasattr(binary, "predict_proba")  # hinge: no probabilities
    assert binary.score(Xb, labels) > 0.7


def test_partial_fit_continues_like_more_epochs() -> None:
    X, y = _binary(600)
    params: dict[str, Any] = {"threads": 1, "shuffle": False, "lr_schedule": "invscaling"}
    once = HogwildClassifier(epochs=3, **params).fit(X, y)
    stepwise = HogwildClassifier(**params)
    for _ in range(3):
        stepwise.partial_fit(X, y, classes=[0, 1])
    assert stepwise.n_iter_ == 3
    assert np.array_equal(once.weights_, stepwise.weights_)
    with pytest.raises(ValueError, match="classes must be given"):
        HogwildClassifier().partial_fit(X, y)
    with pytest.raises(ValueError, match="not in classes"):
        stepwise.partial_fit(X, y + 5)


def test_save_load_and_predict_cli_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    X, y = _binary()
    labels = np.where(y == 1, 2, 1)
    clf = HogwildClassifier(threads=2, loss="logistic", learning_rate=0.05).fit(X, labels)
    clf.save(tmp_path / "model")
    doc = json.loads((tmp_path / "model" / "model.json").read_text())
    assert doc["classes"] == [1, 2] and doc["task"] == "binary" and doc["format_version"] == 2
    back = HogwildClassifier.load(tmp_path / "model" / "model.npz")
    assert back.get_params() == clf.get_params()
    assert np.array_equal(back.predict(X), clf.predict(X))
    assert np.array_equal(back.predict_proba(X), clf.predict_proba(X))
    # The command line reads the same file and predicts the same labels.
    path = tmp_path / "x.svm"
    write_svmlight(CSRData.from_scipy(sp.csr_matrix(X), labels), path)
    assert main(["predict", "--model", str(tmp_path / "model"), "--data", str(path),
                 "--out", str(tmp_path / "p.txt")]) == 0
    x32 = load_source(str(path), cache=False).to_scipy()  # the file holds float32 values
    assert np.array_equal(np.loadtxt(tmp_path / "p.txt"), clf.predict(x32))
    assert f"accuracy {clf.score(x32, labels):.4f}" in capsys.readouterr().out
    with pytest.raises(ModelError, match="cannot be loaded as a regressor"):
        HogwildRegressor.load(tmp_path / "model")
    strings = HogwildClassifier(threads=1).fit(X, np.array(["a", "b"])[y])
    with pytest.raises(ModelError, match="numeric class labels"):
        strings.save(tmp_path / "s")


def test_loading_a_model_trained_by_the_cli(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--out", str(tmp_path / "run"), "--epochs", "2", "--l2", "0.0001",
                 "--data-cache", "false"], environ={}) == 0
    clf = HogwildClassifier.load(tmp_path / "run" / "latest")
    assert clf.l2 == 0.0001 and clf.epochs == 2 and clf.classes_.tolist() == [-1, 1]
    test = load_source("bundled:spamassassin/test", cache=False)
    reported = json.loads((tmp_path / "run" / "latest" / "metrics.json").read_text())["test_accuracy"]
    assert clf.score(test.to_scipy(), test.labels) == pytest.approx(reported, abs=1e-12)


def test_regressor_dense_and_sparse_agree() -> None:
    X, y = make_regression(800, 15, noise=1.0, random_state=2)
    y = y / y.std()
    dense = HogwildRegressor(threads=1).fit(X, y)
    sparse = HogwildRegressor(threads=1).fit(sp.csr_matrix(X), y)
    assert np.allclose(dense.coef_, sparse.coef_) and dense.intercept_.shape == (1,)
    assert dense.score(X, y) > 0.95
    with pytest.raises(ValueError, match="loss must be 'squared'"):
        HogwildRegressor(loss="hinge").fit(X, y)


def test_epochs_follow_the_settings_rules() -> None:
    X, y = sp.random(20, 5, density=0.5, format="csr", random_state=0), np.arange(20) % 2
    with pytest.raises(ConfigError) as schema:
        config.check_values({"epochs": 0}, "test")
    for epochs, why in ((0, schema.value.reason), (2.5, "expected an integer, got 2.5"),
                        ("3", "expected an integer, got '3'"), (True, "expected an integer")):
        with pytest.raises(ValueError, match=re.escape(f"HogwildClassifier: epochs {why}")):
            HogwildClassifier(epochs=epochs).fit(X, y)
    assert HogwildClassifier(epochs=np.int64(2), threads=1).fit(X, y).n_iter_ == 2
