"""The coordinator's comparison of each worker's final model with the global one."""

from __future__ import annotations

import tracemalloc

import numpy as np

from hogwild.coordinator.report import max_abs_diff


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
