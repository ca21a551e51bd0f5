"""The one HOGWILD! loop: T threads run the SGD kernel on one shared w, no lock, round by round.

The kernel is the linear model's or the sparse-input MLP's (``plan.spec``); both update the
one flat parameter vector ``w`` in place.

Each thread owns a contiguous block of the rows and streams through it in order (rows were
permuted once when the shard was built), ``round_size`` rows per round, wrapping around at
the end of its block (one wrap = one pass; the constant schedule decays the step size by
``lr_decay`` per pass, the inverse one divides it by 1 + the passes done). The kernel
releases the GIL, so the threads run in parallel.

:class:`ThreadRounds` runs those threads over a sequence of rounds; what happens between
two rounds is its caller's: a cluster worker exchanges deltas there (worker/roundloop.py), the
in-process trainer nothing (the null exchange: :meth:`ThreadRounds.run_alone`, one round a
pass over each thread's block).

On a GPU (``Calls.device``, engine/gpu_rounds.py) one "thread" streams through the whole
shard, ``threads * round_size`` rows a round, and each of its kernel calls is one launch on
the device instead of a CPU kernel: the cursor, the wrap, the passes and the schedule stay
this module's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hogwild.model import kernels, mlp_kernels
from hogwild.model.arrays import CSRArrays
from hogwild.model.losses import get_loss
from hogwild.model.mlp_kernels import BUFFERED_FLUSH_ROWS
from hogwild.model.schedule import kernel_schedule
from hogwild.model.spec import ModelSpec


class ThreadPlan(Protocol):
    """What a training thread reads of the run (the worker's RunPlan, the simulator's plan)."""

    @property
    def spec(self) -> ModelSpec: ...
    @property
    def loss_code(self) -> int: ...
    @property
    def round_size(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def n_features(self) -> int: ...
    @property
    def lr_schedule(self) -> str: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def lr_decay(self) -> float: ...
    @property
    def power_t(self) -> float: ...
    @property
    def l2(self) -> float: ...
    @property
    def fit_bias(self) -> bool: ...
    @property
    def thread_buffer(self) -> bool: ...
    @property
    def deep_lr_scale(self) -> float: ...


@dataclass(frozen=True)
class KernelPlan:
    """A :class:`ThreadPlan` of its own: the simulator's virtual workers and the in-process
    trainer's epochs (a cluster worker reads its RunPlan)."""

    spec: ModelSpec
    loss: str
    round_size: int
    threads: int
    learning_rate: float
    lr_schedule: str = "inverse"
    lr_decay: float = 1.0
    power_t: float = 1.0
    l2: float = 0.0
    fit_bias: bool = True
    thread_buffer: bool = False
    deep_lr_scale: float = 1.0

    @property
    def n_features(self) -> int:
        return self.spec.n_features

    @property
    def loss_code(self) -> int:
        return get_loss(self.loss).code


@dataclass
class ThreadCursor:
    """Where one thread is in its block of rows [lo, hi)."""

    lo: int
    hi: int
    pos: int
    passes: int = 0
    t: float = 1.0          # step counter of the invscaling schedule
    examples: int = 0


def make_cursors(n_rows: int, threads: int, start_fraction: float = 0.0) -> list[ThreadCursor]:
    """One cursor per thread over contiguous blocks; each starts ``start_fraction`` of the way
    into its block (replicated shards: workers begin at different rows of the same data)."""
    cursors = []
    for k in range(threads):
        lo, hi = n_rows * k // threads, n_rows * (k + 1) // threads
        offset = int((hi - lo) * start_fraction) if hi > lo else 0
        cursors.append(ThreadCursor(lo, hi, lo + offset, t=1.0 + k))
    return cursors


class DeviceKernel(Protocol):
    """A kernel call on an accelerator (engine/gpu_rounds.py): rows [start, stop) of the
    arrays it holds, the step counter from ``t0`` by one per row; updates ``w`` in place and
    returns (t_end, loss sum), as ``kernels.sgd_range`` does."""

    def sgd_range(self, start: int, stop: int, w: npt.NDArray[np.float64], plan: ThreadPlan,
                  lr0: float, schedule: int, power_t: float,
                  t0: float) -> tuple[float, float]: ...


class Turns(Protocol):
    """Locked mode's turn-taking: thread ``k`` runs a kernel call only while it holds the turn."""

    def acquire(self, k: int) -> None: ...
    def release(self) -> None: ...
    def leave(self, k: int) -> None: ...


@dataclass(frozen=True)
class Calls:
    """How a thread cuts a round into kernel calls; the defaults are a cluster worker's.

    ``rows``: rows per call at most (None: up to the end of the round or of the block).
    ``flush_rows``: the MLP's rows between two publications of a thread's dense-layer changes
    (None: from ``plan.thread_buffer``). ``batch_size`` > 1: a step per that many rows by their
    mean gradient (kernels.sgd_batch_range, linear model only; ``scratch`` then holds each
    thread's gradient buffers). ``turns``: take turns for each call (locked mode).
    ``device``: the calls run there (one cursor over all the rows; see the module docstring).
    ``average``: the averaging sum of averaged SGD (kernels.averaged; per-example linear
    kernel on the CPU only), None: off. ``epoch_rows``: the rows of one epoch for the
    step-size schedule (None: the arrays' rows; a stream trained in pieces sets it).
    """

    rows: int | None = None
    flush_rows: int | None = None
    batch_size: int = 1
    scratch: tuple[tuple[npt.NDArray[np.float64], npt.NDArray[np.uint8],
                         npt.NDArray[np.int64]], ...] = ()
    turns: Turns | None = None
    device: DeviceKernel | None = None
    average: npt.NDArray[np.float64] | None = None
    epoch_rows: int | None = None


WORKER_CALLS = Calls()


def train_round(arrays: CSRArrays, w: npt.NDArray[np.float64], plan: ThreadPlan,
                cursor: ThreadCursor, hot: int = 0, rows: int | None = None,
                calls: Calls = WORKER_CALLS, k: int = 0) -> tuple[float, int]:
    """``rows`` (default ``round_size``; on a device ``threads * round_size``) SGD steps for
    thread ``k`` (fewer only if its block is empty); returns (sum of pre-update losses, rows
    processed). Safe to run from T threads at once."""
    if cursor.hi <= cursor.lo:
        return 0.0, 0
    device = calls.device
    # A device stands for all T threads: it trains their rows of a round as one stream,
    # whose step counter moves by 1 a row (its sgd_range), not by T.
    remaining = (plan.round_size * (plan.threads if device is not None else 1)
                 if rows is None else rows)
    loss_sum = 0.0
    done = 0
    t_step = float(plan.threads)
    spec = plan.spec
    hidden = spec.hidden_array()
    # Dense layers of the MLP: published every BUFFERED_FLUSH_ROWS rows with thread_buffer.
    flush_rows = calls.flush_rows or (BUFFERED_FLUSH_ROWS if plan.thread_buffer else 1)
    turns = calls.turns
    row_weights = arrays.weights
    if (row_weights is not None or calls.average is not None) and (
            device is not None or spec.is_mlp):
        raise ValueError("row weights and averaging are trained by the linear model's CPU "
                         "kernels only (not model mlp, not a GPU)")
    if calls.average is not None and calls.batch_size > 1:
        raise ValueError("averaging needs per-example steps (batch_size 1)")
    while remaining > 0:
        start = cursor.pos
        stop = min(cursor.hi, start + remaining)
        if calls.rows is not None:
            stop = min(stop, start + calls.rows)
        # The inverse schedule counts epochs in passes over this worker's rows: with its
        # step counter (own examples) that is the run's epochs (partition or replicate).
        schedule, lr0, power_t, t_shift = kernel_schedule(
            plan.lr_schedule, plan.learning_rate, plan.lr_decay, plan.power_t, cursor.passes,
            calls.epoch_rows or arrays.n_rows)
        if turns is not None:
            turns.acquire(k)
        try:
            if device is not None:
                t_end, part = device.sgd_range(start, stop, w, plan, lr0, schedule, power_t,
                                               cursor.t + t_shift)
            elif spec.is_mlp:
                t_end, part = mlp_kernels.mlp_sgd_range(
                    arrays.indptr, arrays.indices, arrays.values, arrays.labels, start, stop,
                    w, plan.n_features, hidden, plan.loss_code, lr0, schedule, power_t,
                    cursor.t + t_shift, plan.l2, plan.fit_bias, spec.binary_features, t_step,
                    flush_rows, plan.deep_lr_scale)
            elif calls.batch_size > 1:
                t_end, part = kernels.sgd_batch_range(
                    arrays.indptr, arrays.indices, arrays.values, arrays.labels, start, stop,
                    w, plan.n_features, plan.loss_code, lr0, schedule, power_t,
                    cursor.t + t_shift, plan.l2, plan.fit_bias, t_step, calls.batch_size,
                    *calls.scratch[k], row_weights)
            elif row_weights is None and calls.average is None:
                t_end, part = kernels.sgd_range(
                    arrays.indptr, arrays.indices, arrays.values, arrays.labels, start, stop,
                    w, plan.n_features, plan.loss_code, lr0, schedule, power_t,
                    cursor.t + t_shift, plan.l2, plan.fit_bias, t_step, hot)
            else:
                # The averaging index is the step counter without the schedule's offset:
                # 1 + the examples seen.
                t_end, part = kernels.sgd_range(
                    arrays.indptr, arrays.indices, arrays.values, arrays.labels, start, stop,
                    w, plan.n_features, plan.loss_code, lr0, schedule, power_t,
                    cursor.t + t_shift, plan.l2, plan.fit_bias, t_step, hot, row_weights,
                    calls.average, t_shift)
        finally:
            if turns is not None:
                turns.release()
        cursor.t = float(t_end) - t_shift
        loss_sum += float(part)
        rows = stop - start
        done += rows
        remaining -= rows
        cursor.pos = stop
        if stop >= cursor.hi:
            cursor.pos = cursor.lo
            cursor.passes += 1
    cursor.examples += done
    return loss_sum, done


# What a thread reports of each round it trained, under the loop's condition: (loss sum,
# rows, seconds waiting to start it, seconds training it, CPU seconds of that training).
RoundDone = Callable[[float, int, float, float, float], None]


class ThreadRounds:
    """T threads, thread k training rounds ``first .. last`` on its ``cursors[k]``.

    Before each round a thread asks ``gate(r)`` (None: always yes); False ends it (a stop, or
    a sync barrier that will not open). After each it calls ``on_round`` and records ``r`` in
    :attr:`done`, both under ``cond``, and notifies it: the caller waits there for the round
    boundary (:meth:`slowest`) and does its exchange. ``plan`` is read at each round (a
    coordinator may shrink the step meanwhile). A thread that raises stops there; the error is
    kept in :attr:`failures` and handed to ``on_failure``. ``whole_blocks``: each round is one
    pass over the thread's block rather than ``round_size`` rows.
    """

    def __init__(self, arrays: CSRArrays, w: npt.NDArray[np.float64],
                 plan: Callable[[], ThreadPlan], cursors: list[ThreadCursor], first: int,
                 last: int, *, hot: int = 0, calls: Calls = WORKER_CALLS,
                 gate: Callable[[int], bool] | None = None, on_round: RoundDone | None = None,
                 on_failure: Callable[[int, Exception], None] | None = None,
                 cond: threading.Condition | None = None, whole_blocks: bool = False,
                 name: str = "sgd") -> None:
        self.arrays = arrays
        self.w = w
        self.plan = plan
        self.cursors = cursors
        self.first, self.last = first, last
        self.hot = hot
        self.calls = calls
        self.gate = gate
        self.on_round = on_round
        self.on_failure = on_failure
        self.cond = cond if cond is not None else threading.Condition()
        self.whole_blocks = whole_blocks
        self.done = [first - 1] * len(cursors)   # the last round each thread finished
        self.alive = [True] * len(cursors)
        self.failures: list[Exception] = []
        self._threads = [threading.Thread(target=self._train, args=(k,), name=f"{name}-{k}",
                                          daemon=True) for k in range(len(cursors))]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        for thread in self._threads:
            thread.join()

    def slowest(self) -> tuple[int, bool]:
        """(the round every thread has finished, whether any thread still runs); call under
        ``cond``."""
        return min(self.done), any(self.alive)

    def run_alone(self) -> None:
        """The null exchange: every thread trains its rounds and nothing happens between them;
        returns once all are done; re-raises the first failure."""
        if len(self._threads) == 1:
            self._train(0)  # one thread: on the caller's, as serial training always was
        else:
            self.start()
            self.join()
        if self.failures:
            raise self.failures[0]

    def _train(self, k: int) -> None:
        cursor = self.cursors[k]
        turns = self.calls.turns
        try:
            for r in range(self.first, self.last + 1):
                t0 = time.perf_counter()
                if self.gate is not None and not self.gate(r):
                    break
                t1 = time.perf_counter()
                c1 = time.thread_time()
                rows = cursor.hi - cursor.lo if self.whole_blocks else None
                loss_sum, trained = train_round(self.arrays, self.w, self.plan(), cursor,
                                                self.hot, rows, self.calls, k)
                t2 = time.perf_counter()
                c2 = time.thread_time()
                with self.cond:
                    self.done[k] = r
                    if self.on_round is not None:
                        self.on_round(loss_sum, trained, t1 - t0, t2 - t1, c2 - c1)
                    self.cond.notify_all()
        except Exception as exc:  # noqa: BLE001 - kept for the caller, which reports or raises
            self.failures.append(exc)
            if self.on_failure is not None:
                self.on_failure(k, exc)
        finally:
            if turns is not None:
                turns.leave(k)
            with self.cond:
                self.alive[k] = False
                self.cond.notify_all()
