"""Per-sender dedup in bounded memory: high-water mark, window, gaps, multi-part deltas."""

from __future__ import annotations

import pytest

from hogwild.cluster.wire.sequence import SequenceTracker
from hogwild.errors import InvalidMessage


def test_in_order_single_parts_move_the_mark_and_keep_nothing() -> None:
    t = SequenceTracker(window=4)
    for seq in range(1, 10_001):
        assert t.admit(seq, 0, 1) is True
    assert t.complete == 10_000 and t.pending == 0


def test_repeats_are_duplicates_below_and_inside_the_window() -> None:
    t = SequenceTracker(window=4)
    assert t.admit(1, 0, 1) is True
    assert t.admit(1, 0, 1) is None
    assert t.admit(3, 0, 1) is True          # ahead, inside the window
    assert t.admit(3, 0, 1) is None
    assert t.complete == 1 and t.pending == 1
    assert t.admit(2, 0, 1) is True          # fills the hole: the mark jumps over 3
    assert t.complete == 3 and t.pending == 0


def test_parts_complete_a_seq_only_when_all_arrived() -> None:
    t = SequenceTracker()
    assert t.admit(1, 0, 3) is False
    assert t.admit(1, 2, 3) is False
    assert t.admit(1, 2, 3) is None
    assert t.complete == 0
    assert t.admit(1, 1, 3) is True
    assert t.complete == 1 and t.pending == 0


def test_a_jump_beyond_the_window_is_refused_and_not_recorded() -> None:
    t = SequenceTracker(window=8)
    t.admit(1, 0, 1)
    with pytest.raises(InvalidMessage, match="gap"):
        t.admit(10, 0, 1)
    assert t.pending == 0
    assert t.admit(9, 0, 1) is True  # the edge of the window is still fine


def test_a_squatter_cannot_hold_more_than_the_window() -> None:
    t = SequenceTracker(window=8)
    refused = 0
    for seq in range(2, 1000):
        try:
            t.admit(seq, 0, 1)
        except InvalidMessage:
            refused += 1
    assert t.pending == 7 and refused == 1000 - 2 - 7  # seqs 2..8 of the window 1..8
    assert t.admit(1, 0, 1) is True


def test_parts_count_must_agree_within_a_seq() -> None:
    t = SequenceTracker()
    t.admit(1, 0, 2)
    with pytest.raises(InvalidMessage, match="parts"):
        t.admit(1, 1, 3)


def test_seen_answers_as_admit_would_without_recording() -> None:
    t = SequenceTracker(window=4)
    assert t.admit(1, 0, 1) is True
    assert t.admit(2, 1, 3) is False                    # part 1 of 3 early
    assert t.seen(1, 0) and t.seen(2, 1)
    assert not t.seen(2, 0) and not t.seen(3, 0) and not t.seen(9, 0)
    assert t.held == 2                                  # asking recorded nothing
    assert t.admit(2, 0, 3) is False and t.seen(2, 0)
