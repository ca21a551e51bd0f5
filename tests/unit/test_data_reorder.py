"""Feature renumbering by document frequency: order, renumbered rows, weights mapped back."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.transform import reorder
from hogwild.data.transform.reorder import (
    check_order,
    document_frequency,
    frequency_order,
    identity_order,
    renumber,
    restore_weights,
    to_internal,
)
from hogwild.errors import DataError


def random_csr(n_rows: int = 300, n_features: int = 50, seed: int = 0) -> CSRData:
    """Sorted rows with Zipf-like popularity scattered over the ids."""
    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(n_features) + 3.0)
    p = p[rng.permutation(n_features)]
    p /= p.sum()
    rows = [np.unique(rng.choice(n_features, size=rng.integers(0, 12), p=p))
            for _ in range(n_rows)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    indices = np.concatenate(rows)
    values = rng.normal(size=indices.shape[0])
    labels = rng.choice([-1.0, 1.0], size=n_rows)
    return CSRData(indptr, indices, values, labels, n_features)


def dense(d: CSRData) -> np.ndarray:
    out = np.zeros((d.n_rows, d.n_features))
    for r in range(d.n_rows):
        lo, hi = d.indptr[r], d.indptr[r + 1]
        out[r, d.indices[lo:hi]] = d.values[lo:hi]
    return out


def test_document_frequency_counts_rows_per_feature() -> None:
    d = random_csr()
    np.testing.assert_array_equal(document_frequency(d), (dense(d) != 0).sum(axis=0))


def test_frequency_order_ranks_by_descending_frequency_ties_by_id() -> None:
    d = CSRData(np.array([0, 3, 5, 6]), np.array([0, 2, 3, 2, 3, 1]), np.ones(6),
                np.ones(3), 5)
    # frequencies: 0:1 1:1 2:2 3:2 4:0 -> ranks 2, 3 first, then 0, 1, then 4.
    np.testing.assert_array_equal(frequency_order(d), [2, 3, 0, 1, 4])


def test_frequency_order_is_a_permutation_with_non_increasing_counts() -> None:
    d = random_csr()
    order = frequency_order(d)
    assert order.dtype == np.int32
    assert sorted(order.tolist()) == list(range(d.n_features))
    df_by_new_id = np.empty(d.n_features, dtype=np.int64)
    df_by_new_id[order] = document_frequency(d)
    assert np.all(np.diff(df_by_new_id) <= 0)


def test_renumber_moves_columns_and_keeps_rows_valid() -> None:
    d = random_csr()
    order = frequency_order(d)
    r = renumber(d, order)
    r.validate()  # indices strictly increasing per row, in range
    assert r.indptr is d.indptr and r.labels is d.labels
    expected = np.zeros_like(dense(d))
    expected[:, order] = dense(d)
    np.testing.assert_array_equal(dense(r), expected)
    # Frequent features come first: id 0 is the most frequent feature.
    assert document_frequency(r)[0] == document_frequency(d).max()


def test_renumbered_model_scores_like_the_original() -> None:
    d = random_csr(seed=1)
    order = frequency_order(d)
    r = renumber(d, order)
    w = np.random.default_rng(3).normal(size=d.n_features + 1)
    w_int = to_internal(w, order)
    assert w_int[-1] == w[-1]
    np.testing.assert_allclose(dense(r) @ w_int[:-1], dense(d) @ w[:-1], rtol=1e-12)
    np.testing.assert_array_equal(restore_weights(w_int, order), w)


def test_sort_and_threaded_paths_match_the_bitmap(monkeypatch: pytest.MonkeyPatch) -> None:
    d = random_csr(n_rows=2000, n_features=5000, seed=2)
    order = frequency_order(d)
    plain = renumber(d, order)
    monkeypatch.setattr(reorder, "_BITMAP_MAX_FEATURES", 0)
    by_sort = renumber(d, order)
    monkeypatch.setattr(reorder, "_BITMAP_MAX_FEATURES", 1 << 22)
    monkeypatch.setattr(reorder, "_MIN_ROWS_PER_THREAD", 300)
    threaded = renumber(d, order)
    for other in (by_sort, threaded):
        np.testing.assert_array_equal(other.indices, plain.indices)
        np.testing.assert_array_equal(other.values, plain.values)


def test_identity_order_changes_nothing() -> None:
    d = random_csr(seed=4)
    r = renumber(d, identity_order(d.n_features))
    np.testing.assert_array_equal(r.indices, d.indices)
    np.testing.assert_array_equal(r.values, d.values)


def test_empty_data() -> None:
    d = CSRData(np.zeros(1), np.zeros(0), np.zeros(0), np.zeros(0), 3)
    order = frequency_order(d)
    np.testing.assert_array_equal(order, [0, 1, 2])
    assert renumber(d, order).nnz == 0


@pytest.mark.parametrize("order", [[0, 1], [0, 1, 1], [0, 1, 3], [-1, 0, 1]])
def test_bad_orders_are_rejected(order: list[int]) -> None:
    with pytest.raises(DataError, match="order"):
        check_order(order, 3)


def test_repeated_index_in_a_row_is_rejected() -> None:
    d = CSRData(np.array([0, 2]), np.array([1, 1]), np.ones(2), np.ones(1), 3)
    with pytest.raises(DataError, match="twice"):
        renumber(d, identity_order(3))


def test_index_out_of_range_is_rejected_before_the_kernels() -> None:
    d = CSRData(np.array([0, 2]), np.array([0, 7]), np.ones(2), np.ones(1), 3)
    with pytest.raises(DataError, match="outside"):
        renumber(d, identity_order(3))
    with pytest.raises(DataError, match="outside"):
        frequency_order(d)


def test_weights_of_the_wrong_length_are_rejected() -> None:
    with pytest.raises(DataError):
        restore_weights(np.zeros(5), identity_order(3))


def test_count_features_skips_and_counts_out_of_range() -> None:
    counts = np.zeros(4, dtype=np.int64)
    bad = reorder.count_features(np.array([0, 3, 3, 4, -1, 1], dtype=np.int32), counts)
    assert bad == 2
    np.testing.assert_array_equal(counts, [1, 1, 0, 2])


def test_renumber_keeps_the_row_weights() -> None:
    data = random_csr()
    weights = np.linspace(0.0, 3.0, data.n_rows)
    out = renumber(data.with_weights(weights), frequency_order(data))
    assert out.weights is not None
    assert np.array_equal(out.weights, weights.astype(np.float32))
