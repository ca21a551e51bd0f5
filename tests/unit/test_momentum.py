"""Block momentum taken apart per worker: the sum of the workers' terms is global BMUF."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.config import load
from hogwild.engine.momentum import BlockMomentum, block_momentum
from hogwild.engine.round import RoundEngine
from hogwild.engine.round_size import (
    MIN_ROUNDS_PER_EPOCH,
    ROUND_NNZ_AVERAGE,
    ROUND_NNZ_PER_FEATURE,
    choose_round_size,
    momentum_rounds_per_epoch,
    momentum_step_scale,
    round_rule,
)
from hogwild.engine.rules import ExchangeRules
from hogwild.model.compression import Compression
from hogwild.settings.rules import (
    engaged_note,
    engaged_workers,
    resolve_combine,
    resolve_topology,
)


class _Peer:
    def __init__(self) -> None:
        self.round = 0
        self.settled = False


def test_the_workers_terms_add_up_to_global_block_momentum() -> None:
    """W filters, each on its own change, move the summed model exactly as BMUF with
    Nesterov's look-ahead moves the global one: v_r = eta v_(r-1) + mean(d_r), the workers
    starting each round from w_r + eta v_r, and the last round ending on w_F itself."""
    rng = np.random.default_rng(0)
    workers, dim, rounds = 3, 7, 5
    eta = block_momentum(workers)
    filters = [BlockMomentum() for _ in range(workers)]
    start = rng.normal(size=dim)
    shared = start.copy()             # the model every worker holds after a round (sync)
    w_global, v = start.copy(), np.zeros(dim)
    for r in range(rounds):
        final = r == rounds - 1
        changes = [rng.normal(size=dim) for _ in range(workers)]
        terms = []
        for f, d in zip(filters, changes, strict=True):
            w = shared + d
            snap = shared.copy()
            f.filter(w, snap, workers, final)
            terms.append(w - snap)
            f.sent(w, w)  # everything went out: nothing owed
        shared = shared + sum(terms)
        v = eta * v + np.mean(changes, axis=0)
        w_global = w_global + v
        expected = w_global if final else w_global + eta * v
        np.testing.assert_allclose(shared, expected, rtol=0, atol=1e-12)


def test_one_worker_sends_its_change_unfiltered() -> None:
    f = BlockMomentum()
    w, snap = np.array([1.0, 2.0]), np.zeros(2)
    f.filter(w, snap, 1, final=False)
    np.testing.assert_array_equal(w, [1.0, 2.0])


def test_what_compression_holds_back_is_owed_once_not_filtered_again() -> None:
    """With delta_topk the unsent part stays in w - snap; the next round sends it as it is
    beside the new filtered term, so nothing is lost nor counted twice."""
    rules = ExchangeRules(combine="momentum", n_peers=1,
                          compression=Compression(0.0, 1, False))
    engine = RoundEngine(rules, np.zeros(3))
    peers = {1: _Peer()}
    engine.w[:] = [4.0, 1.0, 0.0]
    idx, val = engine.build(1, False, lambda: peers)
    sent = np.zeros(3)
    sent[idx] += val
    # eta = 1/2, d/W = [2, .5, 0], look-ahead x1.5 = [3, .75, 0]; top-1 sends index 0
    np.testing.assert_allclose(sent, [3.0, 0.0, 0.0])
    owed = engine.w - engine.snap
    np.testing.assert_allclose(owed, [0.0, 0.75, 0.0])
    idx2, val2 = engine.build(2, True, lambda: peers)  # no new change; the final round
    total = sent.copy()
    total[idx2] += val2
    # v2 = eta v1 = [1, .25, 0]; final term v2 - eta v1 = 0, plus the owed .75
    np.testing.assert_allclose(total, [3.0, 0.75, 0.0], atol=1e-6)


@pytest.mark.parametrize(("rows", "workers", "expected"), [
    (2_000_000, 64, "momentum"), (200_000, 16, "momentum"), (200_000, 32, "sum"),
    (8_643, 2, "sum"), (50_000, 1, "momentum")])
def test_combine_auto_follows_the_rows_each_worker_holds(rows: int, workers: int,
                                                         expected: str) -> None:
    assert resolve_combine("auto", rows, workers) == expected
    assert resolve_combine("sum", rows, workers) == "sum"


@pytest.mark.parametrize(("workers", "mode", "expected"), [
    (2, "sync", "mesh"), (4, "sync", "mesh"), (5, "sync", "tree"), (8, "async", "mesh"),
    (9, "async", "star"), (64, "async", "star")])
def test_topology_auto_follows_the_workers_and_the_mode(workers: int, mode: str,
                                                        expected: str) -> None:
    assert resolve_topology("auto", workers, mode) == expected
    assert resolve_topology("star", workers, mode) == "star"


@pytest.mark.parametrize(("workers", "threads", "rows", "nnz", "model", "mode", "expected"), [
    (64, 1, 180_000, 13_500_000, "linear", "sync", 13),   # 200k RCV1-shaped rows: 13 busy
    (8, 1, 180_000, 13_500_000, "linear", "sync", 8),
    (8, 1, 180_000, 13_500_000, "linear", "async", 4),    # async: 4 busy
    (64, 1, 1_800_000, 135_000_000, "linear", "sync", 64),  # 2M rows: all 64 in sync mode
    (64, 1, 1_800_000, 135_000_000, "linear", "async", 8),  # ... and 8 in async mode
    (64, 2, 1_800_000, 135_000_000, "linear", "sync", 64),  # 2 threads: 67 busy
    (64, 4, 1_800_000, 135_000_000, "linear", "sync", 33),  # 4 threads: half as many
    (64, 1, 150_000, 135_000_000, "linear", "sync", 15),  # dense rows: block momentum's rows
    (64, 1, 150_000, 135_000_000, "linear", "async", 8),  # (sync only)
    (64, 1, 10**7, 1_000_000_000, "linear", "async", 20),  # none holds over 50M non-zeros
    (64, 1, 10**5, 1_000_000_000, "linear", "sync", 20),   # (whatever else caps them)
    (16, 1, 5_000, 400_000, "linear", "sync", 2),       # a small set: never below two
    (2, 1, 10, 10, "linear", "async", 2), (1, 1, 10, 10, "linear", "sync", 1),
    (16, 1, 5_000, 400_000, "mlp", "async", 16)])       # an MLP's work is not its non-zeros
def test_engage_auto_keeps_the_workers_the_data_keeps_busy(
        workers: int, threads: int, rows: int, nnz: int, model: str, mode: str,
        expected: int) -> None:
    assert engaged_workers("auto", workers, threads, nnz, model, mode, rows) == expected
    assert engaged_workers("all", workers, threads, nnz, model, mode, rows) == workers
    # Idempotent: a resumed run of the engaged workers engages them all again.
    assert engaged_workers("auto", expected, threads, nnz, model, mode, rows) == expected


def test_engage_auto_without_the_rows_counts_non_zeros_alone() -> None:
    assert engaged_workers("auto", 64, 1, 135_000_000, "linear", "sync", 150_000) == 15
    assert engaged_workers("auto", 64, 1, 135_000_000, "linear", "sync") == 64


def test_the_engaged_note_names_what_held_the_workers_back() -> None:
    rows = engaged_note(64, 15, 1, 135_000_000, "sync", 150_000)
    assert rows is not None and rows.startswith(
        "engaging 15 of 64 workers: 150,000 training rows are 10,000 a worker, and block "
        "momentum needs 10,000")
    work = engaged_note(64, 13, 1, 13_500_000, "sync", 180_000)
    assert work is not None and "13,500,000 training non-zeros are 1.04M an epoch" in work
    assert work.endswith("The other 51 are released at the start (`engage: all` trains on "
                         "every worker)")
    one = engaged_note(3, 2, 2, 422_952, "async")
    assert one is not None and "The other one is released at the start" in one


def test_engaged_settings_resolve_the_topology_for_the_workers_engaged() -> None:
    s = load(None, {}, {"workers": 16, "threads": 1, "mode": "async"})
    assert s.for_run().topology == "star"  # data unknown: all 16
    run = s.for_run(180_000, 13_500_000)
    assert (run.workers, run.topology, run.combine) == (4, "mesh", "momentum")
    assert engaged_note(16, 4, 1, 13_500_000, "async").startswith(
        "engaging 4 of 16 workers: 13,500,000 training non-zeros are 3.38M an epoch for each")
    assert engaged_note(4, 4, 1, 13_500_000) is None
    every = load(None, {}, {"workers": 16, "threads": 1, "engage": "all", "mode": "async"})
    assert every.for_run(180_000, 13_500_000).workers == 16
    # Sync: 13 of 16 on 200k rows, a tree, block momentum (13,846 rows each).
    sync = s.replace(mode="sync").for_run(180_000, 13_500_000)
    assert (sync.workers, sync.topology, sync.combine) == (13, "tree", "momentum")
    note = engaged_note(16, 13, 1, 13_500_000)
    assert note is not None and "from about 1M a thread in sync mode" in note
    # 2M rows: all 64 in sync mode (a tree), 8 in async mode (a mesh).
    wide = load(None, {}, {"workers": 64, "threads": 1})
    slow = wide.for_run(1_800_000, 135_000_000)
    assert (slow.workers, slow.topology, slow.combine) == (64, "tree", "momentum")
    fast = wide.replace(mode="async").for_run(1_800_000, 135_000_000)
    assert (fast.workers, fast.topology, fast.combine) == (8, "mesh", "momentum")
    note = engaged_note(64, 8, 1, 135_000_000, "async")
    assert note is not None and "no run of more than 8 was measured faster" in note


@pytest.mark.parametrize(("thread_epoch_nnz", "workers", "expected"), [
    (8.5e6, 16, 4),    # 2M RCV1-shaped rows over 16 workers of one thread
    (4.2e6, 32, 3),
    (2.1e6, 64, 1),    # ... over 64: a round an epoch
    (3.4e6, 4, 2),     # 200k rows over 4 workers
    (1.7e6, 8, 1),
    (1e3, 2, 1),       # never below one round an epoch
    (1e3, 1, MIN_ROUNDS_PER_EPOCH)])  # one worker: rounds only refresh the coordinator
def test_momentum_rounds_follow_a_threads_share_of_the_epoch(
        thread_epoch_nnz: float, workers: int, expected: int) -> None:
    assert momentum_rounds_per_epoch(thread_epoch_nnz, workers) == expected
    assert round_rule("momentum", workers, thread_epoch_nnz) == (ROUND_NNZ_AVERAGE, expected)


def test_momentum_round_sizes_as_a_run_lays_them_out() -> None:
    # 1.8M rows of 76 non-zeros: 16 one-thread workers train 4 rounds an epoch, 64 one.
    rows, nnz = 1_800_000, 1_800_000 * 76
    assert choose_round_size(None, rows, nnz, 16, "momentum", 16) == rows // (16 * 4)
    assert choose_round_size(None, rows, nnz, 64, "momentum", 64) == rows // 64
    # A round size asked for is kept within the same bound.
    assert choose_round_size(10**9, rows, nnz, 64, "momentum", 64) == rows // 64


def test_sync_momentum_with_few_rounds_against_the_workers_scales_their_steps() -> None:
    """W / (4 K) for K rounds an epoch where that is above 1; nothing changes with shorter
    rounds, another combine, async, or four workers and fewer."""
    rows, nnz = 1_800_000, 1_800_000 * 76
    for workers, expected in ((64, 16.0), (48, 6.0), (32, 8 / 3), (16, 1.0), (8, 1.0)):
        size = choose_round_size(None, rows, nnz, workers, "momentum", workers)
        assert momentum_step_scale("momentum", "sync", workers, rows, workers, size) == expected
    whole = rows // 64  # a round of a whole epoch (of one-thread workers)
    assert momentum_step_scale("momentum", "sync", 8, 8 * whole, 8, whole) == 2.0
    assert momentum_step_scale("momentum", "sync", 8, 8 * whole, 8, whole // 2) == 1.0
    assert momentum_step_scale("momentum", "sync", 16, 16 * whole, 16, whole // 2) == 2.0
    assert momentum_step_scale("momentum", "async", 64, rows, 64, whole) == 1.0
    assert momentum_step_scale("sum", "sync", 64, rows, 64, whole) == 1.0
    assert momentum_step_scale("momentum", "sync", 4, 4 * whole, 4, whole) == 1.0
    # Two threads a worker: a worker's epoch is twice a thread's rows.
    assert momentum_step_scale("momentum", "sync", 8, 16 * whole, 16, whole) == 2.0


@pytest.mark.parametrize("combine", ["momentum", "average", "sum"])
def test_a_round_trains_a_few_non_zeros_per_weight_of_the_model(combine: str) -> None:
    """Hashed features: a round's delta is built, filtered and sent over every weight, so
    a round trains at least ROUND_NNZ_PER_FEATURE non-zeros per weight; on a model of 47k
    weights that floor is far below the usual work and changes nothing."""
    rows, per_row = 2_000_000, 75
    small = choose_round_size(None, rows, rows * per_row, 2, combine, 2, 47_237)
    assert small == choose_round_size(None, rows, rows * per_row, 2, combine, 2)
    hashed = choose_round_size(None, rows, rows * per_row, 2, combine, 2, (1 << 22) + 1)
    work, per_epoch = round_rule(combine, 2, rows * per_row / 2, (1 << 22) + 1)
    assert work == ROUND_NNZ_PER_FEATURE * ((1 << 22) + 1)
    cap = rows // (2 * per_epoch)  # still never past the combine's share of an epoch
    assert hashed == min(-(-work // per_row), cap) > small


@pytest.mark.parametrize("final", [False, True])
@pytest.mark.parametrize("owing", [False, True])
def test_the_compiled_dense_filter_is_numpys_formula_bit_for_bit(final: bool,
                                                                 owing: bool) -> None:
    """model.delta_kernels.momentum_step against the whole-vector numpy formula it replaced,
    operation for operation (the sparse path, checked against the dense one above, is that
    formula too)."""
    from hogwild.model.delta_kernels import momentum_step

    rng = np.random.default_rng(7)
    n, workers = 10_001, 3
    snap = rng.normal(size=n)
    w = snap + rng.normal(scale=1e-3, size=n) * (rng.random(n) < 0.5)
    v_old = rng.normal(scale=1e-3, size=n) * (rng.random(n) < 0.5)
    owed = rng.normal(scale=1e-6, size=n) if owing else np.zeros(0)
    eta = block_momentum(workers)
    change = np.subtract(w, snap)
    if owing:
        change -= owed
    scaled = np.multiply(v_old, eta)
    np.multiply(change, 1.0 / workers, out=change)
    v_expected = np.add(scaled, change)
    term = (np.subtract(v_expected, scaled) if final
            else np.subtract(np.multiply(v_expected, 1.0 + eta), scaled))
    if owing:
        term += owed
    w_expected = np.add(snap, term)
    v_new = np.empty(n)
    momentum_step(w, snap, v_old, v_new, owed, eta, 1.0 / workers, final)
    assert v_new.tobytes() == v_expected.tobytes()
    assert w.tobytes() == w_expected.tobytes()
