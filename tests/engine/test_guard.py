"""The swing guard: which evaluations count as a swing, and what it changes then."""

from __future__ import annotations

import pytest

from hogwild.engine.guard import SwingGuard


def test_a_drop_beyond_the_tolerance_halves_the_step_and_tightens_async_staleness() -> None:
    guard = SwingGuard("async", staleness=2, tolerance=0.02)
    assert guard.observe(0.0, 0.69, 0.50) is None
    assert guard.observe(1.0, 0.30, 0.90) is None
    assert guard.observe(1.5, 0.31, 0.885) is None        # 1.5 points: within tolerance
    adjustment = guard.observe(2.0, 0.40, 0.85)            # 5 points below the best
    assert adjustment is not None
    assert adjustment.number == 1 and adjustment.lr_scale == 0.5
    assert adjustment.staleness == 1
    assert "0.8500 swung 5.0 points below the best 0.9000 at epoch 2.00" in adjustment.reason
    assert "step size x0.5" in adjustment.describe()
    assert "staleness bound 1" in adjustment.describe()


def test_after_an_adjustment_the_next_evaluations_are_only_watched() -> None:
    guard = SwingGuard("async", staleness=None, tolerance=0.02, cooldown=2)
    guard.observe(0, 0.3, 0.9)
    first = guard.observe(1, 0.5, 0.8)
    assert first is not None and first.staleness == 1
    assert guard.observe(2, 0.5, 0.8) is None   # cooldown
    assert guard.observe(3, 0.5, 0.8) is None   # cooldown
    second = guard.observe(4, 0.5, 0.8)
    assert second is not None and second.number == 2 and second.lr_scale == 0.25
    assert second.staleness is None  # already at 1: nothing tighter to say


def test_sync_runs_only_shrink_the_step_and_at_most_four_times() -> None:
    guard = SwingGuard("sync", staleness=2, tolerance=0.02, cooldown=0)
    guard.observe(0, 0.3, 0.9)
    made = [guard.observe(i, 0.5, 0.8) for i in range(1, 10)]
    taken = [a for a in made if a is not None]
    assert [a.lr_scale for a in taken] == [0.5, 0.25, 0.125, 0.0625]
    assert all(a.staleness is None for a in taken)


def test_a_drop_within_the_validation_sets_noise_is_not_a_swing() -> None:
    """100 validation rows at 0.9: one standard error is 3 points, so 5 is noise."""
    guard = SwingGuard("sync", staleness=None, tolerance=0.02, val_rows=100)
    guard.observe(0, 0.3, 0.90)
    assert guard.observe(1, 0.35, 0.85) is None
    assert guard.observe(2, 0.6, 0.75) is not None   # 15 points: beyond 3 standard errors


def test_without_an_accuracy_a_loss_a_quarter_above_the_best_is_a_swing() -> None:
    guard = SwingGuard("sync", staleness=None, tolerance=0.02)
    guard.observe(0, 2.0, None)
    guard.observe(1, 1.0, None)
    assert guard.observe(2, 1.2, None) is None
    adjustment = guard.observe(3, 1.3, None)
    assert adjustment is not None and "rose 1.30x above the best 1" in adjustment.reason


def test_a_non_finite_loss_is_left_to_the_divergence_check() -> None:
    guard = SwingGuard("sync", staleness=None, tolerance=0.02)
    guard.observe(0, 0.3, 0.9)
    assert guard.observe(1, float("nan"), 0.1) is None
    assert guard.observe(2, None, None) is None


def test_tolerance_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match=r"swing_tolerance must be in \(0, 1\)"):
        SwingGuard("sync", None, tolerance=2.0)
