"""RunState takes a member's word only as far as it can check it: peer reports wait for a probe's
verdict (bounded per reporter), divergence reports wait for the driver's judgement."""

from __future__ import annotations

import pytest

from hogwild.cluster.coordinator.members import peer_reports as reports_module
from hogwild.cluster.coordinator.members.peer_reports import MAX_PEER_REPORTS
from hogwild.cluster.coordinator.state import RunState

DIM = 4


def _started(n: int = 3) -> RunState:
    state = RunState(n)
    for i in range(n):
        state.roster.register(f"h:{i}", 1, "host", 100 + i, secret=bytes([i + 1]) * 32)
    state.roster.wait_for_workers(1.0)
    state.model.start_model(DIM)
    return state


def test_one_probe_per_accused_worker_and_its_verdict_settles_every_report() -> None:
    state = _started()
    accused = state.roster.reports.accuse(state.run_id, 0, 2, 5, "silent")
    assert accused is not None and accused.peer == 2 and accused.address == "h:2"
    # While it is probed, more reports (a flood included) wait for the same verdict.
    for i in range(10 * MAX_PEER_REPORTS):
        assert state.roster.reports.accuse(state.run_id, i % 2, 2, 6, "silent again") is None
    assert len(state.roster.reports.kept) == MAX_PEER_REPORTS
    assert not state.roster.workers[2].dead
    # It answered: every reporter's report is refused, and counted.
    assert state.roster.reports.settle(accused, None) == [0, 1]
    assert state.roster.reports.refused == 2 and not state.roster.workers[2].dead
    # A refused reporter is not heard about that peer again for a while (no probe at all).
    before = len(state.roster.reports.kept)
    for _ in range(1000):
        assert state.roster.reports.accuse(state.run_id, 0, 2, 7, "silent") is None
    assert state.roster.reports.refused == 1002 and len(state.roster.reports.kept) == before
    # About another peer it still is.
    assert state.roster.reports.accuse(state.run_id, 0, 1, 7, "silent") is not None


def test_after_the_cooldown_a_report_is_probed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports_module, "PEER_REPORT_COOLDOWN", 0.0)
    state = _started()
    accused = state.roster.reports.accuse(state.run_id, 0, 2, 5, "silent")
    assert accused is not None and state.roster.reports.settle(accused, None) == [0]
    again = state.roster.reports.accuse(state.run_id, 0, 2, 9, "silent")
    assert again is not None
    state.roster.reports.settle(again, "no answer to the coordinator's probe (UNAVAILABLE, "
                                       "deadline 2s)")
    assert state.roster.workers[2].dead
    assert state.roster.workers[2].dead_reason == ("reported by worker 0 at round 9: silent; "
                                                   "no answer to the coordinator's probe "
                                                   "(UNAVAILABLE, deadline 2s)")


def test_a_verdict_about_a_process_since_replaced_drops_nobody() -> None:
    state = _started()
    accused = state.roster.reports.accuse(state.run_id, 0, 2, 5, "silent")
    assert accused is not None
    # Meanwhile the worker restarted and registered again (a rejoin): the new process was
    # not the one probed.
    state.roster.register("h:2", 1, "host", 999, verified=True, secret=b"n" * 32)
    state.roster.reports.settle(accused, "no answer to the coordinator's probe (UNAVAILABLE, "
                                         "deadline 2s)")
    assert not state.roster.workers[2].dead
    # A report from a dropped reporter is refused and probes nothing.
    state.roster.mark_dead(0, "gone")
    assert state.roster.reports.accuse(state.run_id, 0, 1, 5, "silent") is None
    assert state.roster.reports.refused == 1


def test_a_divergence_report_waits_for_the_driver_and_drops_only_its_sender() -> None:
    state = _started()
    for _ in range(3):  # said again: one claim per worker
        state.roster.progress(state.run_id, 1, 4, 40, float("nan"), True, 0, diverged=True,
                              key=state.roster.worker_key(1))
    assert [r.worker_id for r in state.roster.live_workers()] == [0, 1, 2]  # nothing taken yet
    assert state.roster.take_divergence_claims() == {1: 4}
    assert state.roster.take_divergence_claims() == {}
    state.roster.dismiss_divergence(1, 4, "the global model is finite")
    assert [r.worker_id for r in state.roster.live_workers()] == [0, 2]
    assert state.roster.workers[1].dead_reason == ("it reported its weights non-finite at "
                                                   "round 4; the global model is finite")
    assert state.roster.divergence_reports_dismissed == 1
