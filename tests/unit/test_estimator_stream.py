"""partial_fit as a stream: one pass in chunks learns like fit, its schedule counts examples
(t_) whatever the chunking, and averaged SGD (average=True) is the mean of the iterates."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from hogwild import HogwildClassifier, HogwildRegressor
from hogwild.data.csr import CSRData
from hogwild.data.sources import load_source
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.model import kernels
from hogwild.model.schedule import kernel_schedule, stream_horizon


@pytest.fixture(scope="module")
def rcv1() -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
    # The file's own row order is the stream: a user's data arrive in the order they come.
    train = load_source("bundled:rcv1_vw_subset", cache=False)
    test = load_source("bundled:rcv1_vw_subset/test", cache=False)
    return train.to_scipy(), train.labels, test.to_scipy(), test.labels


def _stream(clf: Any, X: Any, y: Any, size: int, **kw: Any) -> Any:
    for start in range(0, X.shape[0], size):
        clf.partial_fit(X[start:start + size], y[start:start + size], **kw)
    return clf


def test_partial_fit_in_100_row_chunks_learns_like_one_fit_epoch(rcv1: Any) -> None:
    X, y, X_test, y_test = rcv1
    # One thread: the same weights on every machine. The median over 25 seeds, because one
    # pass's final iterate is noisy: fit's own medians over five seeds range from 0.82 to
    # 0.87 on this set (seed groups 0-4, 5-9, ...), wider than the point asked for.
    fit, fed = [], []
    for seed in range(25):
        fit.append(HogwildClassifier(epochs=1, threads=1, seed=seed).fit(X, y)
                   .score(X_test, y_test))
        clf = _stream(HogwildClassifier(threads=1, seed=seed), X, y, 100, classes=[-1, 1])
        fed.append(clf.score(X_test, y_test))
    assert np.median(fit) > 0.83
    assert abs(np.median(fed) - np.median(fit)) <= 0.01, (np.median(fed), np.median(fit))
    # ... and no bad seeds: the stream's schedule does not jump from call to call.
    assert min(fed) >= np.median(fit) - 0.03


def test_the_stream_is_one_pass_in_any_chunking(rcv1: Any) -> None:
    X, y, _, _ = rcv1
    X, y = X[:700], y[:700]
    # Default parameters (shuffle included): partial_fit keeps the rows' order and its step
    # counter t_ runs on from call to call.
    runs = [_stream(HogwildClassifier(threads=1), X, y, size, classes=[-1, 1])
            for size in (700, 100, 7)]
    for clf in runs:
        assert clf.t_ == 701.0
        assert np.allclose(clf.weights_, runs[0].weights_, rtol=1e-12, atol=1e-12)
    # The schedule of a stream of unknown length: the inverse schedule over the horizon
    # 1 / (learning_rate * l2), i.e. the step 1 / (l2 (t + t0)) of scikit-learn's optimal.
    horizon = stream_horizon(0.5, 1e-5)
    assert horizon == 200_000
    by_horizon = HogwildClassifier(threads=1, epoch_rows=horizon)
    _stream(by_horizon, X, y, 100, classes=[-1, 1])
    assert np.allclose(by_horizon.weights_, runs[0].weights_, rtol=1e-12, atol=1e-12)
    assert stream_horizon(0.5, 0.0) > 1 << 39  # no L2: the step stays learning_rate


def test_t_counts_the_examples_as_scikit_learns(rcv1: Any) -> None:
    X, y, _, _ = rcv1
    X, y = X[:300], y[:300]
    clf = HogwildClassifier(epochs=3, threads=1).fit(X, y)
    assert clf.t_ == 3 * 300 + 1
    clf.partial_fit(X[:50], y[:50])
    assert clf.t_ == 3 * 300 + 50 + 1
    assert clf.fit(X, y).t_ == 901  # fit starts again


def _mean_of_iterates(data: CSRData, lr: float, l2: float) -> np.ndarray:
    """Plain SGD one row at a time (the kernel on [r, r + 1)), averaging w after each row."""
    d = data.n_features
    w = np.zeros(d + 1)
    total = np.zeros(d + 1)
    code, lr0, power_t, shift = kernel_schedule("inverse", lr, 1.0, 1.0, 0, data.n_rows)
    for r in range(data.n_rows):
        kernels.sgd_range(data.indptr, data.indices, data.values, data.labels, r, r + 1, w,
                          d, 0, lr0, code, power_t, r + 1 + shift, l2, True)
        total += w
    return total / data.n_rows


def test_averaged_sgd_is_the_mean_of_the_iterates(rcv1: Any) -> None:
    X, y, _, _ = rcv1
    data = CSRData.from_scipy(X[:400], y[:400])
    expected = _mean_of_iterates(data, 0.5, 1e-3)
    trainer = Trainer(data.n_features, TrainParams(threads=1, l2=1e-3))
    trainer.average_sum = np.zeros(data.n_features + 1)
    trainer.fit_epoch(data, 0)
    got = trainer.averaged(np.zeros(data.n_features + 1))
    assert np.allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert not np.allclose(trainer.w, expected, atol=1e-3)  # the last iterate differs


def test_average_in_the_estimator_predicts_with_the_mean_and_streams(rcv1: Any) -> None:
    X, y, X_test, _ = rcv1
    X, y = X[:400], y[:400]
    params: dict[str, Any] = {"threads": 1, "shuffle": False, "l2": 1e-3}
    fitted = HogwildClassifier(epochs=1, average=True, **params).fit(X, y)
    expected = _mean_of_iterates(CSRData.from_scipy(X, y), 0.5, 1e-3)
    assert np.allclose(fitted.weights_[0], expected, rtol=1e-9, atol=1e-12)
    assert np.allclose(fitted.coef_[0], expected[:-1], rtol=1e-9, atol=1e-12)
    assert np.allclose(fitted.decision_function(X_test), X_test @ expected[:-1] + expected[-1])
    # partial_fit carries the average across calls: chunks of a pass give the pass's mean.
    fed = _stream(HogwildClassifier(average=True, epoch_rows=400, **params), X, y, 30,
                  classes=[-1, 1])
    assert np.allclose(fed.weights_, fitted.weights_, rtol=1e-9, atol=1e-12)
    # Two passes average over both (as scikit-learn's average=True).
    two = HogwildClassifier(epochs=2, average=True, **params).fit(X, y)
    again = _stream(HogwildClassifier(average=True, epoch_rows=400, **params),
                    sp.vstack([X, X]).tocsr(), np.concatenate([y, y]), 400, classes=[-1, 1])
    assert np.allclose(two.weights_, again.weights_, rtol=1e-9, atol=1e-12)
    # The mean needs the steps' order, which racing threads do not keep: one thread.
    many = HogwildClassifier(epochs=1, average=True, **{**params, "threads": 2}).fit(X, y)
    assert np.array_equal(many.weights_, fitted.weights_)


def test_average_is_validated() -> None:
    X = sp.csr_matrix(np.eye(4, dtype=np.float32))
    y = np.array([1, -1, 1, -1])
    with pytest.raises(ValueError, match="average must be True or False"):
        HogwildClassifier(average="yes").fit(X, y)
    for bad in ({"batch_size": 4}, {"trainer": "syncsgd"}):
        with pytest.raises(ValueError, match="average=True needs per-example steps"):
            HogwildClassifier(average=True, **bad).fit(X, y)
    assert HogwildRegressor(average=True, threads=1).fit(X, y.astype(float)).t_ == 41
