"""CSRData: construction checks, take/slice/with_n_features, validate, scipy round trip."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.csr import CSRData, concat_rows
from hogwild.errors import DataError


def small() -> CSRData:
    # rows: [0:1, 3:2], [], [1:3], [0:4, 1:5, 2:6]
    return CSRData(np.array([0, 2, 2, 3, 6]), np.array([0, 3, 1, 0, 1, 2]),
                   np.array([1, 2, 3, 4, 5, 6], dtype=np.float64),
                   np.array([1, -1, 1, -1]), 4)


def dense(d: CSRData) -> np.ndarray:
    return np.asarray(d.to_scipy().toarray())


def test_sizes_and_dtypes() -> None:
    d = small()
    assert (d.n_rows, d.nnz, d.n_features) == (4, 6, 4)
    assert d.indptr.dtype == np.int64 and d.indices.dtype == np.int32
    assert d.values.dtype == np.float32 and d.labels.dtype == np.float32
    assert d.nbytes == 5 * 8 + 6 * 4 + 6 * 4 + 4 * 4


def test_construction_rejects_inconsistent_lengths() -> None:
    with pytest.raises(DataError):
        CSRData(np.array([0, 1]), np.array([0, 1]), np.array([1.0]), np.array([1.0]), 2)
    with pytest.raises(DataError):
        CSRData(np.array([0, 1]), np.array([0]), np.array([1.0]), np.array([1.0, 2.0]), 2)
    with pytest.raises(DataError):
        CSRData(np.array([1, 1]), np.array([0]), np.array([1.0]), np.array([1.0]), 2)


def test_take_gathers_rows_in_order_and_copies() -> None:
    d = small()
    t = d.take(np.array([3, 0, 3, 1]))
    full = dense(d)
    assert np.array_equal(dense(t), full[[3, 0, 3, 1]])
    assert t.labels.tolist() == [-1, 1, -1, -1]
    t.values[0] = 99.0
    assert d.values[3] == 4.0  # physically copied
    t.validate()
    assert d.take(np.array([], dtype=np.int64)).n_rows == 0
    with pytest.raises(IndexError):
        d.take(np.array([4]))


def test_slice_is_rebased_view() -> None:
    d = small()
    s = d.slice(1, 4)
    assert s.indptr.tolist() == [0, 0, 1, 4]
    assert np.array_equal(dense(s), dense(d)[1:4])
    assert np.shares_memory(s.values, d.values)
    assert d.slice(3, 1).n_rows == 0
    assert d.slice(2, 100).n_rows == 2
    s.validate()


def test_with_n_features() -> None:
    d = small()
    assert d.with_n_features(10).n_features == 10
    with pytest.raises(DataError):
        d.with_n_features(3)


@pytest.mark.parametrize("fault", ["range", "order", "dup", "nan", "label", "indptr"])
def test_validate_finds_faults(fault: str) -> None:
    d = small()
    indptr, indices, values, labels = (d.indptr.copy(), d.indices.copy(), d.values.copy(),
                                       d.labels.copy())
    if fault == "range":
        indices[1] = 4
    elif fault == "order":
        indices[3:6] = [1, 0, 2]
    elif fault == "dup":
        indices[3:6] = [0, 0, 2]
    elif fault == "nan":
        values[2] = np.nan
    elif fault == "label":
        labels[1] = np.inf
    else:
        indptr[1:4] = [3, 2, 3]
    bad = CSRData(indptr, indices, values, labels, 4)
    with pytest.raises(DataError):
        bad.validate()
    small().validate()


def test_scipy_round_trip_sorts_and_sums_duplicates() -> None:
    sp = pytest.importorskip("scipy.sparse")
    d = small()
    back = CSRData.from_scipy(d.to_scipy(), d.labels)
    for name in ("indptr", "indices", "values", "labels"):
        assert np.array_equal(getattr(back, name), getattr(d, name))
    m = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 2]), np.array([0, 3])),
                      shape=(1, 3))
    c = CSRData.from_scipy(m, [1])
    assert c.indices.tolist() == [0, 2] and c.values.tolist() == [2.0, 4.0]
    c.validate()


def test_row_weights_default_to_none_and_are_coerced() -> None:
    d = small()
    assert d.weights is None
    w = small().with_weights([1, 0.5, 0, 2])
    assert w.weights is not None and w.weights.dtype == np.float32
    assert w.weights.tolist() == [1.0, 0.5, 0.0, 2.0]
    assert w.nbytes == d.nbytes + 4 * 4
    assert CSRData.from_scipy(d.to_scipy(), d.labels, [1, 2, 3, 4]).weights.tolist() == [
        1, 2, 3, 4]


@pytest.mark.parametrize(("weights", "message"), [
    ([1.0, 1.0, 1.0], "one per row"),
    ([[1.0, 1.0], [1.0, 1.0]], "one per row"),
    ([1.0, -0.5, 1.0, 1.0], "row 1 must be finite and >= 0"),
    ([1.0, 1.0, float("nan"), 1.0], "row 2 must be finite and >= 0"),
    ([1.0, 1.0, 1.0, float("inf")], "row 3 must be finite and >= 0"),
    ([1.0, 1.0, 1.0, 1e39], "row 3 must be finite and >= 0"),  # overflows float32
    (["a", "b", "c", "d"], "must be numbers"),
])
def test_row_weights_are_validated(weights: list[object], message: str) -> None:
    with pytest.raises(DataError, match=message):
        small().with_weights(weights)


@pytest.mark.parametrize("pieces_from", [1 << 40, 50, 7])
def test_a_large_take_is_copied_in_pieces_alike(monkeypatch: pytest.MonkeyPatch,
                                                pieces_from: int) -> None:
    from hogwild.data import csr

    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 9, 500)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    nnz = int(indptr[-1])
    d = CSRData(indptr, rng.integers(0, 1000, nnz).astype(np.int32),
                rng.random(nnz).astype(np.float32), rng.random(500).astype(np.float32), 1000)
    rows = np.concatenate([rng.permutation(500), rng.integers(0, 500, 100)])
    monkeypatch.setattr(csr, "default_threads", lambda: 4)
    monkeypatch.setattr(csr, "PARALLEL_TAKE_NNZ", pieces_from)  # 1, 4 and 4 pieces
    t = d.take(rows)
    expect_indices = np.concatenate([d.indices[indptr[r]:indptr[r + 1]] for r in rows])
    expect_values = np.concatenate([d.values[indptr[r]:indptr[r + 1]] for r in rows])
    assert np.array_equal(t.indices, expect_indices)
    assert np.array_equal(t.values, expect_values)
    assert np.array_equal(np.diff(t.indptr), lengths[rows])
    assert np.array_equal(t.labels, d.labels[rows])


def test_row_weights_follow_take_slice_and_feature_count() -> None:
    d = small().with_weights([1, 2, 3, 4])
    assert d.take(np.array([3, 0, 0])).weights.tolist() == [4, 1, 1]
    assert d.slice(1, 3).weights.tolist() == [2, 3]
    assert d.with_n_features(10).weights.tolist() == [1, 2, 3, 4]
    assert small().take(np.array([1])).weights is None
    assert small().slice(0, 2).weights is None


@pytest.mark.parametrize(("rows", "nnz"), [(0, 0), (3, 5), (10_000, 1_000_000)])
def test_concat_rows_copies_parts_as_they_come_into_arrays_of_any_estimate(
        rows: int, nnz: int) -> None:
    """A generator of parts (some weighted, a label missing: NaN), sized by
    estimates too small, about right and too large: the same rows, weights (1 where a part
    has none), labels and dtypes as concatenating them all at once."""
    rng = np.random.default_rng(4)
    parts = []
    for i, n in enumerate((7, 0, 300, 41, 5000)):
        lengths = rng.integers(0, 9, n)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        total = int(indptr[-1])
        labels = rng.normal(size=n)
        if n:
            labels[0] = np.nan
        parts.append(CSRData(indptr, rng.integers(0, 50, total).astype(np.int32),
                             rng.normal(size=total).astype(np.float32), labels, 50, None,
                             rng.random(n).astype(np.float32) if i % 2 else None))
    got = concat_rows(iter(parts), 50, rows, nnz)
    want_len = np.concatenate([np.diff(p.indptr) for p in parts])
    np.testing.assert_array_equal(np.diff(got.indptr), want_len)
    np.testing.assert_array_equal(got.indices, np.concatenate([p.indices for p in parts]))
    np.testing.assert_array_equal(got.values, np.concatenate([p.values for p in parts]))
    np.testing.assert_array_equal(got.labels, np.concatenate([p.labels for p in parts]))
    assert got.labels.dtype == np.float32 and np.isnan(got.labels[0]) and got.indptr[0] == 0
    assert got.weights is not None
    np.testing.assert_array_equal(got.weights, np.concatenate(
        [p.weights if p.weights is not None else np.ones(p.n_rows, np.float32)
         for p in parts]))
    # No weights anywhere: none in the result; nothing at all: an empty set.
    plain = concat_rows([CSRData(p.indptr, p.indices, p.values, p.labels, 50) for p in parts],
                        50)
    assert plain.weights is None and plain.n_rows == got.n_rows
    empty = concat_rows(iter([]), 7, rows, nnz)
    assert (empty.n_rows, empty.nnz, empty.n_features) == (0, 0, 7)
