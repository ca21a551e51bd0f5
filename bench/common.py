"""Shared helpers of the benchmark scripts: timing, tables, data sets, text writers, bandwidth."""

from __future__ import annotations

import gzip
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
from numba import njit

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
RCV1_FEATURES = 47_236

# Real data sets in ../shared/data: name -> (train file, test file, feature count).
REAL_SETS: dict[str, tuple[str, str, int]] = {
    "rcv1_vw_subset": ("rcv1_vw_subset.train.libsvm.gz", "rcv1_vw_subset.test.libsvm.gz", 47_236),
    "reuters_earn": ("reuters21578_modapte_earn.train.libsvm.gz",
                     "reuters21578_modapte_earn.test.libsvm.gz", 15_206),
    "spamassassin": ("spamassassin.train.libsvm.gz", "spamassassin.test.libsvm.gz", 23_941),
    "sst2": ("sst2_glue.train.libsvm.gz", "sst2_glue.test.libsvm.gz", 73_674),
}


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------
# A timed run during which other processes used more cores than this counts as disturbed.
DISTURBED_CORES = 0.25


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated runs and the cores other processes used during each.

    ``median`` is taken over the quiet runs (others < DISTURBED_CORES) when at least three
    (or all, if fewer were made) were quiet, else over all runs; ``quality`` says which."""

    runs: tuple[float, ...]
    others: tuple[float, ...] = ()

    @property
    def quiet_runs(self) -> tuple[float, ...]:
        if not self.others:
            return self.runs
        quiet = tuple(r for r, o in zip(self.runs, self.others) if o < DISTURBED_CORES)
        return quiet if len(quiet) >= min(3, len(self.runs)) else self.runs

    @property
    def median(self) -> float:
        return float(statistics.median(self.quiet_runs))

    @property
    def best(self) -> float:
        return float(min(self.runs))

    def spread(self) -> str:
        """min-max of the runs the median is taken over, to show how noisy a number is."""
        return f"{min(self.quiet_runs):.3f}-{max(self.quiet_runs):.3f}"

    def quality(self) -> str:
        """'3/5 quiet' etc.: how many runs had the machine to themselves."""
        if not self.others:
            return "-"
        n_quiet = sum(o < DISTURBED_CORES for o in self.others)
        used = "quiet only" if len(self.quiet_runs) < len(self.runs) else "all"
        return f"{n_quiet}/{len(self.runs)} quiet, median of {used}"


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Run ``fn()`` once: (wall seconds, cores other processes used meanwhile)."""
    with CpuMeter() as m:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
    return dt, m.others


def time_runs(fn: Callable[[], Any], repeats: int = 3,
              setup: Callable[[], Any] | None = None) -> Timing:
    """Time ``fn()`` ``repeats`` times (``setup()`` before each run, untimed)."""
    runs, others = [], []
    for _ in range(max(1, repeats)):
        if setup is not None:
            setup()
        dt, o = timed(fn)
        runs.append(dt)
        others.append(o)
    return Timing(tuple(runs), tuple(others))


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as sw: ...`` then ``sw[0]`` holds the elapsed seconds."""
    box: list[float] = [0.0]
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - t0


# --------------------------------------------------------------------------------------
# Other processes: on 2 cores any busy neighbour distorts a 2-thread timing, so measure it
# --------------------------------------------------------------------------------------
def _system_busy_seconds() -> float:
    """CPU seconds all processes have run since boot (user+nice+system+irq+softirq+steal)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return float("nan")
    ticks = [int(x) for x in fields]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    # process_time has ns resolution (os.times only clock ticks); children: finished ones only
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


class CpuMeter:
    """CPU used by this process (and its children) and by everybody else, in cores, over a
    stretch of wall time: ``with CpuMeter() as m: ...`` then ``m.own``, ``m.others``."""

    def __enter__(self) -> Self:
        self._t = time.perf_counter()
        self._sys = _system_busy_seconds()
        self._own = _own_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.perf_counter() - self._t, 1e-9)
        own = _own_seconds() - self._own
        self.own = own / wall
        self.others = max(0.0, (_system_busy_seconds() - self._sys - own) / wall)


def repo_env() -> dict[str, str]:
    """This environment for a `hogwild` child process: this checkout's sources first on its
    path, and no HOGWILD_* settings of the caller's (the command line says what is run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOGWILD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def wait_for_quiet(max_wait: float, threshold: float = 0.15, settle: int = 3) -> float:
    """Wait (up to ``max_wait`` s) until other processes use under ``threshold`` cores for
    ``settle`` consecutive seconds; returns their last measured use, in cores."""
    deadline = time.monotonic() + max_wait
    calm = 0
    others = float("nan")
    while True:
        with CpuMeter() as m:
            time.sleep(1.0)
        others = m.others
        calm = calm + 1 if others < threshold else 0
        if calm >= settle or time.monotonic() >= deadline:
            return others


# --------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------
def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> None:
    """A plain fixed-width table (floats with 3 decimals, None as '-')."""
    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 1 else f"{v:.3f}"
        return str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    if title:
        print(f"\n== {title} ==")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ratio_line(label: str, value: float, target: str | None = None,
               ok: bool | None = None) -> str:
    """One line 'label ........ 2.34x   target >= 2x  PASS'."""
    text = f"  {label:<44} {value:8.2f}x"
    if target is not None:
        text += f"   target {target:<10}"
        if ok is not None:
            text += f" {verdict(ok)}"
    return text


def load_line() -> str:
    """The load average: other busy processes on a 2-core machine distort 2-thread timings."""
    one, five, _ = os.getloadavg()
    warn = "  (busy: other processes compete for the cores)" if one > 0.7 else ""
    return f"load average: {one:.2f} (1 min), {five:.2f} (5 min){warn}"


def machine_line() -> str:
    """One line naming the machine and library versions the numbers come from."""
    import platform

    import numba

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"machine: {cpu}, {os.cpu_count()} cores; python {platform.python_version()}, "
            f"numpy {np.__version__}, numba {numba.__version__}")


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------
def csr_from_arrays(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                    labels: np.ndarray, n_features: int) -> Any:
    """A ``hogwild.data.csr.CSRData`` holding the arrays."""
    from hogwild.data.csr import CSRData

    return CSRData(indptr, indices, values, labels, n_features)


def rcv1_like(n_rows: int, seed: int = 0, noise: float = 0.05) -> Any:
    """RCV1-shaped synthetic rows (47,236 features, ~75 non-zeros) from hogwild's generator
    (a plain numpy stand-in if this checkout has none)."""
    try:
        from hogwild.data.synthetic import make_rcv1_like
    except ImportError:
        return _numpy_rcv1_like(n_rows, RCV1_FEATURES, 75, noise, seed)
    return make_rcv1_like(n_rows, n_features=RCV1_FEATURES, avg_nnz=75, noise=noise, seed=seed)


@njit(cache=True)
def _sample_rows(indptr: Any, cdf: Any, ids: Any, u: Any, out: Any) -> int:
    """Draw each row's features from ``cdf`` (binary search), sort and de-duplicate them in
    place; returns the non-zeros kept and rewrites ``indptr`` accordingly."""
    n_rows = indptr.shape[0] - 1
    kept = 0
    src = 0
    for r in range(n_rows):
        n = indptr[r + 1] - indptr[r]
        start = kept
        for k in range(n):
            x = u[src + k]
            lo, hi = 0, cdf.shape[0] - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if cdf[mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            v = ids[lo]
            # insertion into the sorted run [start, kept), skipping duplicates
            j = kept
            while j > start and out[j - 1] > v:
                j -= 1
            if j > start and out[j - 1] == v:
                continue
            for q in range(kept, j, -1):
                out[q] = out[q - 1]
            out[j] = v
            kept += 1
        src += n
        indptr[r] = start
    indptr[n_rows] = kept
    return kept


def _numpy_rcv1_like(n_rows: int, n_features: int, avg_nnz: int, noise: float,
                     seed: int) -> Any:
    """Zipf-like feature popularity, unit-L2 rows, labels from a hidden linear model."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(2.0, avg_nnz / 2.0, n_rows).astype(np.int64) + 1, 1, 1000)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    pop = 1.0 / (np.arange(n_features) + 10.0) ** 0.9
    cdf = np.cumsum(pop / pop.sum())
    ids = rng.permutation(n_features).astype(np.int32)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    nnz = _sample_rows(indptr, cdf, ids, rng.random(int(indptr[-1])), indices)
    indices = indices[:nnz].copy()
    lengths = np.diff(indptr)
    values = (rng.random(nnz, dtype=np.float32) + np.float32(0.1))
    norms = np.sqrt(np.add.reduceat(values.astype(np.float64) ** 2, indptr[:-1]))
    values /= np.repeat(norms, lengths).astype(np.float32)
    w_true = rng.normal(size=n_features)
    margin = np.add.reduceat(values * w_true[indices], indptr[:-1])
    labels = np.where(margin > np.median(margin), 1.0, -1.0).astype(np.float32)
    flip = rng.random(n_rows) < noise
    labels[flip] = -labels[flip]
    return csr_from_arrays(indptr, indices, values, labels, n_features)


def load_real(name: str, max_rows: int | None = None) -> tuple[Any, Any]:
    """(train, test) CSRData of a set in ../shared/data, train cut to ``max_rows`` rows."""
    from hogwild.data.formats.svmlight import read_svmlight

    train_file, test_file, n_features = REAL_SETS[name]
    for f in (train_file, test_file):
        if not (SHARED_DATA / f).is_file():
            raise FileNotFoundError(f"{SHARED_DATA / f} is missing")
    train = read_svmlight(SHARED_DATA / train_file, n_features=n_features, cache=False)
    test = read_svmlight(SHARED_DATA / test_file, n_features=n_features, cache=False)
    if max_rows is not None and train.n_rows > max_rows:
        train = train.slice(0, max_rows)
    return train, test


def renumbered(train: Any, test: Any) -> tuple[Any, Any]:
    """Both sets with features renumbered by descending document frequency in ``train``, as
    the training job (``hogwild.engine.runstart.load_splits``) does before it trains."""
    from hogwild.data.transform.reorder import frequency_order, renumber

    order = frequency_order(train)
    return renumber(train, order), renumber(test, order)


def shuffled(data: Any, seed: int = 0) -> Any:
    """Rows in one fixed random order, physically copied (what the trainer streams through)."""
    order = np.random.default_rng(seed).permutation(data.n_rows)
    return data.take(order)


def to_scipy(data: Any) -> Any:
    """scipy CSR matrix over the same arrays (float32 values: scikit-learn keeps them)."""
    import scipy.sparse as sp

    return sp.csr_matrix((data.values, data.indices, data.indptr),
                         shape=(data.n_rows, data.n_features))


# --------------------------------------------------------------------------------------
# Text writers (svmlight and Vowpal Wabbit): compiled, so writing 50M non-zeros takes seconds
# --------------------------------------------------------------------------------------
@njit(cache=True)
def _put_uint(buf: Any, pos: int, v: int) -> int:
    if v == 0:
        buf[pos] = 48
        return pos + 1
    n = 0
    tmp = v
    while tmp > 0:
        n += 1
        tmp //= 10
    for i in range(n - 1, -1, -1):
        buf[pos + i] = 48 + v % 10
        v //= 10
    return pos + n


@njit(cache=True)
def _put_fixed(buf: Any, pos: int, x: float, digits: int) -> int:
    """x with ``digits`` decimals, trailing zeros dropped ("0.25", "1", "-0.1")."""
    if x < 0.0:
        buf[pos] = 45
        pos += 1
        x = -x
    scale = 10 ** digits
    q = int(x * scale + 0.5)
    ip = q // scale
    fp = q - ip * scale
    pos = _put_uint(buf, pos, ip)
    if fp != 0:
        nd = digits
        while fp % 10 == 0:
            fp //= 10
            nd -= 1
        buf[pos] = 46
        pos += 1
        for i in range(nd - 1, -1, -1):
            buf[pos + i] = 48 + fp % 10
            fp //= 10
        pos += nd
    return pos


@njit(cache=True)
def _format_rows(indptr: Any, indices: Any, values: Any, labels: Any, r0: int, r1: int,
                 buf: Any, one_based: int, vw: int, digits: int) -> int:
    pos = 0
    for r in range(r0, r1):
        y = labels[r]
        if y > 0:
            buf[pos] = 49
            pos += 1
        else:
            buf[pos] = 45
            buf[pos + 1] = 49
            pos += 2
        if vw:
            buf[pos] = 32
            buf[pos + 1] = 124
            pos += 2
        for k in range(indptr[r], indptr[r + 1]):
            buf[pos] = 32
            pos = _put_uint(buf, pos + 1, indices[k] + one_based)
            buf[pos] = 58
            pos = _put_fixed(buf, pos + 1, values[k], digits)
        buf[pos] = 10
        pos += 1
    return pos


def write_text(data: Any, path: Path, *, vw: bool = False, digits: int = 6,
               one_based: bool = True, chunk_rows: int = 20_000) -> int:
    """Write ``data`` as svmlight text (labels +1/-1 as '1'/'-1', 1-based ids) or, with
    ``vw=True``, as Vowpal Wabbit text ('1 | 3:0.25 ...', ids as the feature names).
    Gzipped if the name ends in .gz. Returns the bytes written (uncompressed)."""
    indptr, indices, values, labels = data.indptr, data.indices, data.values, data.labels
    n_rows = data.n_rows
    total = 0
    opener: Any = gzip.open if str(path).endswith(".gz") else open
    tmp = Path(str(path) + ".part")
    with opener(tmp, "wb") as fh:
        for r0 in range(0, n_rows, chunk_rows):
            r1 = min(n_rows, r0 + chunk_rows)
            nnz = int(indptr[r1] - indptr[r0])
            # Worst case per non-zero: space + 10-digit id + colon + sign + 12 chars of value.
            buf = np.empty(nnz * 26 + (r1 - r0) * 8 + 16, dtype=np.uint8)
            n = _format_rows(indptr, indices, values, labels, r0, r1, buf, int(one_based),
                             int(vw), digits)
            fh.write(buf[:n].tobytes())
            total += n
    tmp.replace(path)
    return total


# --------------------------------------------------------------------------------------
# Memory bandwidth
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bandwidth:
    """Streaming read bandwidth (bytes/s) of numpy's sum: one thread, and two threads on halves
    (numpy releases the GIL in the reduction, so the two really run at once)."""

    numpy_1t: float
    threads_2: float
    quality: str = ""

    @property
    def best(self) -> float:
        return max(self.numpy_1t, self.threads_2)


def read_bandwidth(n_bytes: int = 1 << 30, repeats: int = 5, quiet: float = 0.0) -> Bandwidth:
    """Median streaming read bandwidth over an array of ``n_bytes`` (float64, filled first),
    over the quiet runs when there are enough (see Timing); ``quiet`` as in wait_for_quiet."""
    a = np.ones(n_bytes // 8, dtype=np.float64)
    a.sum()  # touch every page once
    half = a.shape[0] // 2

    def two() -> None:
        th = threading.Thread(target=lambda: a[:half].sum())
        th.start()
        a[half:].sum()
        th.join()

    if quiet > 0:
        wait_for_quiet(quiet)
    one = time_runs(lambda: a.sum(), repeats)
    two_t = time_runs(two, repeats)
    nb = float(a.nbytes)
    return Bandwidth(numpy_1t=nb / one.median, threads_2=nb / two_t.median,
                     quality=f"1T {one.quality()}; 2T {two_t.quality()}")


def workdir(prefix: str = "hogwild-bench-") -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for written data (removed at exit)."""
    return tempfile.TemporaryDirectory(prefix=prefix)
