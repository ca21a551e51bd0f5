"""This machine's compute for the simulator: a training thread's speed, a round's arithmetic.

``hogwild simulate --calibrate`` times the kernel on the run's own training rows (the run's
model and loss, on a scratch copy of the weights) with as many threads at once as the run
would keep busy here (its workers x threads, at most this machine's cores), since threads
that share a machine share its memory bandwidth: two workers of one thread on two cores
train each slower than one alone. The fastest of a few timed passes, in non-zeros per second
per thread, becomes every virtual worker's speed. ``round_costs`` times the round engine's
own work between a worker's training and its send (building its delta, applying one).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import numpy.typing as npt

from hogwild.base.hosts import machine_cores
from hogwild.engine.round import RoundEngine
from hogwild.engine.rules import ExchangeRules
from hogwild.engine.threads import KernelPlan, make_cursors, train_round
from hogwild.model.arrays import CSRArrays

REPEATS = 5
MAX_ROWS = 200_000   # enough to fill the caches as a real round does; bounded in time


def busy_threads(workers: int, threads: int) -> int:
    """The threads a run of ``workers`` x ``threads`` keeps busy on this machine."""
    return max(1, min(workers * threads, machine_cores()))


def kernel_speed(rows: CSRArrays, plan: KernelPlan, concurrent: int = 1, seed: int = 0,
                 repeats: int = REPEATS) -> float:
    """Non-zeros per second of one thread training ``rows`` (at most MAX_ROWS of them, cut
    into ``concurrent`` blocks trained at once, as Hogwild threads do)."""
    n = min(rows.n_rows, MAX_ROWS)
    if n == 0:
        raise ValueError("no training rows to time the kernel on")
    k = max(1, min(concurrent, n))
    nnz = int(rows.indptr[n] - rows.indptr[0])
    one = dataclasses.replace(plan, threads=k, round_size=n)
    w = plan.spec.initial_weights(seed)

    def one_pass() -> float:
        cursors = make_cursors(n, k)
        workers = [threading.Thread(target=train_round, args=(rows, w, one, c),
                                    kwargs={"rows": c.hi - c.lo}) for c in cursors]
        began = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        return time.perf_counter() - began

    one_pass()  # compiled and warm
    # The fastest pass: what the machine does undisturbed (a busy machine only slows some).
    wall = min(one_pass() for _ in range(repeats))
    return max(1, nnz) / k / max(wall, 1e-9)


@dataclasses.dataclass(frozen=True)
class _Peer:
    round: int = 0
    settled: bool = False


def round_costs(rules: ExchangeRules, w0: npt.NDArray[np.float64],
                repeats: int = REPEATS) -> tuple[float, float]:
    """(build, apply): the seconds a worker's round engine takes here to build its own delta
    after a round and to apply one arrived delta, on a change to every weight (a round of
    many rows touches most of them): the fastest of ``repeats`` passes each."""
    dim = w0.shape[0]
    engine = RoundEngine(rules, w0.copy())
    peers = {p: _Peer() for p in range(1, rules.n_peers + 1)}
    rng = np.random.default_rng(0)
    change = np.asarray(rng.normal(0.0, 1e-3, dim), dtype=np.float64)
    idx, val = np.arange(dim, dtype=np.int32), change.astype(np.float32)
    builds, applies = [], []
    for r in range(1, repeats + 2):
        engine.w += change
        began = time.perf_counter()
        engine.apply([(idx, val)])
        applied = time.perf_counter()
        engine.build(r, False, lambda: peers)
        builds.append(time.perf_counter() - applied)
        applies.append(applied - began)
    return min(builds[1:]), min(applies[1:])  # the first pass compiles
