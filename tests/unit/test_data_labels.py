"""LabelMap: the user's labels to training targets and back."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.transform.labels import (
    BINARY,
    MULTICLASS,
    REGRESSION,
    LabelMap,
    label_summary,
    one_vs_rest,
    summarize_labels,
)
from hogwild.errors import DataError


@pytest.mark.parametrize("values", [(-1.0, 1.0), (0.0, 1.0), (1.0, 2.0), (3.5, 7.0)])
def test_any_two_values_map_to_minus_one_and_plus_one(values: tuple[float, float]) -> None:
    low, high = values
    y = np.array([high, low, low, high, high], dtype=np.float32)
    m = LabelMap.fit(y, classifier=True, source="f.svm")
    assert m.task == BINARY and m.classes == (low, high)
    encoded = m.encode(y, "f.svm")
    assert encoded.dtype == np.float32
    assert encoded.tolist() == [1.0, -1.0, -1.0, 1.0, 1.0]
    assert m.decode(encoded).tolist() == y.astype(np.float64).tolist()
    assert m.decode(np.array([0.3, -2.0])).tolist() == [high, low]  # by sign of a margin


def test_more_than_two_values_are_class_indices() -> None:
    y = np.array([3, 1, 2, 2, 1], dtype=np.float32)
    m = LabelMap.fit(y, classifier=True, source="f")
    assert m.task == MULTICLASS and m.classes == (1.0, 2.0, 3.0) and m.n_classes == 3
    index = m.encode(y, "f")
    assert index.tolist() == [2.0, 0.0, 1.0, 1.0, 0.0]
    assert m.decode(index).tolist() == [3.0, 1.0, 2.0, 2.0, 1.0]
    assert one_vs_rest(index, 1).tolist() == [-1.0, -1.0, 1.0, 1.0, -1.0]
    assert m.json_classes() == [1, 2, 3]


def test_one_class_is_refused_naming_file_and_label() -> None:
    with pytest.raises(DataError, match=r"data/one\.svm: every training label is 1;"):
        LabelMap.fit(np.ones(10, dtype=np.float32), classifier=True, source="data/one.svm")


def test_a_real_valued_target_for_a_classifier_is_refused() -> None:
    y = np.linspace(0.0, 1.0, 5000).astype(np.float32)
    with pytest.raises(DataError, match="loss: squared"):
        LabelMap.fit(y, classifier=True, source="f")


def test_regression_keeps_the_values() -> None:
    y = np.array([0.25, -3.0, 7.5], dtype=np.float32)
    m = LabelMap.fit(y, classifier=False, source="f")
    assert m.task == REGRESSION and m.classes is None and m.json_classes() is None
    assert m.encode(y, "f").tolist() == y.tolist()
    # A single value is a legitimate (if dull) regression target.
    assert LabelMap.fit(np.ones(3), classifier=False, source="f").task == REGRESSION


def test_a_test_label_the_training_data_did_not_have_is_named() -> None:
    m = LabelMap.fit(np.array([0, 1], dtype=np.float32), classifier=True, source="train")
    with pytest.raises(DataError, match=r"test\.svm: label\(s\) -1 not among the training "
                                        r"labels \{0, 1\}"):
        m.encode(np.array([1, -1, 0], dtype=np.float32), "test.svm")


def test_encoding_is_vectorised_on_large_arrays() -> None:
    y = np.tile(np.array([0, 1], dtype=np.float32), 500_000)
    m = LabelMap.fit(y, classifier=True, source="f")
    out = m.encode(y, "f")
    assert out.shape == y.shape and float(out.sum()) == 0.0


def test_label_summary_names_what_the_labels_are() -> None:
    # Two values: the larger one is the positive class, whatever the values are.
    assert summarize_labels(np.array([-1, 1, 1, 1], dtype=np.float32)) == "positive share 0.750"
    assert summarize_labels(np.array([0, 1, 0, 0], dtype=np.float32)) == "positive share 0.250"
    assert summarize_labels(np.array([1, 1], dtype=np.float32)) == "every label 1"
    assert summarize_labels(np.array([-1, -1], dtype=np.float32)) == "every label -1"
    # A few classes: no "positive share" of class indices; the user's own values.
    assert summarize_labels(np.array([1, 2, 3, 5, 3, 3], dtype=np.float32)) == (
        "4 label values, the most common 3 (share 0.500)")
    # A real-valued target: its range.
    assert summarize_labels(np.linspace(-2.5, 4.0, 100)) == (
        "labels from -2.5 to 4 (100 distinct values)")
    assert summarize_labels(np.zeros(0, dtype=np.float32)) == "no labels"
    # From a scan's counts (shipping local), the same words as from the rows.
    assert label_summary([0.0, 1.0], [3, 1]) == "positive share 0.250"
