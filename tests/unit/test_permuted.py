"""placement.permuted: the rows of a seeded shuffle, as take() of that order gives them."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.formats.placement import permuted
from hogwild.data.transform.split import shuffle_order


def _rows(n: int, seed: int = 0, weighted: bool = False) -> CSRData:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, n)             # empty rows among them
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    nnz = int(indptr[-1])
    indices = np.concatenate([np.sort(rng.choice(500, k, replace=False)) for k in lengths]
                             ).astype(np.int32) if nnz else np.zeros(0, np.int32)
    return CSRData(indptr, indices, rng.standard_normal(nnz).astype(np.float32),
                   rng.choice([-1.0, 1.0], n).astype(np.float32), 500, "a note",
                   rng.random(n).astype(np.float32) if weighted else None)


@pytest.mark.parametrize(("n", "threads", "weighted"), [
    (0, 2, False), (1, 2, False), (5000, 1, False), (5000, 3, True)])
def test_permuted_rows_are_those_of_take_in_the_seeds_order(n: int, threads: int,
                                                            weighted: bool) -> None:
    data = _rows(n, weighted=weighted)
    got = permuted(data, seed=7, threads=threads)
    want = data.take(shuffle_order(n, 7))
    for name in ("indptr", "indices", "values", "labels"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.n_features == 500 and got.label_note == "a note"
    if weighted:
        assert got.weights is not None and want.weights is not None
        assert np.array_equal(got.weights, want.weights)
    else:
        assert got.weights is None
    got.validate()
