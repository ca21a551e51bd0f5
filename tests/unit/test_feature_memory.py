"""End-of-run steps on model-sized vectors make no more copies of them than they return."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from hogwild.cluster.coordinator.watch.report import max_abs_diff
from hogwild.model.saved import SavedModel
from hogwild.model.spec import ModelSpec


def test_max_abs_diff_equals_the_whole_vector_formula() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=1000), rng.normal(size=1000)
    for block in (1, 7, 256, 1000, 4096):
        assert max_abs_diff(a, b, block) == float(np.max(np.abs(a - b)))
    b[613] = np.nan
    assert np.isnan(max_abs_diff(a, b, 64))


def test_max_abs_diff_allocates_no_model_sized_temporaries() -> None:
    """At 2^22 features the whole-vector formula made two float64 temporaries (16 bytes per
    feature); a block at a time needs one block."""
    dim = 1 << 20
    a, b = np.zeros(dim), np.zeros(dim)
    b[dim - 3] = -2.5
    tracemalloc.start()
    try:
        assert max_abs_diff(a, b, 1 << 12) == 2.5
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < dim  # a byte per feature: far below one float64 copy (8 per feature)


def test_restore_gathers_into_one_new_vector() -> None:
    """Renumbered features back to the input's ids: the new vector alone (8 bytes per
    feature), where a copy and a gathered temporary made 16; the same values as indexing."""
    d = 1 << 20
    spec = ModelSpec.linear(d)
    rng = np.random.default_rng(2)
    w = rng.normal(size=spec.dim)
    order = rng.permutation(d)
    tracemalloc.start()
    try:
        out = spec.restore(w, order)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 9 * spec.dim
    expected = w.copy()
    expected[:d] = w[:d][order]
    np.testing.assert_array_equal(out, expected)


def test_restore_refuses_ids_outside_the_model() -> None:
    spec = ModelSpec.linear(3)
    with pytest.raises(IndexError):
        spec.restore(np.zeros(spec.dim), [0, 1, 3])


def test_a_saved_model_goes_to_its_file_without_an_archive_in_memory(tmp_path: Path) -> None:
    """The weights are written into the file as numpy streams them (16 MiB at a time), not
    into an in-memory archive then copied out of it (16 bytes per weight and more)."""
    w = np.zeros(1 << 22)  # 32 MiB
    w[[5, 77, 1 << 21]] = [1.5, -2.0, 0.25]
    model = SavedModel(w=w, loss="hinge")
    tracemalloc.start()
    try:
        model.save(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20
    np.testing.assert_array_equal(SavedModel.load(tmp_path).w, w)
