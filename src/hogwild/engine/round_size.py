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
# has up to this many rounds: the momentum needs a few rounds to build up ...
MOMENTUM_ROUNDS_PER_EPOCH = 4
# ... but each round costs the exchange, so an epoch has only as many of them (at least one)
# as hold this much of a thread's work each. Simulated (default cost model, bench/NOTES.md),
# the best number of rounds an epoch followed a worker's share of the epoch: 2M RCV1-shaped
# rows, sync, medians of 3 seeds, 16 workers (8.5M non-zeros each) 4 rounds: 8.6x against
# 6.0x with 2 and 5.3x with 1; 64 workers (2.1M each) 1 round: 4.7x against 3.6x (2) and
# 2.8x (4). 200k rows, one seed: 4 workers (3.4M each) 2 rounds 2.2x against 1.3x with 1 or
# 4; 8 workers (1.7M each) 1 round 1.8x, 1.6x with 2, 1.0x with 4.
MOMENTUM_ROUND_MIN_NNZ = 1_250_000
# Some of a round's cost grows with the model, not with the rows: its delta is built by a
# scan of every weight, block momentum filters every weight it ever moved, and once most
# coordinates changed the delta travels dense (4 bytes a weight) to every destination and is
# decoded and applied there. On 47,236 features that is nothing beside a round's millions of
# non-zeros; on hashed features it is everything: 2M click-like rows hashed to 2^22 features,
# 2 workers x 1 thread, rounds of 5M non-zeros (22 ms of training) spent 60 ms building each
# delta and sent 16.6 MB to each destination (bench/NOTES.md). So a round also trains at
# least this many non-zeros per feature of the model (the caps on a round's share of an
# epoch still apply).
ROUND_NNZ_PER_FEATURE = 4


def momentum_rounds_per_epoch(thread_epoch_nnz: float, workers: int) -> int:
    """The fewest rounds an epoch block momentum has: MOMENTUM_ROUNDS_PER_EPOCH, fewer
    where a thread's share of the epoch (``thread_epoch_nnz`` non-zeros) would make rounds of
    less than MOMENTUM_ROUND_MIN_NNZ, at least 1. One worker has no momentum to build (eta =
    0) and sends one message a round: its rounds only refresh the coordinator's model, as
    often as summed rounds would (MIN_ROUNDS_PER_EPOCH)."""
    if workers <= 1:
        return MIN_ROUNDS_PER_EPOCH
    fits = int(thread_epoch_nnz // MOMENTUM_ROUND_MIN_NNZ)
    return max(1, min(MOMENTUM_ROUNDS_PER_EPOCH, fits))


def round_rule(combine: str, workers: int = 1, thread_epoch_nnz: float = float("inf"),
               dim: int = 0) -> tuple[int, int]:
    """(non-zeros of work per thread for an automatic round, the fewest rounds per epoch)
    for deltas summed or averaged (``combine``) among ``workers``, a thread's share of an
    epoch being ``thread_epoch_nnz`` non-zeros, on a model of ``dim`` weights; the reasons
    are in choose_round_size."""
    floor = ROUND_NNZ_PER_FEATURE * max(0, dim)
    if combine == "average":
        return max(ROUND_NNZ_AVERAGE, floor), 1
    if combine == "momentum":
        return (max(ROUND_NNZ_AVERAGE, floor),
                momentum_rounds_per_epoch(thread_epoch_nnz, workers))
    return (max(ROUND_NNZ, floor),
            max(MIN_ROUNDS_PER_EPOCH, ROUNDS_PER_EPOCH_PER_WORKER * (workers - 1)))


def momentum_step_scale(combine: str, mode: str, workers: int, train_rows: int,
                        total_threads: int, round_size: int) -> float:
    """The factor on each worker's step size where sync block momentum's rounds are few
    against W: W / (4 K) for K rounds an epoch (rounded), where that is above 1, else 1.

    Block momentum moves the model by up to W times the workers' average change, but builds
    that up over about W rounds (its momentum is 1 - 1/W), W / K epochs. The rounds an epoch
    fall as W grows (momentum_rounds_per_epoch keeps each round's work): with 64 workers on
    2M rows one round is a whole epoch, 64 epochs of build-up, and the run never reached one
    worker's accuracy. Larger local steps make up for it, in proportion to the epochs the
    build-up takes. Simulated (bench/NOTES.md: three seeds each, sync, time to one worker's
    best validation accuracy less 0.005), on 2M RCV1-shaped rows: 64 workers (K = 1) never ->
    10.2x, 32 workers (K = 3) 5.1x -> 8.6x; on 200k rows (K = 1) 8 workers 1.92x -> 2.32x,
    16 workers 1.13x -> 2.46x; every run ending above one worker's test accuracy. 16
    workers on 2M rows (K = 4) keep their step (the rule was tuned there). Not measured for
    async runs, which keep their steps."""
    if combine != "momentum" or mode != "sync" or workers <= 4 or round_size < 1:
        return 1.0
    per_thread = train_rows / max(1, total_threads)
    rounds = max(1, round(per_thread / round_size))
    return max(1.0, workers / (4 * rounds))


def choose_round_size(configured: int | None, train_rows: int, train_nnz: int,
                      total_threads: int, combine: str = "sum", workers: int = 1,
                      dim: int = 0) -> int:
    """Examples per thread per round: ``configured``, or when it is None enough rows for
    ROUND_NNZ (combine average and momentum: ROUND_NNZ_AVERAGE) non-zeros of work, and for
    ROUND_NNZ_PER_FEATURE per weight of a model of ``dim``; never more than
    1/MIN_ROUNDS_PER_EPOCH of an epoch when the deltas are summed, nor more than an epoch
    when they are averaged."""
    work, per_epoch = round_rule(combine, workers, train_nnz / max(1, total_threads), dim)
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
