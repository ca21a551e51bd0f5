"""A round's arithmetic works in buffers kept from round to round, with the same results."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from hogwild.engine.momentum import BlockMomentum, block_momentum
from hogwild.engine.round import RoundEngine
from hogwild.engine.rules import ExchangeRules

F64 = npt.NDArray[np.float64]
BIG = 1_000_000  # a model of 8 MB: one model-sized allocation stands out of the noise


def _peak_bytes(step: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _momentum_engine(dim: int) -> RoundEngine:
    rules = ExchangeRules(averaged_from=dim - 1, n_peers=1, combine="momentum")
    return RoundEngine(rules, np.zeros(dim))


def test_a_round_allocates_nothing_of_the_models_size() -> None:
    """After the first round, build (momentum filter, build_delta, the residual) allocates
    only what it returns: a few changed entries, not arrays of the model's size."""
    engine = _momentum_engine(BIG)
    engine.w[[5, 17]] += [0.5, -0.25]
    engine.build(1, False, dict)  # the first round allocates the buffers
    engine.w[[3]] += 1.0

    def second_round() -> object:
        return engine.build(2, False, dict)

    # A float64 model is 8 * BIG bytes, build_delta's int32 / float32 outputs 4 * BIG each;
    # the finiteness check's mask (a byte per weight) is the largest temporary left.
    assert _peak_bytes(second_round) < 2 * BIG


def test_the_momentum_filter_is_sized_by_the_touched_coordinates() -> None:
    """Hashed features: a model of BIG weights of which a round touches a few. The filter's
    rounds, the first included, allocate a byte per weight (the round's mask) and keep only
    what the touched coordinates need: no model-sized float64 buffers."""
    filt = BlockMomentum()
    w, snap = np.zeros(BIG), np.zeros(BIG)
    touched = np.arange(7, BIG, BIG // 50)

    def rounds() -> object:
        for r in range(3):
            w[touched] += 0.25 * (r + 1)
            filt.filter(w, snap, 2, final=False)
            snap[touched] = w[touched].astype(np.float32)  # sent, rounded to float32
            filt.sent(w, snap)
        return None

    tracemalloc.start()
    try:
        rounds()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * BIG
    assert kept < 100 * touched.size
    assert filt.v is not None
    assert np.count_nonzero(filt.v) == touched.size


def test_a_built_delta_is_not_overwritten_by_the_next_round() -> None:
    engine = _momentum_engine(64)
    engine.w[[1, 2]] += [0.5, -0.5]
    idx1, val1 = engine.build(1, False, dict)
    kept = idx1.copy(), val1.copy()
    engine.w[:] += 0.125  # the next round changes every coordinate
    idx2, _ = engine.build(2, False, dict)
    assert idx2.size > idx1.size
    np.testing.assert_array_equal(idx1, kept[0])
    np.testing.assert_array_equal(val1, kept[1])


def _reference_filter(v: F64, unsent: F64 | None, w: F64, snap: F64, workers: int,
                      final: bool) -> F64:
    """BMUF's per-worker term, written out plainly; returns the new momentum, updates w."""
    change = w - snap
    if unsent is not None:
        change = change - unsent
    eta = block_momentum(workers)
    v_new: F64 = v * eta + change * (1.0 / max(1, workers))
    term = v_new - v * eta if final else v_new * (1.0 + eta) - v * eta
    if unsent is not None:
        term = term + unsent
    w[:] = snap + term
    return v_new


@pytest.mark.parametrize("share", [1.0, 0.05, 0.01])
def test_the_momentum_filter_is_bit_identical_to_the_plain_formula(share: float) -> None:
    """``share``: of the coordinates a round changes. 1: the dense buffers from the first
    round; 0.05 and 0.01: the touched coordinates alone, until they grow past SPARSE_SHARE
    of the model (then the buffers)."""
    rng = np.random.default_rng(3)
    for workers in (1, 2, 5):
        filt = BlockMomentum()
        w = rng.normal(size=300)
        snap = w.copy()
        w_ref, snap_ref = w.copy(), snap.copy()
        v_ref = np.zeros_like(w)
        unsent_ref: F64 | None = None
        for r in range(12):
            step = rng.normal(size=300) * 1e-3 * (rng.random(300) < share)
            w += step
            w_ref += step
            final = r == 11
            filt.filter(w, snap, workers, final)
            v_ref = _reference_filter(v_ref, unsent_ref, w_ref, snap_ref, workers, final)
            np.testing.assert_array_equal(w, w_ref)
            assert filt.v is not None
            np.testing.assert_array_equal(filt.v, v_ref)
            # Part of the term is sent (float32 rounding): the rest is owed next round.
            for s, ww in ((snap, w), (snap_ref, w_ref)):
                s += (ww - s).astype(np.float32).astype(np.float64)
            filt.sent(w, snap)
            unsent_ref = w_ref - snap_ref
            assert filt.unsent is not None
            np.testing.assert_array_equal(filt.unsent, unsent_ref)
