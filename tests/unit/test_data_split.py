"""Permutation, train/validation/test split and shards."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.formats.placement import permuted
from hogwild.data.transform.split import shard, train_val_test_split


def numbered(n: int) -> CSRData:
    """Row i holds the single feature i with value i, label = i: rows identify themselves."""
    return CSRData(np.arange(n + 1), np.arange(n), np.arange(n, dtype=np.float32),
                   np.arange(n, dtype=np.float32), max(n, 1))


def ids(d: CSRData) -> np.ndarray:
    return d.labels.astype(np.int64)


def test_permute_is_a_seeded_permutation() -> None:
    d = numbered(1000)
    p = permuted(d, 1)
    assert sorted(ids(p).tolist()) == list(range(1000))
    assert not np.array_equal(ids(p), np.arange(1000))
    assert np.array_equal(ids(permuted(d, 1)), ids(p))
    assert np.array_equal(p.indices, ids(p))  # rows moved whole


def test_split_disjoint_complete_sizes() -> None:
    d = numbered(1001)
    tr, va, te = train_val_test_split(d, val_fraction=0.1, test_fraction=0.2, seed=0)
    assert (va.n_rows, te.n_rows, tr.n_rows) == (100, 200, 701)
    all_ids = np.concatenate([ids(tr), ids(va), ids(te)])
    assert sorted(all_ids.tolist()) == list(range(1001))
    assert not np.array_equal(ids(tr), np.sort(ids(tr)))  # train comes permuted
    tr2, _, _ = train_val_test_split(d, val_fraction=0.1, test_fraction=0.2, seed=0)
    assert np.array_equal(ids(tr), ids(tr2))
    with pytest.raises(ValueError):
        train_val_test_split(d, val_fraction=0.5, test_fraction=0.5, seed=0)


def test_partition_shards() -> None:
    d = numbered(103)
    parts = shard(d, 4, seed=1)
    sizes = [p.n_rows for p in parts]
    assert sum(sizes) == 103 and max(sizes) - min(sizes) <= 1
    got = np.concatenate([ids(p) for p in parts])
    assert sorted(got.tolist()) == list(range(103))
    for p in parts:
        p.validate()


def test_replicate_shards() -> None:
    d = numbered(200)
    parts = shard(d, 3, seed=1, mode="replicate")
    for p in parts:
        assert sorted(ids(p).tolist()) == list(range(200))
    assert not np.array_equal(ids(parts[0]), ids(parts[1]))
    with pytest.raises(ValueError):
        shard(d, 2, seed=0, mode="mirror")
    with pytest.raises(ValueError):
        shard(d, 0, seed=0)


def test_row_weights_follow_splits_and_shards() -> None:
    from hogwild.data.transform.split import shard, split_shuffled, train_val_test_split

    base = _weighted()
    parts = train_val_test_split(base, val_fraction=0.2, test_fraction=0.2, seed=3)
    parts += split_shuffled(base, val_fraction=0.2, test_fraction=0.2)
    parts += tuple(shard(base, 3, seed=1))
    for part in parts:
        # Each row's weight is its label's (made so below): a row keeps its own weight.
        assert part.weights is not None
        assert np.array_equal(part.weights, part.labels * 10.0)


def _weighted() -> CSRData:
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 50, size=60).astype(np.float32)
    indptr = np.arange(61, dtype=np.int64)
    indices = rng.integers(0, 5, size=60).astype(np.int32)
    return CSRData(indptr, indices, np.ones(60, np.float32), labels, 5, weights=labels * 10.0)
