"""RunState's membership rules: one process per address, rejoining, dropped workers, sealing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hogwild.cluster.coordinator.members.records import AddressClaimed
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.wire.codec import DecodedDelta, DeltaHeader, decode_delta, encode_delta
from hogwild.errors import ClusterError, NotAllowed, RefusedValues, StaleOrUnknown

DIM = 8


def _delta(state: RunState, worker_id: int, seq: int) -> DecodedDelta:
    message = encode_delta(DeltaHeader(state.run_id, worker_id, round=1, seq=seq, dim=DIM),
                           np.array([1], dtype=np.int32), np.array([0.5], dtype=np.float32))
    return decode_delta(message, DIM)


def _started(n: int = 2) -> RunState:
    state = RunState(n)
    for i in range(n):
        state.roster.register(f"h:{i}", 1, "host", 100 + i)
    state.roster.wait_for_workers(1.0)
    state.model.start_model(DIM)
    return state


def test_another_process_claiming_a_registered_address_is_refused_until_verified() -> None:
    state = RunState(2)
    assert state.roster.register("h:1", 1, "host", 10) == 0
    assert state.roster.register("h:1", 1, "host", 10) == 0  # the same process again: same id
    with pytest.raises(AddressClaimed, match="registered by worker 0"):
        state.roster.register("h:1", 1, "host", 11)
    # Verified (the new process answers at the address): it replaces the old one.
    assert state.roster.register("h:1", 1, "host", 11, verified=True) == 0
    assert state.roster.workers[0].pid == 11 and state.roster.take_rejoins() == []


def test_registering_again_during_the_run_is_a_rejoin() -> None:
    state = _started()
    assert state.roster.register("h:1", 1, "host", 101) == 1
    assert state.roster.take_rejoins() == [1] and state.roster.take_rejoins() == []
    assert state.roster.workers[1].incarnation == 1
    with pytest.raises(StaleOrUnknown, match="already has"):
        state.roster.register("h:9", 1, "host", 9)


def test_a_dropped_worker_is_refused_until_it_rejoins_and_its_reports_are_ignored() -> None:
    state = _started(3)
    state.roster.reports.peer_down(state.run_id, 0, 1, 5, "silent")
    with pytest.raises(StaleOrUnknown, match="dropped from the run"):
        state.model.apply_delta(_delta(state, 1, 1))
    # Its progress too: a relay's worker waiting for the next aggregate sends nothing else,
    # and only a refusal tells it to register again.
    with pytest.raises(StaleOrUnknown, match=r"worker 1 was dropped from the run \(reported"):
        state.roster.progress(state.run_id, 1, 9, 900, 0.5, False, 0)
    assert state.roster.workers[1].round == 0 and state.roster.workers[1].examples == 0
    # A refused report does nothing, a divergence it claims included (never weighed at all).
    with pytest.raises(StaleOrUnknown, match="dropped from the run"):
        state.roster.progress(state.run_id, 1, 9, 900, 0.5, False, 0, diverged=True)
    assert state.roster.take_divergence_claims() == {}
    state.roster.reports.peer_down(state.run_id, 1, 2, 5, "a stale view")  # from a dropped reporter
    assert not state.roster.workers[2].dead
    state.roster.rejoined(1, 7)
    assert state.model.apply_delta(_delta(state, 1, 2))
    assert state.roster.workers[1].round == 7
    state.roster.progress(state.run_id, 1, 8, 800, 0.5, False, 0)
    assert state.roster.workers[1].round == 8


def test_a_quarantined_worker_hears_it_was_dropped_before_its_values_are_judged() -> None:
    """Its later deltas (the same values out of bounds) are refused as from a dropped worker,
    which tells it to register again (where its quarantine is said), not once more for their
    values, which would let it train on to the end as if it were still a member."""
    state = _started(3)
    state.model.max_delta_value = 0.25  # the test's deltas hold 0.5
    with pytest.raises(RefusedValues):
        state.model.apply_delta(_delta(state, 1, 1))
    state.roster.refuse(1, "values beyond the bound")
    assert state.roster.workers[1].dead
    with pytest.raises(StaleOrUnknown, match=r"worker 1 was dropped from the run \(quarantined"):
        state.model.apply_delta(_delta(state, 1, 2))
    assert state.roster.quarantine.refused == {1: 1}
    state.model.max_delta_value = math.inf
    assert state.model.apply_delta(_delta(state, 2, 1))  # the others' deltas go on counting


def test_sealing_freezes_the_model_and_its_counters() -> None:
    state = _started()
    assert state.model.apply_delta(_delta(state, 0, 1))
    totals = state.seal()
    assert totals.deltas_received == 1 and totals.applied_from == {0: 1, 1: 0}
    assert totals.w[1] == 0.5
    with pytest.raises(StaleOrUnknown, match="after the run ended"):
        state.model.apply_delta(_delta(state, 1, 1))
    assert state.totals().deltas_received == 1


def test_each_drop_is_counted_once_and_dead_workers_lists_the_ones_not_back() -> None:
    # The coordinator announces a drop once (drops changes), not again when the dropped
    # worker registers again, nor when a second peer reports it.
    state = _started(3)
    state.roster.reports.peer_down(state.run_id, 0, 2, 5, "silent")
    state.roster.reports.peer_down(state.run_id, 1, 2, 5, "unreachable")
    state.roster.mark_dead(2, "again")
    assert state.roster.workers[2].drops == 1 and "silent" in state.roster.workers[2].dead_reason
    assert [r.worker_id for r in state.roster.dead_workers()] == [2]
    assert state.roster.register("h:2", 1, "host", 202, verified=True) == 2  # restarted
    assert state.roster.workers[2].drops == 1
    assert [r.worker_id for r in state.roster.dead_workers()] == [2]
    state.roster.rejoined(2, 9)
    assert state.roster.dead_workers() == []
    state.roster.mark_dead(2, "rejoin failed")
    assert state.roster.workers[2].drops == 2


def test_peer_reports_are_bounded() -> None:
    from hogwild.cluster.coordinator.members.peer_reports import MAX_PEER_REPORTS, MAX_REASON_LENGTH

    state = _started(3)
    for i in range(MAX_PEER_REPORTS + 50):
        state.roster.reports.peer_down(state.run_id, 0, 1 + i % 2, i, "x" * 10_000)
        state.roster.rejoined(1 + i % 2, i)  # back, so the next report counts again
    assert len(state.roster.reports.kept) == MAX_PEER_REPORTS
    assert all(len(r[3]) == MAX_REASON_LENGTH for r in state.roster.reports.kept)
    state.roster.reports.peer_down(state.run_id, 0, 1, 99, "y" * 10_000)
    assert "y" * MAX_REASON_LENGTH in state.roster.workers[1].dead_reason  # as announced
    assert len(state.roster.workers[1].dead_reason) < MAX_REASON_LENGTH + 100


def test_a_place_given_back_goes_to_the_next_registration_with_new_keys() -> None:
    state = RunState(2)
    for i in range(2):
        state.roster.register(f"h:{i}", 1, "host", 100 + i)
    state.roster.wait_for_workers(1.0)
    old_worker, old_coordinator = state.roster.worker_key(0), state.roster.coordinator_key(0)
    kept = state.roster.worker_key(1)
    state.roster.release(0)  # its holder did not answer the shipment
    assert [r.worker_id for r in state.roster.workers.values()] == [1]
    # The place is free, though registration closed.
    assert state.roster.register("h:9", 2, "other", 7) == 0
    assert [r.worker_id for r in state.roster.workers.values()] == [0, 1]  # in id order
    assert state.roster.wait_for_places([0], 1.0)[0].address == "h:9"
    # Whatever the old holder was told no longer counts; the other worker's keys stay.
    assert state.roster.worker_key(0) != old_worker
    assert state.roster.coordinator_key(0) != old_coordinator
    assert state.roster.worker_key(1) == kept
    with pytest.raises(NotAllowed):
        state.roster.check_sender(state.run_id, 0, old_worker)
    state.roster.check_sender(state.run_id, 0, state.roster.worker_key(0))
    # The old holder's address is nobody's now, and no place is left for it.
    with pytest.raises(StaleOrUnknown, match="all its workers"):
        state.roster.register("h:0", 1, "host", 100)


def test_a_place_nobody_takes_fails_after_the_deadline_naming_it() -> None:
    state = RunState(2)
    for i in range(2):
        state.roster.register(f"h:{i}", 1, "host", 100 + i)
    state.roster.wait_for_workers(1.0)
    state.roster.release(1)
    with pytest.raises(ClusterError, match=r"place of worker\(s\) 1 within register_timeout"):
        state.roster.wait_for_places([1], 0.2)
    # Cancelled (SIGTERM): back at once with what was taken.
    assert state.roster.wait_for_places([1], 5.0, cancelled=lambda: True) == []


def test_deltas_count_the_worker_rounds_held_however_the_messages_were_summed() -> None:
    """Worker 0 sends rounds 1, 2 and a sum of rounds 3-5 (queued behind a slow send), then
    the rounding of that sum (round 5 again); worker 1 sends rounds 1-5 as one message in two
    parts. The model holds 10 worker rounds, in 4 and 1 messages (6 parts)."""
    dim = 1000  # (a model of 8 weights is never cut into parts)
    state = RunState(2)
    for i in range(2):
        state.roster.register(f"h:{i}", 1, "host", 100 + i)
    state.roster.wait_for_workers(1.0)
    state.model.start_model(dim)

    def send(worker: int, round_: int, seq: int, part: int = 0, parts: int = 1) -> None:
        header = DeltaHeader(state.run_id, worker, round=round_, seq=seq, dim=dim, part=part,
                             parts=parts)
        message = encode_delta(header, np.array([part], dtype=np.int32),
                               np.array([0.5], dtype=np.float32))
        assert state.model.apply_delta(decode_delta(message, dim))

    for seq, round_ in enumerate((1, 2, 5, 5), start=1):
        send(0, round_, seq)
    send(1, 5, 1, part=0, parts=2)
    assert state.totals().delta_rounds == 5  # the message is not in until its last part
    send(1, 5, 1, part=1, parts=2)
    totals = state.totals()
    assert totals.delta_rounds == 10 and totals.deltas_received == 6
    state.roster.rejoined(1, 7)  # back in the run from after round 7: its round 8 is one more
    send(1, 8, 1)
    assert state.totals().delta_rounds == 11
