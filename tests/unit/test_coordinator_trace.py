"""The trace's copies of the global model: one per model, shared while no delta arrives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hogwild.cluster.coordinator.watch.trace import ModelTrace, earlier_rows
from hogwild.data.csr import CSRData
from hogwild.model.losses import get_loss
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts

from .test_coordinator_state import DIM, _delta, _started


def test_a_snapshot_without_a_new_delta_shares_the_previous_copy() -> None:
    state = _started()
    trace = ModelTrace(0.001, DIM)
    trace.take(state.totals(unchanged=trace.latest()), 0.001)
    trace.take(state.totals(unchanged=trace.latest()), 0.002)  # nothing arrived in between
    assert state.model.apply_delta(_delta(state, 0, 1))
    trace.take(state.totals(unchanged=trace.latest()), 0.003)
    first, second, third = trace.snapshots
    assert second.w is first.w and trace.copies == 2
    assert third.w is not second.w and third.deltas_received == 1
    assert third.w[1] == 0.5 and first.w[1] == 0.0  # a copy, not the live model
    state.model.apply_delta(_delta(state, 1, 1))
    assert third.w[1] == 0.5


def test_shared_copies_are_scored_once_each_and_every_snapshot_gets_its_row() -> None:
    state = _started()
    trace = ModelTrace(0.001, DIM)
    for k in range(3):
        trace.take(state.totals(unchanged=trace.latest()), 0.001 * (k + 1))
    assert state.model.apply_delta(_delta(state, 0, 1))
    trace.take(state.totals(unchanged=trace.latest()), 0.004)
    # Rows with feature 1 = 1, label +1: hinge loss 1 at the zero model, 0.5 once w[1] = 0.5.
    n = 4
    val = CSRData(np.arange(n + 1, dtype=np.int64), np.ones(n, dtype=np.int32),
                  np.ones(n, dtype=np.float32), np.ones(n, dtype=np.float32), DIM - 1)
    rows = trace.score(val, 10, get_loss("hinge"), ModelSpec.linear(DIM - 1))
    assert [r["elapsed"] for r in rows] == [0.001, 0.002, 0.003, 0.004]
    assert [r["deltas_received"] for r in rows] == [0, 0, 0, 1]
    assert [r["val_loss"] for r in rows] == [1.0, 1.0, 1.0, 0.5]
    assert not trace.snapshots  # freed once scored


def test_the_trace_stops_at_its_budget_of_distinct_copies() -> None:
    state = _started()
    trace = ModelTrace(0.001, DIM)
    trace.limit = 2
    trace.take(state.totals(unchanged=trace.latest()), 0.001)
    trace.take(state.totals(unchanged=trace.latest()), 0.002)  # shared: not counted
    assert not trace.full
    assert state.model.apply_delta(_delta(state, 0, 1))
    trace.take(state.totals(unchanged=trace.latest()), 0.003)
    assert trace.full and not trace.due(1.0)


def _val(n: int = 4) -> CSRData:
    return CSRData(np.arange(n + 1, dtype=np.int64), np.ones(n, dtype=np.int32),
                   np.ones(n, dtype=np.float32), np.ones(n, dtype=np.float32), DIM - 1)


def test_a_trace_scored_at_a_hand_over_goes_on_in_the_resumed_run(tmp_path: Path) -> None:
    """The coordinator that hands the run over writes the rows of its copies; its successor
    keeps those up to the checkpoint it resumes (later ones are trained again) and scores
    its own after them. Scoring twice (a hand-over that could not be made) loses nothing."""
    state = _started()
    first = ModelTrace(0.001, DIM)
    first.take(state.totals(unchanged=first.latest()), 1.0)
    first.take(state.totals(unchanged=first.latest()), 2.0)
    loss, spec = get_loss("hinge"), ModelSpec.linear(DIM - 1)
    assert len(first.score(_val(), 10, loss, spec)) == 2
    first.take(state.totals(unchanged=first.latest()), 3.0)
    artifacts.write_trace(tmp_path, first.score(_val(), 10, loss, spec))
    kept = earlier_rows(tmp_path, upto=2.5)
    assert [r["elapsed"] for r in kept] == [1.0, 2.0]
    second = ModelTrace(0.001, DIM, kept)
    second.take(state.totals(unchanged=second.latest()), 2.6)
    assert [r["elapsed"] for r in second.score(_val(), 10, loss, spec)] == [1.0, 2.0, 2.6]


def test_an_unreadable_earlier_trace_is_said_and_the_trace_starts_at_the_resume(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert earlier_rows(tmp_path, 1.0) == []  # none written: a crash, not a hand-over
    (tmp_path / artifacts.TRACE_FILE).write_text('{"elapsed": 0.5}\nnot json\n')
    assert earlier_rows(tmp_path, 1.0) == []
    assert "trace.jsonl not read" in caplog.text
