"""Early stopping: patience, target loss, divergence, best weights kept; the stall warning;
the signal that ends a run."""

from __future__ import annotations

import math

import numpy as np

from hogwild.cluster.coordinator.watch.stopping import (
    StallWatch,
    StopRules,
    StopSignal,
    regression_warning,
)
from hogwild.engine.stopping import EarlyStopping, better


def test_patience_counts_evaluations_without_improvement() -> None:
    stopper = EarlyStopping(patience=2, min_delta=0.01)
    assert stopper.update(1.0, np.array([1.0])) is None
    assert stopper.update(0.5, np.array([2.0])) is None
    assert stopper.update(0.495, np.array([3.0])) is None  # below min_delta: no progress
    assert stopper.update(0.6, np.array([4.0])) == "early stopping"
    # Patience counted from 0.5; the model kept is the lowest loss's all the same.
    assert stopper.best_index == 2 and stopper.best_loss == 0.5
    assert stopper.best_weights is not None and stopper.best_weights[0] == 3.0


def test_a_classifier_keeps_its_most_accurate_model() -> None:
    """A lower loss at several points less accuracy (a swinging run) is not the one kept;
    equal accuracies go to the lower loss."""
    stopper = EarlyStopping()
    stopper.update(0.40, np.array([1.0]), accuracy=0.90)
    stopper.update(0.35, np.array([2.0]), accuracy=0.84)   # lower loss, 6 points worse
    assert stopper.best_index == 0 and stopper.best_weights is not None
    assert stopper.best_weights[0] == 1.0
    stopper.update(0.38, np.array([3.0]), accuracy=0.90)   # as accurate, lower loss
    assert stopper.best_index == 2 and stopper.kept_accuracy == 0.90
    restored = EarlyStopping()
    restored.restore(stopper.state(), stopper.best_weights)
    restored.update(0.30, np.array([4.0]), accuracy=0.89)
    assert restored.best_index == 2  # the checkpoint's kept accuracy still counts


def test_best_weights_are_a_copy() -> None:
    stopper = EarlyStopping()
    w = np.zeros(3)
    stopper.update(1.0, w)
    w[:] = 5
    assert stopper.best_weights is not None and not stopper.best_weights.any()


def test_the_coordinator_keeps_the_evaluated_copy_itself() -> None:
    """The coordinator scores a copy of the global model that nobody writes: kept as the best
    model without a second model-sized copy (8 bytes per feature at 2^22 features)."""
    rules = StopRules(epochs=1, train_rows=1, time_budget=0.0, early=EarlyStopping())
    scored = np.arange(4.0)
    rules.evaluation(1.0, scored)
    assert rules.best_weights is scored
    worse = np.ones(4)
    rules.evaluation(2.0, worse)
    assert rules.best_weights is scored


def test_target_loss_and_divergence() -> None:
    assert EarlyStopping(target_loss=0.2).update(0.2) == "target loss"
    assert EarlyStopping().update(math.nan) == "diverged"
    never = EarlyStopping(patience=0)
    assert all(never.update(1.0) is None for _ in range(10))


def test_a_saved_model_far_worse_than_the_best_evaluated_one_is_reported() -> None:
    # The shape measured with 4 workers summing their deltas: good early, bad at the end.
    text = regression_warning([0.9, 0.36, 0.41, 1.2, None, 0.38, 1.71], 1.71)
    assert text is not None
    assert "0.3600" in text and "4.8x" in text and "smaller learning_rate" in text
    # Ordinary runs: the end is the best, or within noise of it; nothing to say.
    assert regression_warning([0.9, 0.5, 0.41, 0.40], 0.40) is None
    assert regression_warning([0.9, 0.5, 0.40, 0.45], 0.45) is None
    # Tiny losses: 1.5x of almost nothing is no regression either.
    assert regression_warning([0.010, 0.004], 0.02) is None
    # Nothing evaluated, or no validation set: no claim.
    assert regression_warning([], 1.0) is None
    assert regression_warning([None, float("nan")], 1.0) is None
    assert regression_warning([0.4], None) is None


def test_a_stall_is_told_after_the_floor_and_far_longer_than_any_gap_then_ever_more_rarely(
        ) -> None:
    watch = StallWatch(floor=30.0)
    assert watch.observe(0, 0.0) is None
    assert watch.observe(0, 29.9) is None
    assert watch.observe(0, 30.0) == 30.0
    assert watch.observe(0, 59.0) is None  # the next one waits twice as long
    assert watch.observe(0, 60.0) == 60.0
    # Deltas again: the clock starts over, and a gap of 5 s makes 50 s of silence the limit.
    assert watch.observe(1, 65.0) is None
    assert watch.observe(2, 70.0) is None
    assert watch.observe(2, 100.0) is None
    assert watch.observe(2, 120.0) == 50.0


def test_a_stall_that_outlasts_three_warnings_ends_the_run() -> None:
    """Warned at 30, 60 and 120 s of silence; the third warning ends the run. A delta
    between starts the count again."""
    watch = StallWatch(floor=30.0)
    assert watch.observe(0, 0.0) is None
    assert watch.observe(0, 30.0) == 30.0 and not watch.stalled
    assert watch.observe(0, 60.0) == 60.0 and not watch.stalled
    assert watch.observe(1, 61.0) is None and not watch.stalled   # a delta: counted anew
    assert watch.observe(1, 91.0) == 30.0 and not watch.stalled
    assert watch.observe(1, 121.0) == 60.0 and not watch.stalled
    assert watch.observe(1, 180.0) is None and not watch.stalled
    assert watch.observe(1, 181.0) == 120.0 and watch.stalled


def test_the_first_signal_decides_how_the_run_ends() -> None:
    # A SIGUSR1 after the SIGTERM of a hand-over must not turn it into a finish (or back).
    stop = StopSignal()
    assert not stop.is_set() and not stop.wait(0.0)
    stop.set("SIGTERM", hand_over=True)
    stop.set("SIGUSR1")
    assert stop.is_set() and stop.wait(0.0)
    assert (stop.name, stop.hand_over) == ("SIGTERM", True)
    finish = StopSignal()
    finish.set("SIGUSR1")
    finish.set("SIGTERM", hand_over=True)
    assert (finish.name, finish.hand_over) == ("SIGUSR1", False)


def test_every_trainer_keeps_its_best_model_by_one_rule() -> None:
    """A classifier: the most accurate, the lower loss breaking a tie; a regression (or no
    validation accuracy): the lower loss."""
    cases = [((0.35, 0.84), (0.40, 0.90), False), ((0.45, 0.91), (0.40, 0.90), True),
             ((0.38, 0.90), (0.40, 0.90), True), ((0.42, 0.90), (0.40, 0.90), False),
             ((0.30, None), (0.40, None), True), ((0.50, None), (0.40, None), False)]
    for (loss, acc), (kept_loss, kept_acc), expected in cases:
        assert better(loss, acc, kept_loss, kept_acc) is expected


def test_workers_that_trained_every_epoch_end_the_run_on_max_epochs() -> None:
    """Whether the monitor sees the last round's examples before the final deltas or after,
    a run that trained the epochs asked for ends on "max epochs"."""
    from hogwild.cluster.coordinator.watch.stopping import StopRules

    rules = StopRules(epochs=2, train_rows=100, time_budget=0.0, early=EarlyStopping())
    assert rules.budget(1.0, 200, all_finished=False, live_workers=2) == "max epochs"
    assert rules.budget(1.0, 200, all_finished=True, live_workers=2) == "max epochs"
    assert rules.budget(1.0, 150, all_finished=True, live_workers=2) == "workers finished"
    assert rules.budget(1.0, 150, all_finished=False, live_workers=2) is None
    assert rules.budget(1.0, 200, all_finished=True, live_workers=0) == "no live workers"
