"""The coordinator's choice of examples per thread per round."""

from __future__ import annotations

from hogwild.engine.round_size import (
    MIN_ROUNDS_PER_EPOCH,
    ROUND_NNZ,
    ROUND_NNZ_AVERAGE,
    choose_round_size,
    fit_round_size,
)


def test_small_data_is_capped_to_enough_rounds_per_epoch() -> None:
    # Reuters-sized: 7,000 rows, 2 workers x 2 threads -> at most 7000 / (4 * MIN) rows.
    for configured in (None, 10_000):
        size = choose_round_size(configured, 7_000, 7_000 * 40, 4)
        assert size == 7_000 // (4 * MIN_ROUNDS_PER_EPOCH)


def test_big_data_gets_rounds_of_about_round_nnz_nonzeros() -> None:
    rows, per_row = 10_000_000, 75
    size = choose_round_size(None, rows, rows * per_row, 2)
    assert size > 1000
    assert abs(size * per_row - ROUND_NNZ) <= per_row  # ~ROUND_NNZ non-zeros per thread
    assert size * 2 * MIN_ROUNDS_PER_EPOCH <= rows


def test_an_explicit_round_size_is_honoured_within_the_cap() -> None:
    rows = 10_000_000
    assert choose_round_size(100_000, rows, rows * 75, 2) == 100_000
    assert choose_round_size(500, rows, rows * 75, 2) == 500
    assert choose_round_size(10**9, rows, rows * 75, 2) == rows // (2 * MIN_ROUNDS_PER_EPOCH)


def test_degenerate_sizes_give_at_least_one_row() -> None:
    assert choose_round_size(None, 1, 0, 8) == 1
    assert choose_round_size(1, 0, 0, 1) == 1


def test_averaged_deltas_allow_longer_rounds_up_to_an_epoch() -> None:
    rows, per_row = 10_000_000, 75
    size = choose_round_size(None, rows, rows * per_row, 2, "average")
    assert abs(size * per_row - ROUND_NNZ_AVERAGE) <= per_row
    assert size > choose_round_size(None, rows, rows * per_row, 2, "sum")
    # Capped at one epoch per thread, not at 1/MIN_ROUNDS_PER_EPOCH of one.
    assert choose_round_size(10**9, rows, rows * per_row, 2, "average") == rows // 2
    small = 280_000
    assert choose_round_size(None, small, small * per_row, 2, "average") == (
        -(-ROUND_NNZ_AVERAGE // per_row))
    assert choose_round_size(None, small, small * per_row, 2, "sum") == (
        -(-ROUND_NNZ // per_row))


def test_automatic_rounds_add_up_to_the_epochs_asked_for() -> None:
    for size, rows, threads, epochs in ((66_615, 280_000, 2, 8), (66_615, 280_000, 4, 3),
                                        (26_646, 280_000, 2, 5), (1_750, 7_000, 4, 10),
                                        (7, 10, 3, 1)):
        fitted = fit_round_size(size, rows, threads, epochs)
        assert 1 <= fitted <= size
        rounds = -(-epochs * rows // (threads * fitted))
        assert rounds == -(-epochs * rows // (threads * size))  # no more rounds than before
        done = rounds * threads * fitted
        # Whole rounds reach the epochs and overrun by under one example per thread and round.
        assert epochs * rows <= done < epochs * rows + rounds * threads, (size, fitted)
    # Before, 3 epochs in rounds of 66,615 rows x 4 threads made 3.81 epochs.
    assert -(-3 * 280_000 // (4 * 66_615)) * 4 * 66_615 / 280_000 > 3.8
