"""The one HOGWILD! loop (engine.threads.ThreadRounds): rounds, gates, failures, null exchange."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.engine.threads import KernelPlan, ThreadRounds, make_cursors
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.model.arrays import CSRArrays
from hogwild.model.spec import ModelSpec

N_FEATURES = 50


def _rows(n: int = 600, seed: int = 0) -> CSRArrays:
    rng = np.random.default_rng(seed)
    per_row = 5
    indices = rng.integers(0, N_FEATURES, size=n * per_row).astype(np.int32)
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    values = rng.random(n * per_row).astype(np.float32)
    truth = rng.normal(size=N_FEATURES)
    margins = np.add.reduceat(truth[indices] * values, indptr[:-1])
    labels = np.where(margins > 0, 1.0, -1.0).astype(np.float32)
    return CSRArrays(indptr, indices, values, labels)


def _plan(threads: int, round_size: int) -> KernelPlan:
    return KernelPlan(spec=ModelSpec.linear(N_FEATURES), loss="hinge", round_size=round_size,
                      threads=threads, learning_rate=0.5)


def test_run_alone_trains_every_block_once_per_round() -> None:
    rows = _rows()
    plan = _plan(3, 0)
    cursors = make_cursors(rows.n_rows, 3)
    seen: list[int] = []
    w = np.zeros(N_FEATURES + 1)
    loop = ThreadRounds(rows, w, lambda: plan, cursors, 1, 2, whole_blocks=True,
                        on_round=lambda loss, n, *_: seen.append(n))
    loop.run_alone()
    assert sorted(seen) == [200] * 6  # 3 threads x 2 rounds, a whole block each
    assert [c.passes for c in cursors] == [2, 2, 2]
    assert [c.examples for c in cursors] == [400, 400, 400]
    assert loop.done == [2, 2, 2] and loop.alive == [False] * 3
    assert np.abs(w).sum() > 0


def test_rounds_of_a_quarter_block_equal_one_whole_block_round() -> None:
    # What a cluster worker does (round_size rows a round, a boundary between them) and what
    # `train` does (one pass a round) are the same loop: with one thread, the same weights.
    rows = _rows()
    whole = np.zeros(N_FEATURES + 1)
    ThreadRounds(rows, whole, lambda: _plan(1, 0), make_cursors(rows.n_rows, 1), 1, 1,
                 whole_blocks=True).run_alone()
    quarters = np.zeros(N_FEATURES + 1)
    boundaries: list[int] = []
    loop = ThreadRounds(rows, quarters, lambda: _plan(1, 150), make_cursors(rows.n_rows, 1),
                        1, 4, on_round=lambda *_: boundaries.append(len(boundaries) + 1))
    loop.run_alone()
    assert boundaries == [1, 2, 3, 4]
    # (Equal up to float rounding: a kernel call publishes its buffered bias at its end.)
    np.testing.assert_allclose(quarters, whole, rtol=1e-9, atol=1e-12)


def test_a_gate_holds_threads_until_the_caller_opens_the_next_round() -> None:
    rows = _rows()
    plan = _plan(2, 50)
    cond = threading.Condition()
    opened = [1]
    stop = threading.Event()

    def gate(r: int) -> bool:
        with cond:
            cond.wait_for(lambda: opened[0] >= r or stop.is_set(), timeout=10.0)
            return not stop.is_set()

    loop = ThreadRounds(rows, np.zeros(N_FEATURES + 1), lambda: plan,
                        make_cursors(rows.n_rows, 2), 1, 10, gate=gate, cond=cond)
    loop.start()
    order: list[int] = []

    def at_least(r: int) -> Callable[[], bool]:
        return lambda: loop.slowest()[0] >= r

    for r in range(1, 4):  # the caller's "exchange": every thread is at the boundary
        with cond:
            assert cond.wait_for(at_least(r), timeout=10.0)
            assert max(loop.done) == r  # nobody ran ahead of the gate
            order.append(r)
            opened[0] = r + 1
            cond.notify_all()
    with cond:
        assert cond.wait_for(at_least(4), timeout=10.0)
    stop.set()
    with cond:
        cond.notify_all()
    loop.join()
    assert order == [1, 2, 3]
    assert loop.slowest() == (4, False)  # round 4 was open; round 5 was refused


def test_a_failing_thread_is_reported_and_the_others_finish() -> None:
    rows = _rows()
    plan = _plan(2, 50)

    def plan_of_this_thread() -> KernelPlan:
        if threading.current_thread().name == "sgd-1":
            raise RuntimeError("thread 1 breaks")
        return plan

    failed: list[tuple[int, str]] = []
    loop = ThreadRounds(rows, np.zeros(N_FEATURES + 1), plan_of_this_thread,
                        make_cursors(rows.n_rows, 2), 1, 3,
                        on_failure=lambda k, exc: failed.append((k, str(exc))))
    with pytest.raises(RuntimeError, match="thread 1 breaks"):
        loop.run_alone()
    assert failed == [(1, "thread 1 breaks")]
    assert loop.done == [3, 0] and loop.alive == [False, False]


def test_the_trainer_epoch_is_one_round_of_the_loop() -> None:
    rows = _rows()
    data = CSRData(rows.indptr, rows.indices, rows.values, rows.labels, N_FEATURES)
    trainer = Trainer(N_FEATURES, TrainParams(mode="serial", learning_rate=0.5))
    trainer.fit_epoch(data, 0)
    w = np.zeros(N_FEATURES + 1)
    ThreadRounds(rows, w, lambda: _plan(1, 0), make_cursors(rows.n_rows, 1), 1, 1,
                 whole_blocks=True).run_alone()
    # The loop's own default hyperparameters are the simulator's (lr_decay, power_t, l2 0):
    # the same ones given to the trainer's plan give the same weights.
    params = TrainParams(mode="serial", learning_rate=0.5, lr_decay=1.0, power_t=1.0, l2=0.0)
    trainer = Trainer(N_FEATURES, params)
    trainer.fit_epoch(data, 0)
    assert np.array_equal(trainer.w, w)
