"""In-process trainer: T threads run the SGD kernel on one shared weight vector (HOGWILD!)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hogwild.config import BOUNDS, sgd_problem
from hogwild.data._threads import run_parallel
from hogwild.engine.threads import Calls, KernelPlan, ThreadCursor, ThreadRounds
from hogwild.model import kernels
from hogwild.model.arrays import CSRArrays, CSRLike, check_weights, csr_arrays, new_weights
from hogwild.model.hot import ROWS_PER_HOT_FEATURE, choose_hot_features
from hogwild.model.losses import get_loss
from hogwild.model.schedule import kernel_schedule
from hogwild.model.spec import ModelSpec

MODES: tuple[str, ...] = ("hogwild", "locked", "serial", "syncsgd")

# Locked mode hands the lock over every few rows so that it is the round-robin baseline of the
# HOGWILD! paper (updates serialised in turn), not one thread running its block alone.
LOCKED_BATCH_ROWS = 64
# A thread's gradient scratch for the mini-batch kernels: grad, seen, touched.
_Scratch = tuple[npt.NDArray[np.float64], npt.NDArray[np.uint8], npt.NDArray[np.int64]]


@dataclass(frozen=True)
class TrainParams:
    """How to train; validated on construction (ValueError names the parameter).

    mode: ``hogwild`` (T threads, no lock), ``locked`` (T threads taking turns under one lock,
    LOCKED_BATCH_ROWS rows per turn), ``serial`` (one thread) or ``syncsgd`` (synchronous
    SGD: the T threads compute the gradients of one mini-batch of ``batch_size`` rows at the
    same weights, which are summed and applied once; then the next mini-batch; at most
    ``batch_size`` threads, so batch_size 1 is plain one-thread SGD). batch_rows
    is the number of rows per kernel call in hogwild and serial mode (>= 1,000 keeps call
    overhead negligible).

    batch_size: 1 = per-example SGD (kernels.sgd_range); B > 1 = each thread steps once per
    B of its rows by their mean gradient (kernels.sgd_batch_range), and in syncsgd mode the
    size of the mini-batch the threads share. Buffered features are per-example only.

    hot_features: in hogwild mode with more than one thread, features ``0 .. hot_features-1``
    go through a per-thread view of ``w`` published in tiers (kernels.sgd_range), which
    removes the cache-line contention on frequent features. The data must be renumbered by
    document frequency first (``hogwild.data.transform.reorder``; RENUMBERED_HOT_FEATURES is the value
    to use then); if its frequent features are not at the low ids, the trainer ignores the
    setting. 0 (the default) turns buffering off.
    """

    loss: str = "hinge"
    learning_rate: float = 0.5
    lr_schedule: str = "inverse"
    lr_decay: float = 0.9
    power_t: float = 0.5
    l2: float = 1e-5
    fit_bias: bool = True
    threads: int = 2
    mode: str = "hogwild"
    batch_rows: int = 4096
    hot_features: int = 0
    batch_size: int = 1

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"{name}: {why} (got {getattr(self, name)!r})")

        problem = sgd_problem(self)  # the settings' own choices and bounds
        if problem is not None:
            raise bad(*problem)
        for name in ("threads", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) not in BOUNDS[name]:
                raise bad(name, f"must be an integer and {BOUNDS[name].why.removeprefix('must be ')}")
        if self.mode not in MODES:
            raise bad("mode", f"must be one of {', '.join(MODES)}")
        if not isinstance(self.batch_rows, int) or self.batch_rows < 1:
            raise bad("batch_rows", "must be an integer >= 1")
        if not isinstance(self.hot_features, int) or self.hot_features < 0:
            raise bad("hot_features", "must be an integer >= 0")


@dataclass(frozen=True)
class EpochStats:
    """One pass: its index, wall time, mean pre-update training loss and rows seen."""

    epoch: int
    seconds: float
    train_loss: float
    examples: int


class _TurnTaking:
    """Strict round-robin among the threads still working (locked mode)."""

    def __init__(self, n: int) -> None:
        self._cond = threading.Condition()
        self._active = list(range(n))
        self._pos = 0

    def acquire(self, k: int) -> None:
        with self._cond:
            while self._active[self._pos] != k:
                self._cond.wait()

    def release(self) -> None:
        with self._cond:
            self._pos = (self._pos + 1) % len(self._active)
            self._cond.notify_all()

    def leave(self, k: int) -> None:
        with self._cond:
            current = self._active[self._pos]
            i = self._active.index(k)
            self._active.remove(k)
            if self._active:
                self._pos = i % len(self._active) if current == k else self._active.index(current)
            self._cond.notify_all()


class Trainer:
    """Trains the linear model ``w`` (float64, n_features + 1, bias last) in this process.

    ``w`` may be passed in; it is then used in place, never copied, so another thread (e.g. a
    delta exchange) can read and update the same array while training runs.

    Rows may carry weights (CSRData.weights): each row's gradient is scaled by its weight.
    :attr:`average_sum`, when set to a zero vector the size of ``w`` (or one carried over
    from earlier calls), turns on averaged SGD: the kernels add each weight change times its
    step number to it, and :meth:`averaged` gives the mean of the iterates since ``w0``
    (per-example steps only: not syncsgd or batch_size > 1).

    Each epoch of the hogwild, locked and serial modes is one round of the engine's thread
    loop (engine/threads.py), the loop a cluster worker runs, with nothing exchanged after
    it. ``syncsgd`` is the synchronous mini-batch baseline: threads meet at a barrier after
    every mini-batch, a loop of its own (:meth:`_sync_epoch`).
    """

    def __init__(
        self, n_features: int, params: TrainParams, w: npt.NDArray[np.float64] | None = None
    ) -> None:
        if n_features < 1:
            raise ValueError(f"n_features: must be >= 1 (got {n_features})")
        self.n_features = n_features
        self.params = params
        self.loss = get_loss(params.loss)
        self.w: npt.NDArray[np.float64] = self._initial_weights(w)
        # Examples seen so far (+1): the invscaling step counter, carried across epochs.
        self.t = 1.0
        self.average_sum: npt.NDArray[np.float64] | None = None
        # Rows of an epoch for the schedule (None: each pass's rows; see Calls.epoch_rows).
        self.epoch_rows: int | None = None
        self._next_epoch = 0
        # Per-thread gradient scratch of the mini-batch kernels, made on first use.
        self._scratch: list[_Scratch] = []

    def _initial_weights(
        self, w: npt.NDArray[np.float64] | None
    ) -> npt.NDArray[np.float64]:
        """The model vector to train: a zero model, or ``w`` checked (never copied)."""
        return new_weights(self.n_features) if w is None else check_weights(w, self.n_features)

    def _model_spec(self) -> ModelSpec:
        """The model the threads' kernel trains (the MLP trainer's differs)."""
        return ModelSpec.linear(self.n_features)

    def fit_epoch(self, data: CSRLike, epoch: int) -> EpochStats:
        """One pass over ``data`` in row order (rows should already be permuted)."""
        return self._epoch(csr_arrays(data, self.n_features), epoch)

    def fit(
        self,
        data: CSRLike,
        epochs: int,
        callback: Callable[[EpochStats], bool | None] | None = None,
    ) -> list[EpochStats]:
        """``epochs`` passes, continuing the epoch count of earlier calls; a callback returning
        True stops after that epoch."""
        if epochs < 0:
            raise ValueError(f"epochs: must be >= 0 (got {epochs})")
        arrays = csr_arrays(data, self.n_features)
        history: list[EpochStats] = []
        for _ in range(epochs):
            stats = self._epoch(arrays, self._next_epoch)
            history.append(stats)
            if callback is not None and callback(stats) is True:
                break
        return history

    def _epoch(self, a: CSRArrays, epoch: int) -> EpochStats:
        """One pass: a single round of the engine's thread loop (engine/threads.py) with
        nothing exchanged after it, each thread one pass over its block of rows."""
        p = self.params
        n = a.n_rows
        unit = self.epoch_rows or n
        _, _, _, t_shift = kernel_schedule(
            p.lr_schedule, float(p.learning_rate), float(p.lr_decay), float(p.power_t), epoch,
            unit)
        n_threads = 1 if p.mode == "serial" else max(1, min(p.threads, n))
        if self.average_sum is not None and (p.mode == "syncsgd" or p.batch_size > 1):
            raise ValueError("averaging needs per-example steps: not trainer syncsgd nor "
                             "batch_size > 1")
        if p.mode == "syncsgd":
            # At most one thread per row of a mini-batch: more would only wait at barriers.
            n_threads = min(n_threads, p.batch_size)
            if n_threads > 1:
                schedule, lr0, power_t, _ = kernel_schedule(
                    p.lr_schedule, float(p.learning_rate), float(p.lr_decay),
                    float(p.power_t), epoch, unit)
                return self._sync_epoch(a, epoch, lr0, schedule, n_threads, power_t,
                                        t_shift)
        batch = min(p.batch_rows, LOCKED_BATCH_ROWS) if p.mode == "locked" else p.batch_rows
        mini = p.batch_size
        if mini > 1:
            batch = -(-batch // mini) * mini  # whole mini-batches per call
        hot = 0
        if p.mode == "hogwild" and n_threads > 1 and p.hot_features > 0 and mini == 1:
            wide = max(batch, ROWS_PER_HOT_FEATURE * min(p.hot_features, self.n_features))
            hot = choose_hot_features(a, self.n_features, p.hot_features, n_threads,
                                      min(wide, n // n_threads))
            if hot:
                batch = wide
        calls = Calls(rows=batch, flush_rows=self._flush_rows(), batch_size=mini,
                      scratch=tuple(self._scratch_for(n_threads)) if mini > 1 else (),
                      turns=_TurnTaking(n_threads) if p.mode == "locked" and n_threads > 1
                      else None, average=self.average_sum, epoch_rows=self.epoch_rows)
        # (round_size is not read: each round is a whole pass over the thread's block; the
        # MLP's flush interval goes as Calls.flush_rows.)
        plan = self._kernel_plan(n_threads, thread_buffer=True)
        # Contiguous blocks, one per thread; step counters interleave (thread k sees
        # t, t + T, t + 2T, ... from t0 + k), approximating the global example count.
        cursors = [ThreadCursor(lo, hi, lo, passes=epoch, t=self.t + k)
                   for k, (lo, hi) in enumerate(
                       (n * k // n_threads, n * (k + 1) // n_threads)
                       for k in range(n_threads))]
        loss_sums: list[float] = []
        rounds = ThreadRounds(a, self.w, lambda: plan, cursors, epoch, epoch, hot=hot,
                              calls=calls, whole_blocks=True,
                              on_round=lambda loss, *_: loss_sums.append(loss))
        began = time.perf_counter()
        rounds.run_alone()
        seconds = time.perf_counter() - began
        self.t += n
        self._next_epoch = epoch + 1
        return EpochStats(
            epoch=epoch,
            seconds=seconds,
            train_loss=sum(loss_sums) / n if n else 0.0,
            examples=n,
        )

    def averaged(self, w0: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The mean of the iterates since averaging began at ``w0`` (step counter 1), from
        :attr:`average_sum`; ``w`` itself when averaging is off."""
        if self.average_sum is None:
            return self.w.copy()
        return kernels.averaged(self.w, w0, self.average_sum, self.t - 1.0)

    def _kernel_plan(self, threads: int, thread_buffer: bool) -> KernelPlan:
        """The kernels' view of these settings (round_size unread: a round is a pass)."""
        p = self.params
        return KernelPlan(self._model_spec(), p.loss, 0, threads, float(p.learning_rate),
                          p.lr_schedule, float(p.lr_decay), float(p.power_t), float(p.l2),
                          bool(p.fit_bias), thread_buffer, self._deep_lr_scale())

    def _flush_rows(self) -> int | None:
        """Rows between two publications of the MLP's dense-layer changes (None: linear)."""
        return None

    def _deep_lr_scale(self) -> float:
        return 1.0

    def _scratch_for(self, n_threads: int) -> list[_Scratch]:
        """Gradient scratch (kernels' grad, seen, touched) for threads 0 .. n_threads-1."""
        size = self.n_features + 1
        while len(self._scratch) < n_threads:
            self._scratch.append((np.zeros(size, dtype=np.float64),
                                  np.zeros(size, dtype=np.uint8),
                                  np.zeros(size, dtype=np.int64)))
        return self._scratch[:n_threads]

    def _sync_epoch(self, a: CSRArrays, epoch: int, lr0: float, schedule: int,
                    n_threads: int, power_t: float, t_shift: float) -> EpochStats:
        """One pass of synchronous SGD: per mini-batch every thread sums the gradients of its
        share of the rows at the same ``w`` (which nobody writes meanwhile); at the barrier
        one thread applies the summed mean gradient, then all move on to the next batch. The
        result equals one-thread mini-batch SGD up to the order of float additions."""
        p = self.params
        n = a.n_rows
        size = p.batch_size
        l2, fit_bias = float(p.l2), bool(p.fit_bias)
        scratch = self._scratch_for(n_threads)
        counts = [0] * n_threads
        loss_sums = [0.0] * n_threads
        # [first row of the current mini-batch, step counter at it]; changed only by the
        # barrier action, while every thread waits.
        cursor = [0, self.t + t_shift]
        failures: list[BaseException] = []

        def apply_batch() -> None:
            b0 = int(cursor[0])
            b1 = min(b0 + size, n)
            lr = lr0 / cursor[1] ** power_t if schedule == kernels.INVSCALING else lr0
            for k in range(n_threads):
                kernels.apply_gradient(self.w, *scratch[k], counts[k], lr / (b1 - b0))
            cursor[0] = b1
            cursor[1] += b1 - b0

        barrier = threading.Barrier(n_threads, action=apply_batch)

        def work(k: int) -> None:
            grad, seen, touched = scratch[k]
            try:
                while cursor[0] < n:
                    b0 = int(cursor[0])
                    b1 = min(b0 + size, n)
                    lo = b0 + (b1 - b0) * k // n_threads
                    hi = b0 + (b1 - b0) * (k + 1) // n_threads
                    counts[k], part = kernels.batch_gradient(
                        a.indptr, a.indices, a.values, a.labels, lo, hi, self.w,
                        self.n_features, self.loss.code, l2, fit_bias, grad, seen,
                        touched, 0, a.weights)
                    loss_sums[k] += part
                    barrier.wait()
            except threading.BrokenBarrierError:
                pass  # another thread failed; its error is the one reported
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                failures.append(exc)
                barrier.abort()

        began = time.perf_counter()
        run_parallel(work, [(k,) for k in range(n_threads)], name="syncsgd")
        seconds = time.perf_counter() - began
        if failures:
            raise failures[0]
        if barrier.broken:
            raise RuntimeError("syncsgd: a mini-batch could not be applied")
        self.t += n
        self._next_epoch = epoch + 1
        return EpochStats(epoch=epoch, seconds=seconds,
                          train_loss=sum(loss_sums) / n if n else 0.0, examples=n)


