"""The trace's copies of the global model: one per model, shared while no delta arrives."""

from __future__ import annotations

import numpy as np

from hogwild.coordinator.trace import ModelTrace
from hogwild.data.csr import CSRData
from hogwild.model.losses import get_loss
from hogwild.model.spec import ModelSpec

from .test_coordinator_state import DIM, _delta, _started


def test_a_snapshot_without_a_new_delta_shares_the_previous_copy() -> None:
    state = _started()
    trace = ModelTrace(0.001, DIM)
    trace.take(state.totals(unchanged=trace.latest()), 0.001)
    trace.take(state.totals(unchanged=trace.latest()), 0.002)  # nothing arrived in between
    assert state.apply_delta(_delta(state, 0, 1))
    trace.take(state.totals(unchanged=trace.latest()), 0.003)
    first, second, third = trace.snapshots
    assert second.w is first.w and trace.copies == 2
    assert third.w is not second.w and third.deltas_received == 1
    assert third.w[1] == 0.5 and first.w[1] == 0.0  # a copy, not the live model
    state.apply_delta(_delta(state, 1, 1))
    assert third.w[1] == 0.5


def test_shared_copies_are_scored_once_each_and_every_snapshot_gets_its_row() -> None:
    state = _started()
    trace = ModelTrace(0.001, DIM)
    for k in range(3):
        trace.take(state.totals(unchanged=trace.latest()), 0.001 * (k + 1))
    assert state.apply_delta(_delta(state, 0, 1))
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
    assert state.apply_delta(_delta(state, 0, 1))
    trace.take(state.totals(unchanged=trace.latest()), 0.003)
    assert trace.full and not trace.due(1.0)
