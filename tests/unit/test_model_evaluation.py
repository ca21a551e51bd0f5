"""Metrics and margins of a weight vector on a data set; input validation."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.errors import DataError
from hogwild.model.arrays import check_weights, csr_arrays, new_weights
from hogwild.model.evaluation import evaluate, predict
from hogwild.model.losses import get_loss

from .rows import Rows


def rows(dense: np.ndarray, labels: list[float]) -> Rows:
    r, c = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))]).astype(np.int64)
    return Rows(indptr, c.astype(np.int32), dense[r, c].astype(np.float32),
                np.asarray(labels, dtype=np.float32), dense.shape[1])


DENSE = np.array([[1.0, 0.0, 2.0], [0.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5]])
W = np.array([0.5, 2.0, -1.0, 0.25])  # 3 weights + bias


def test_predict_is_dense_product_plus_bias() -> None:
    np.testing.assert_allclose(predict(rows(DENSE, [1, 1, 1, 1]), W), DENSE @ W[:3] + W[3])


def test_evaluate_hinge_mean_loss_and_accuracy() -> None:
    labels = [1.0, 1.0, -1.0, 1.0]
    margins = DENSE @ W[:3] + W[3]  # [-1.25, -1.75, 0.25, 1.0]
    m = evaluate(rows(DENSE, labels), W, "hinge")
    assert m.n == 4
    assert m.loss == pytest.approx(np.mean(np.maximum(0, 1 - np.array(labels) * margins)))
    assert m.accuracy == pytest.approx(1 / 4)


def test_evaluate_squared_has_no_accuracy_and_accepts_loss_objects() -> None:
    labels = [0.3, -2.0, 1.0, 4.0]
    margins = DENSE @ W[:3] + W[3]
    m = evaluate(rows(DENSE, labels), W, get_loss("squared"))
    assert m.accuracy is None
    assert m.loss == pytest.approx(np.mean(0.5 * (margins - np.array(labels)) ** 2))


def test_evaluate_empty_data() -> None:
    empty = Rows(np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
                 np.zeros(0, np.float32), 3)
    m = evaluate(empty, W, "logistic")
    assert (m.loss, m.accuracy, m.n) == (0.0, None, 0)


def test_evaluate_accepts_read_only_weights() -> None:
    w = W.copy()
    w.flags.writeable = False
    assert evaluate(rows(DENSE, [1, 1, 1, 1]), w, "hinge").n == 4


def test_out_of_range_feature_index_is_rejected() -> None:
    data = rows(DENSE, [1, 1, 1, 1])
    bad = Rows(data.indptr, data.indices.copy(), data.values, data.labels, 3)
    bad.indices[0] = 3
    with pytest.raises(DataError, match="out of range"):
        predict(bad, W)
    negative = Rows(data.indptr, data.indices.copy(), data.values, data.labels, 3)
    negative.indices[0] = -1
    with pytest.raises(DataError, match="out of range"):
        csr_arrays(negative, 3)


def test_inconsistent_shapes_are_rejected() -> None:
    data = rows(DENSE, [1, 1, 1, 1])
    with pytest.raises(DataError, match="labels"):
        csr_arrays(Rows(data.indptr, data.indices, data.values, data.labels[:3], 3), 3)
    with pytest.raises(DataError, match="values"):
        csr_arrays(Rows(data.indptr, data.indices, data.values[:-1], data.labels, 3), 3)
    ptr = data.indptr.copy()
    ptr[-1] += 5  # would read past the end of indices
    with pytest.raises(DataError, match="row pointers"):
        csr_arrays(Rows(ptr, data.indices, data.values, data.labels, 3), 3)
    with pytest.raises(DataError, match="features"):
        csr_arrays(data, 2)  # data declares more features than the model has


def test_weight_checks() -> None:
    assert new_weights(3).shape == (4,) and not new_weights(3).any()
    w = np.zeros(4)
    assert check_weights(w, 3) is w
    with pytest.raises(ValueError, match="n_features"):
        check_weights(np.zeros(5), 3)
    with pytest.raises(ValueError, match="float64"):
        check_weights(np.zeros(4, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="contiguous"):
        check_weights(np.zeros(8)[::2], 3)
    with pytest.raises(ValueError):
        new_weights(0)
