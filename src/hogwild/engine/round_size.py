"""How many examples each thread trains per exchange round, and how many rounds a run has."""

from __future__ import annotations

import math

# Every epoch has at least this many exchange rounds: a round is how stale a worker's view of
# the others' updates can get, and summing deltas computed from a point too many examples old
# overshoots. Measured on Reuters earn, 2 workers, before the bias was averaged (see
# worker/averaging.py): round = 1/2 epoch gave test accuracy 0.6-0.98, 1/8 epoch
# 0.955-0.985, 1/16 epoch 0.986-0.988. With the bias averaged, rounds of 1/4 epoch gave
# 0.986-0.989 on Reuters (sync 2 workers, async 3 workers; 1/8: 0.982-0.988) and the
# in-process test accuracy (0.88) on 280k synthetic RCV1-like rows.
MIN_ROUNDS_PER_EPOCH = 4
# ... and, with deltas summed, this many rounds per epoch per worker beyond the first. What a
# worker's delta misses of the others' is what they trained in the same round, (W - 1) / W of
# it: with the round a fixed share of the epoch, the staleness grows with W and the sum of W
# short trajectories from one point overshoots. Simulated on Reuters earn (engine/simulate.py,
# 1 thread per worker, 10 epochs; test accuracy against one process with as many threads):
# rounds of 1/4 epoch were 0.12-0.18 points behind with 2 workers, 0.5 with 16 and 0.9 with
# 64; rounds of 8 examples per worker (1/75 and 1/19 epoch) 0.12 and none.
ROUNDS_PER_EPOCH_PER_WORKER = 2
# On big data a round is raised to this many non-zeros of kernel work per thread (~10 ms):
# a round's fixed costs (a delta of up to dim entries built, sent and applied, an RPC round
# trip of 2-5 ms on a busy 2-core machine, the barrier in sync mode) then stay a small share.
# Measured on 280k synthetic RCV1-like rows, 2 workers x 1 thread, sync: rounds of 1,000 rows
# spent 0.6 ms training and 7 ms waiting per round (8.7x the in-process time to accuracy);
# rounds of 26,646 rows (this rule) ~8 ms training, ~6 ms waiting, 1.0-1.4x.
ROUND_NNZ = 2_000_000
# With combine average rounds may be longer (see choose_round_size), and are: a round's
# exchange cost about 9 CPU ms per worker on that machine (two deltas sent, one received, over
# mutual TLS), as much as its 2M non-zeros of kernel work; 5M non-zeros make it a third.
ROUND_NNZ_AVERAGE = 5_000_000
# With combine momentum (block momentum over averaged rounds, engine/momentum.py) an epoch
# has at least this many rounds: the momentum needs a few rounds to build up, and each round
# costs the exchange. Simulated (default cost model, one seed, bench/NOTES.md), the speed-up
# to the one-worker accuracy with at least 1 / 2 / 4 rounds an epoch: 2M RCV1-shaped rows,
# sync, 16 workers 5.3x / 8.7x / 7.2x, 64 workers 4.8x / 3.6x / 2.8x; async 16 workers
# 7.1x / 8.0x / 6.8x; 200k rows, sync, 2 workers 1.1x / 1.5x / 1.5x, 4 workers 1.3x / 2.2x /
# 1.3x, 8 workers (mesh) 1.5x / 1.0x / 0.7x.
MOMENTUM_ROUNDS_PER_EPOCH = 2


def round_rule(combine: str, workers: int = 1) -> tuple[int, int]:
    """(non-zeros of work per thread for an automatic round, the fewest rounds per epoch)
    for deltas summed or averaged (``combine``) among ``workers``; the reasons are in
    choose_round_size."""
    if combine == "average":
        return ROUND_NNZ_AVERAGE, 1
    if combine == "momentum":
        # One worker has no momentum to build (eta = 0) and sends one message a round: its
        # rounds only refresh the coordinator's model, as often as summed rounds would.
        per_epoch = MOMENTUM_ROUNDS_PER_EPOCH if workers > 1 else MIN_ROUNDS_PER_EPOCH
        return ROUND_NNZ_AVERAGE, per_epoch
    return ROUND_NNZ, max(MIN_ROUNDS_PER_EPOCH, ROUNDS_PER_EPOCH_PER_WORKER * (workers - 1))


def choose_round_size(configured: int | None, train_rows: int, train_nnz: int,
                      total_threads: int, combine: str = "sum", workers: int = 1) -> int:
    """Examples per thread per round: ``configured``, or when it is None enough rows for
    ROUND_NNZ (combine average: ROUND_NNZ_AVERAGE) non-zeros of work; never more than
    1/MIN_ROUNDS_PER_EPOCH of an epoch when the deltas are summed, nor more than an epoch
    when they are averaged."""
    work, per_epoch = round_rule(combine, workers)
    if configured is None:
        per_row = train_nnz / max(1, train_rows)
        configured = math.ceil(work / max(per_row, 1.0))
    # Averaged deltas (model averaging) do not overshoot however old their starting point:
    # simulated on 280k synthetic RCV1-like rows, 2 and 4 workers, rounds of 1/2 and 1 epoch
    # reached 0.88-0.89 validation accuracy after one epoch, where summing reached 0.85-0.88
    # (2 workers) and 0.67-0.83 (4). (On Reuters earn and SpamAssassin summing did as well or
    # better, hence it stays the default.)
    cap = max(1, train_rows // (max(1, total_threads) * per_epoch))
    return max(1, min(configured, cap))


def fit_round_size(size: int, train_rows: int, total_threads: int, epochs: float) -> int:
    """The largest round size up to ``size`` whose whole rounds add up to ``epochs`` (to
    within one example per thread and round) rather than overrun them by up to a round: with
    rounds of half an epoch, 8 epochs would otherwise become 8.09, and 3 with 4 workers 3.81."""
    per_thread = epochs * train_rows / max(1, total_threads)
    if size <= 0 or per_thread <= 0:
        return max(1, size)
    rounds = math.ceil(per_thread / size)
    return max(1, min(size, math.ceil(per_thread / rounds)))


def max_rounds(epochs: float, train_rows: int, total_threads: int, round_size: int) -> int:
    """The rounds that make ``epochs`` of ``train_rows`` with ``total_threads`` threads each
    training ``round_size`` examples a round (at least one)."""
    per_round = max(1, total_threads) * round_size
    return max(1, math.ceil(epochs * train_rows / per_round))
