"""The synthetic regression generator and its data-source string."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.data.sources import load_source
from hogwild.data.synthetic import make_regression
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.errors import DataError
from hogwild.model.evaluation import evaluate


def test_rows_are_sparse_unit_norm_and_reproducible() -> None:
    d = make_regression(2000, n_features=300, min_nnz=5, max_nnz=20, seed=3)
    again = make_regression(2000, n_features=300, min_nnz=5, max_nnz=20, seed=3)
    d.validate()
    lengths = np.diff(d.indptr)
    assert lengths.min() >= 5 and lengths.max() <= 20
    sq = np.add.reduceat(d.values.astype(np.float64) ** 2, d.indptr[:-1])
    np.testing.assert_allclose(sq, 1.0, rtol=1e-5)
    np.testing.assert_array_equal(d.labels, again.labels)
    np.testing.assert_array_equal(d.indices, again.indices)
    # Real-valued targets, both signs, not a classification set.
    assert len(np.unique(d.labels)) > 1000 and d.labels.min() < 0 < d.labels.max()
    assert not np.array_equal(make_regression(50, seed=4).labels, make_regression(50).labels)


def test_targets_follow_a_linear_model_up_to_the_noise() -> None:
    d = make_regression(20_000, n_features=200, noise=0.1, seed=1)
    trainer = Trainer(d.n_features, TrainParams(loss="squared", learning_rate=0.5,
                                                mode="serial", l2=0.0))
    trainer.fit(d, 15)
    # Half the squared noise is the floor of the mean squared loss (0.5 * 0.1^2 = 0.005).
    loss = evaluate(d, trainer.w, "squared").loss
    assert 0.004 < loss < 0.02
    assert evaluate(d, trainer.w, "squared").accuracy is None


def test_source_string_and_defaults() -> None:
    d = load_source("synthetic:regression?rows=500&dim=50&noise=0&seed=2")
    assert d.n_rows == 500 and d.n_features == 50
    small = load_source("synthetic:regression?rows=10&dim=4")
    assert small.n_features == 4 and np.diff(small.indptr).max() <= 4
    assert load_source("synthetic:regression?rows=20", n_features=77).n_features == 77


@pytest.mark.parametrize("spec, needle", [
    ("synthetic:regression?rows=10&dim=0", "n_features"),
    ("synthetic:regression?rows=10&noise=-1", "noise"),
    ("synthetic:regression?rows=10&dim=5&min_nnz=6", "min_nnz"),
    ("synthetic:regression?rows=10&what=1", "what"),
    ("synthetic:regression?rows=ten", "rows"),
])
def test_bad_parameters_name_the_problem(spec: str, needle: str) -> None:
    with pytest.raises(DataError, match=needle):
        load_source(spec)
