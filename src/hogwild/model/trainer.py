"""In-process trainer: T threads run the SGD kernel on one shared weight vector (HOGWILD!)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hogwild.config import BOUNDS
from hogwild.config import SCHEDULES as SCHEDULE_NAMES
from hogwild.data._threads import run_parallel
from hogwild.data.reorder import count_features
from hogwild.model import kernels, mlp_kernels
from hogwild.model.arrays import (
    CSRArrays,
    CSRLike,
    check_weights,
    csr_arrays,
    feature_counts,
    new_weights,
)
from hogwild.model.losses import LOSS_NAMES, get_loss

MODES: tuple[str, ...] = ("hogwild", "locked", "serial", "syncsgd")
# The kernel code of each schedule the settings name (see kernel_schedule: only constant
# steps without a decay in t; inverse is invscaling with its own lr0, power and offset).
SCHEDULES: dict[str, int] = {name: kernels.CONSTANT if name == "constant" else kernels.INVSCALING
                             for name in SCHEDULE_NAMES}


def kernel_schedule(name: str, learning_rate: float, lr_decay: float, power_t: float,
                    epoch: int, epoch_rows: int) -> tuple[int, float, float, float]:
    """``(schedule code, lr0, power_t, t offset)`` for the kernels, whose step counter ``t``
    is 1 + the examples seen so far (+ the offset) and whose step is lr0 (constant) or
    lr0 / t ** power_t (invscaling).

    * ``inverse``: learning_rate / (1 + examples seen / epoch_rows), i.e. the rate divided by
      1 + the epochs done, decaying with every example (lr0 = learning_rate x epoch_rows over
      t offset by epoch_rows - 1, power 1). The SGD step of Bottou and of scikit-learn's
      ``optimal`` schedule, measured in epochs so that it does not depend on the data size.
    * ``constant``: learning_rate x lr_decay ** epoch, fixed within an epoch.
    * ``invscaling``: learning_rate / t ** power_t, as in scikit-learn.
    """
    if name == "constant":
        return kernels.CONSTANT, learning_rate * lr_decay ** epoch, power_t, 0.0
    if name == "invscaling":
        return kernels.INVSCALING, learning_rate, power_t, 0.0
    rows = float(max(epoch_rows, 1))
    return kernels.INVSCALING, learning_rate * rows, 1.0, rows - 1.0

# Locked mode hands the lock over every few rows so that it is the round-robin baseline of the
# HOGWILD! paper (updates serialised in turn), not one thread running its block alone.
LOCKED_BATCH_ROWS = 64

# hot_features for data renumbered by frequency (hogwild.data.reorder): every feature of a
# data set up to this size goes through the per-thread view; 2 x 8 bytes per buffered feature
# and thread, so at most 4 MiB per thread on larger feature spaces.
RENUMBERED_HOT_FEATURES = 1 << 18
# With buffered features a kernel call costs O(hot) on top of its rows (view filled at the
# start, everything published at the end): calls get at least this many rows per feature.
ROWS_PER_HOT_FEATURE = 4
# Buffering is used only if no buffered feature would get more than this many expected own
# updates between two publications (a bound that data ranked by frequency meets: at most
# max(BIAS_FLUSH_ROWS, HOT_TIER_GROWTH x non-zeros per row)); otherwise the trainer falls
# back to the unbuffered kernel instead of letting threads drift apart on frequent features.
MAX_STALENESS_FACTOR = 2.0

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
    document frequency first (``hogwild.data.reorder``; RENUMBERED_HOT_FEATURES is the value
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

        if self.loss not in LOSS_NAMES:
            raise bad("loss", f"must be one of {', '.join(LOSS_NAMES)}")
        if self.lr_schedule not in SCHEDULES:
            raise bad("lr_schedule", f"must be one of {', '.join(SCHEDULES)}")
        # The settings' own bounds (hogwild.config.BOUNDS), so that the Python API and the
        # command line accept the same values.
        for name in ("learning_rate", "lr_decay", "power_t", "l2"):
            if getattr(self, name) not in BOUNDS[name]:
                raise bad(name, BOUNDS[name].why)
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
        self._next_epoch = 0
        # Per-thread gradient scratch of the mini-batch kernels, made on first use.
        self._scratch: list[_Scratch] = []

    def _initial_weights(
        self, w: npt.NDArray[np.float64] | None
    ) -> npt.NDArray[np.float64]:
        """The model vector to train: a zero model, or ``w`` checked (never copied)."""
        return new_weights(self.n_features) if w is None else check_weights(w, self.n_features)

    def _sgd(self, a: CSRArrays, start: int, stop: int, lr0: float, schedule: int,
             power_t: float, t: float, l2: float, fit_bias: bool, t_step: float,
             hot: int) -> tuple[float, float]:
        """One kernel call over rows [start, stop): (step counter after it, loss sum)."""
        t_end, loss_sum = kernels.sgd_range(
            a.indptr, a.indices, a.values, a.labels, start, stop, self.w, self.n_features,
            self.loss.code, lr0, schedule, power_t, t, l2, fit_bias, t_step, hot)
        return float(t_end), float(loss_sum)

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
        p = self.params
        n = a.n_rows
        schedule, lr0, power_t, t_shift = kernel_schedule(
            p.lr_schedule, float(p.learning_rate), float(p.lr_decay), float(p.power_t), epoch, n)
        l2, fit_bias = float(p.l2), bool(p.fit_bias)
        n_threads = 1 if p.mode == "serial" else max(1, min(p.threads, n))
        if p.mode == "syncsgd":
            # At most one thread per row of a mini-batch: more would only wait at barriers.
            n_threads = min(n_threads, p.batch_size)
            if n_threads > 1:
                return self._sync_epoch(a, epoch, lr0, schedule, n_threads, power_t,
                                        t_shift)
        batch = min(p.batch_rows, LOCKED_BATCH_ROWS) if p.mode == "locked" else p.batch_rows
        mini = p.batch_size
        scratch = self._scratch_for(n_threads) if mini > 1 else []
        if mini > 1:
            batch = -(-batch // mini) * mini  # whole mini-batches per call
        hot = 0
        if p.mode == "hogwild" and n_threads > 1 and p.hot_features > 0 and mini == 1:
            wide = max(batch, ROWS_PER_HOT_FEATURE * min(p.hot_features, self.n_features))
            hot = choose_hot_features(a, self.n_features, p.hot_features, n_threads,
                                      min(wide, n // n_threads))
            if hot:
                batch = wide
        turns = _TurnTaking(n_threads) if p.mode == "locked" and n_threads > 1 else None
        # Contiguous blocks, one per thread; step counters interleave (thread k sees
        # t, t + T, t + 2T, ... from t0 + k), approximating the global example count.
        bounds = [n * k // n_threads for k in range(n_threads + 1)]
        t_base = self.t + t_shift
        loss_sums = [0.0] * n_threads
        failures: list[Exception] = []

        def work(k: int) -> None:
            try:
                t = t_base + k
                total = 0.0
                for start in range(bounds[k], bounds[k + 1], batch):
                    stop = min(start + batch, bounds[k + 1])
                    if turns is not None:
                        turns.acquire(k)
                    try:
                        if mini == 1:
                            t, loss_sum = self._sgd(a, start, stop, lr0, schedule, power_t,
                                                    float(t), l2, fit_bias, float(n_threads),
                                                    hot)
                        else:
                            t, loss_sum = kernels.sgd_batch_range(
                                a.indptr, a.indices, a.values, a.labels, start, stop, self.w,
                                self.n_features, self.loss.code, lr0, schedule, power_t,
                                float(t), l2, fit_bias, float(n_threads), mini, *scratch[k],
                            )
                    finally:
                        if turns is not None:
                            turns.release()
                    total += loss_sum
                loss_sums[k] = total
            except Exception as exc:  # noqa: BLE001 - re-raised in the calling thread below
                failures.append(exc)
            finally:
                if turns is not None:
                    turns.leave(k)

        began = time.perf_counter()
        run_parallel(work, [(k,) for k in range(n_threads)], name="sgd")
        seconds = time.perf_counter() - began
        if failures:
            raise failures[0]
        self.t = t_base - t_shift + n
        self._next_epoch = epoch + 1
        return EpochStats(
            epoch=epoch,
            seconds=seconds,
            train_loss=sum(loss_sums) / n if n else 0.0,
            examples=n,
        )

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
                        touched, 0)
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



def choose_hot_features(a: CSRArrays, n_features: int, requested: int, n_threads: int,
                        call_rows: int) -> int:
    """The ``hot`` argument for kernels.sgd_range: ``min(requested, n_features)`` when more
    than one thread shares ``w`` and the data's ids are ranked by frequency, else 0.

    Ranked means that no buffered feature would get more than MAX_STALENESS_FACTOR x the
    bound of ranked data in expected own updates between two publications (its share of rows
    x its publication interval, capped by ``call_rows``, the rows per kernel call). The
    per-feature counts are computed once per index array (cached).
    """
    hot = min(max(requested, 0), n_features)
    if n_threads < 2 or hot == 0 or a.n_rows == 0:
        return 0
    share = feature_counts(a.indices, n_features)[:hot] / a.n_rows
    interval = np.full(hot, float(kernels.BIAS_FLUSH_ROWS))
    span = kernels.BIAS_FLUSH_ROWS
    while span < hot:
        interval[span:] *= kernels.HOT_TIER_GROWTH
        span *= kernels.HOT_TIER_GROWTH
    staleness = float(np.max(share * np.minimum(interval, max(call_rows, 1))))
    nnz_per_row = a.indices.shape[0] / a.n_rows
    bound = max(kernels.BIAS_FLUSH_ROWS, kernels.HOT_TIER_GROWTH * nnz_per_row)
    return hot if staleness <= MAX_STALENESS_FACTOR * bound else 0


def warmup() -> None:
    """Compile (or load from the on-disk cache) every kernel with the dtypes used in
    production, so that timings exclude JIT compilation."""
    indptr = np.array([0, 2, 3], dtype=np.int64)
    indices = np.array([0, 1, 1], dtype=np.int32)
    values = np.array([0.5, 0.5, 1.0], dtype=np.float32)
    labels = np.array([1.0, -1.0], dtype=np.float32)
    n_features = 2
    w = np.zeros(n_features + 1, dtype=np.float64)
    for fit_bias in (True, False):
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias, 1.0)
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias)
        kernels.sgd_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1, 0, 0.5,
                          1.0, 0.0, fit_bias, 2.0, 1)
        grad = np.zeros(n_features + 1, dtype=np.float64)
        seen = np.zeros(n_features + 1, dtype=np.uint8)
        touched = np.zeros(n_features + 1, dtype=np.int64)
        kernels.sgd_batch_range(indptr, indices, values, labels, 0, 2, w, n_features, 0, 0.1,
                                0, 0.5, 1.0, 0.0, fit_bias, 1.0, 2, grad, seen, touched)
        n_touched, _ = kernels.batch_gradient(indptr, indices, values, labels, 0, 2, w,
                                              n_features, 0, 0.0, fit_bias, grad, seen,
                                              touched, 0)
        kernels.apply_gradient(w, grad, seen, touched, n_touched, 0.1)
    out = np.empty(2, dtype=np.float64)
    kernels.decision(indptr, indices, values, w, n_features, out)
    kernels.evaluate(indptr, indices, values, labels, w, n_features, 0)
    snap = np.zeros_like(w)
    idx = np.empty(w.shape[0], dtype=np.int32)
    val = np.empty(w.shape[0], dtype=np.float32)
    n = kernels.build_delta(w, snap, idx, val)
    kernels.cut_changes(w, snap, 0, 0.5)
    kernels.apply_delta(w, snap, idx[:n], val[:n])
    kernels.apply_delta(w, np.empty(0, dtype=np.float64), idx[:n], val[:n])
    # Received deltas are read-only views of their messages (a type of their own to numba),
    # their index range built on receipt when sent dense: those variants too.
    ro_idx, ro_val = idx[:n].copy(), val[:n].copy()
    ro_idx.flags.writeable = False
    ro_val.flags.writeable = False
    for a, b in ((ro_idx, ro_val), (idx[:n], ro_val)):
        kernels.apply_delta(w, snap, a, b)
    kernels.add_scaled(w, snap, 1.0)
    count_features(indices, np.zeros(n_features, dtype=np.int64))
    mlp_kernels.warmup()  # the MLP's kernels too
