"""Synthetic generators: shapes, row lengths, norms, balance, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.synthetic import make_rcv1_like, make_seed000


def row_norms(d) -> np.ndarray:  # type: ignore[no-untyped-def]
    sq = np.add.reduceat(d.values.astype(np.float64) ** 2, d.indptr[:-1])
    return np.sqrt(sq)


def test_rcv1_like_shape_and_values() -> None:
    d = make_rcv1_like(20000, seed=1)
    d.validate()
    lengths = np.diff(d.indptr)
    assert d.n_rows == 20000 and d.n_features == 47236
    assert lengths.min() >= 1
    assert 65 <= lengths.mean() <= 85
    assert lengths.max() > 3 * lengths.mean()  # skewed row lengths
    assert (d.values > 0).all()
    assert np.allclose(row_norms(d), 1.0, atol=1e-5)
    assert 0.4 <= (d.labels > 0).mean() <= 0.6
    assert set(np.unique(d.labels).tolist()) == {-1.0, 1.0}
    counts = np.bincount(d.indices, minlength=d.n_features)
    top = np.sort(counts)[::-1]
    assert top[:100].sum() > 0.1 * d.nnz  # Zipf-like: a few features are everywhere


def test_rcv1_like_labels_follow_a_separator() -> None:
    from sklearn.linear_model import LogisticRegression

    clean = make_rcv1_like(4000, noise=0.0, seed=2)
    noisy = make_rcv1_like(4000, noise=0.3, seed=2)
    assert np.array_equal(clean.indices, noisy.indices)
    flipped = (clean.labels != noisy.labels).mean()
    assert 0.25 <= flipped <= 0.35
    model = LogisticRegression(C=100.0, max_iter=300).fit(clean.slice(0, 3000).to_scipy(),
                                                          clean.labels[:3000])
    acc = (model.predict(clean.slice(3000, 4000).to_scipy()) == clean.labels[3000:]).mean()
    assert acc > 0.72


def test_rcv1_like_small_feature_space_fills_rows() -> None:
    d = make_rcv1_like(300, n_features=50, avg_nnz=40, seed=0)
    d.validate()
    assert np.diff(d.indptr).max() <= 50


@pytest.mark.parametrize("make", [make_rcv1_like, make_seed000])
def test_reproducible_and_seed_dependent(make) -> None:  # type: ignore[no-untyped-def]
    a = make(3000, seed=5)
    b = make(3000, seed=5, threads=1)
    c = make(3000, seed=6)
    for name in ("indptr", "indices", "values", "labels"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.indices[:1000], c.indices[:1000])


def test_seed000_shape_and_values() -> None:
    d = make_seed000(5000, seed=3)
    d.validate()
    lengths = np.diff(d.indptr)
    assert d.n_features == 1_000_000
    assert lengths.min() >= 10 and lengths.max() <= 60
    assert len(np.unique(lengths)) > 40
    assert (d.values > 0).all() and (d.values <= 1).all()
    assert 0.45 <= (d.labels > 0).mean() <= 0.55
    b = make_seed000(2000, n_features=500, min_nnz=3, max_nnz=5, binary=True, noise=0.1)
    b.validate()
    assert (b.values == 1.0).all() and np.diff(b.indptr).min() >= 3


def test_generator_argument_errors() -> None:
    with pytest.raises(ValueError):
        make_seed000(10, min_nnz=5, max_nnz=4)
    with pytest.raises(ValueError):
        make_rcv1_like(10, noise=0.9)
    assert make_rcv1_like(0).n_rows == 0
