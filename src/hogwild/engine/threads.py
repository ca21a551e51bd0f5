"""One worker's part of a round: T threads run the SGD kernel on one shared w, no lock.

The kernel is the linear model's or the sparse-input MLP's (``plan.spec``); both update the
one flat parameter vector ``w`` in place.

Each thread owns a contiguous block of the shard's rows and streams through it in order
(rows were permuted once when the shard was built), ``round_size`` rows per round, wrapping
around at the end of its block (one wrap = one pass; the constant schedule decays the step
size by ``lr_decay`` per pass, the inverse one divides it by 1 + the passes done). The kernel releases the GIL, so the threads run in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hogwild.model import kernels, mlp_kernels
from hogwild.model.arrays import CSRArrays
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


def train_round(arrays: CSRArrays, w: npt.NDArray[np.float64], plan: ThreadPlan,
                cursor: ThreadCursor, hot: int = 0) -> tuple[float, int]:
    """``round_size`` SGD steps for one thread (fewer only if its block is empty);
    returns (sum of pre-update losses, rows processed). Safe to run from T threads at once."""
    if cursor.hi <= cursor.lo:
        return 0.0, 0
    remaining = plan.round_size
    loss_sum = 0.0
    done = 0
    t_step = float(plan.threads)
    spec = plan.spec
    hidden = spec.hidden_array()
    # Dense layers of the MLP: published every BUFFERED_FLUSH_ROWS rows with thread_buffer.
    flush_rows = BUFFERED_FLUSH_ROWS if plan.thread_buffer else 1
    while remaining > 0:
        start = cursor.pos
        stop = min(cursor.hi, start + remaining)
        # The inverse schedule counts epochs in passes over this worker's rows: with its
        # step counter (own examples) that is the run's epochs (partition or replicate).
        schedule, lr0, power_t, t_shift = kernel_schedule(
            plan.lr_schedule, plan.learning_rate, plan.lr_decay, plan.power_t, cursor.passes,
            arrays.n_rows)
        if spec.is_mlp:
            t_end, part = mlp_kernels.mlp_sgd_range(
                arrays.indptr, arrays.indices, arrays.values, arrays.labels, start, stop, w,
                plan.n_features, hidden, plan.loss_code, lr0, schedule, power_t,
                cursor.t + t_shift, plan.l2, plan.fit_bias, spec.binary_features, t_step,
                flush_rows, plan.deep_lr_scale)
        else:
            t_end, part = kernels.sgd_range(
                arrays.indptr, arrays.indices, arrays.values, arrays.labels, start, stop, w,
                plan.n_features, plan.loss_code, lr0, schedule, power_t, cursor.t + t_shift,
                plan.l2, plan.fit_bias, t_step, hot)
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
