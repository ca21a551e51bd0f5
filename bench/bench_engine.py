"""Seconds per pass and test accuracy of the in-process Hogwild kernel against named peers.

One run, the same rows for everybody, renumbered by descending document frequency as the
training job does: hogwild (1 and 2 threads with the product's buffered hot features, 2 threads
with plain shared writes, locked and serial modes), scikit-learn's SGDClassifier, Vowpal Wabbit
reading its own cache, and a pure-Python dict SGD (on a subset, extrapolated); then the memory
floor of a pass, the ratios with their targets, and an investigation of what limits the
2-thread speedup. Usage: see bench/README.md.

``--threads 1,2,4,8,16`` prints only the thread-scaling table instead: seconds per pass
(median), speedup over one thread, non-zeros streamed per second and test accuracy after
the same passes, hogwild mode with the training job's hot features, the thread counts run
side by side pass by pass. Rows with more threads than this process may use (its CPU
affinity) are labelled oversubscribed: their time says nothing about scaling.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from common import Timing

LOSS = "hinge"


@dataclass
class Result:
    """One engine on one data set: per-pass timing, test accuracy after the equal epochs."""

    name: str
    per_pass: Timing | None
    accuracy: float | None
    note: str = ""
    own: float | None = None  # cores this process used while timed (2.0 = both cores)
    cpu: float | None = None  # median CPU seconds per pass (robust to a busy machine)

    @property
    def seconds(self) -> float:
        return self.per_pass.median if self.per_pass is not None else float("nan")


# --------------------------------------------------------------------------------------
# In-process engines, timed pass by pass
# --------------------------------------------------------------------------------------
class PassEngine:
    """An engine that can make one pass at a time over its train rows, then be scored."""

    name = ""
    note = ""

    def one_pass(self, epoch: int) -> None:
        raise NotImplementedError

    def accuracy(self) -> float:
        raise NotImplementedError


class HogwildEngine(PassEngine):
    """Trainer with its default hyper-parameters (hinge loss) and the given hot_features
    (the training job passes RENUMBERED_HOT_FEATURES on its renumbered data)."""

    def __init__(self, train: Any, test: Any, *, mode: str, threads: int, name: str,
                 hot_features: int, note: str = "") -> None:
        from hogwild.engine.trainer import Trainer, TrainParams

        self.name, self.note, self.train, self.test = name, note, train, test
        self.trainer = Trainer(train.n_features, TrainParams(loss=LOSS, threads=threads,
                                                             mode=mode,
                                                             hot_features=hot_features))

    def one_pass(self, epoch: int) -> None:
        self.trainer.fit_epoch(self.train, epoch)

    def accuracy(self) -> float:
        from hogwild.model.evaluation import evaluate

        acc = evaluate(self.test, self.trainer.w, LOSS).accuracy
        return float("nan") if acc is None else acc


class SklearnEngine(PassEngine):
    """SGDClassifier(hinge) with its defaults; one partial_fit call = one pass over the same
    (already permuted) rows, shuffle off so that it streams them in order like hogwild."""

    name = "scikit-learn SGDClassifier"
    note = "alpha=1e-4, 'optimal' step, float32 CSR"

    def __init__(self, train: Any, test: Any) -> None:
        from sklearn.linear_model import SGDClassifier  # type: ignore[import-untyped]

        self.X, self.y = common.to_scipy(train), train.labels
        self.Xt, self.yt = common.to_scipy(test), test.labels
        self.clf = SGDClassifier(loss="hinge", max_iter=1, tol=None, shuffle=False,
                                 random_state=0)
        self.classes = np.array([-1.0, 1.0], dtype=np.float32)

    def one_pass(self, epoch: int) -> None:
        self.clf.partial_fit(self.X, self.y, classes=self.classes)

    def accuracy(self) -> float:
        return float(self.clf.score(self.Xt, self.yt))


def run_interleaved(engines: dict[str, PassEngine], epochs: int,
                    quiet: float) -> dict[str, Result]:
    """Pass e of every engine, then pass e + 1 of every engine, ... (the order rotating), so
    that a neighbour's burst of CPU use lands on all engines alike rather than on one."""
    keys = list(engines)
    runs: dict[str, list[float]] = {k: [] for k in keys}
    others: dict[str, list[float]] = {k: [] for k in keys}
    own = dict.fromkeys(keys, 0.0)
    cpu: dict[str, list[float]] = {k: [] for k in keys}
    for e in range(epochs):
        if quiet > 0:
            common.wait_for_quiet(quiet, settle=2)
        for k in keys[e % len(keys):] + keys[:e % len(keys)]:
            with common.CpuMeter() as m:
                t0 = time.perf_counter()
                engines[k].one_pass(e)
                dt = time.perf_counter() - t0
            runs[k].append(dt)
            others[k].append(m.others)
            own[k] += m.own * dt
            cpu[k].append(m.own * dt)
    out = {}
    for k in keys:
        eng = engines[k]
        out[k] = Result(eng.name, Timing(tuple(runs[k]), tuple(others[k])), eng.accuracy(),
                        eng.note, own[k] / sum(runs[k]), float(np.median(cpu[k])))
    return out


# --------------------------------------------------------------------------------------
# Vowpal Wabbit
# --------------------------------------------------------------------------------------
VW_FLAGS = "--loss_function hinge --holdout_off -b 18 --quiet"


def _vw_run(args: str) -> tuple[float, float]:
    """Run VW's own driver (parser thread + learner) once; (seconds, examples seen)."""
    from vowpalwabbit import pyvw  # type: ignore[import-untyped]

    t0 = time.perf_counter()
    ws = pyvw.Workspace(args)
    ws.run_parser()
    seen = float(ws.get_weighted_examples())
    ws.finish()
    return time.perf_counter() - t0, seen


def run_vw(train: Any, test: Any, tmp: Path, *, epochs: int, repeats: int, tag: str,
           quiet: float = 0.0) -> tuple[Result, float]:
    """Per pass from VW's cache = (time of N passes - time of 1 pass) / (N - 1), each the
    median of ``repeats`` runs: the difference cancels start-up, cache opening and model
    writing. The timed runs get no -d, only --cache_file, so the cache is all VW can read;
    the example count it reports is checked against N x rows. Returns (result, seconds to
    parse the text and write the cache)."""
    train_txt, test_txt = tmp / f"{tag}.train.vw", tmp / f"{tag}.test.vw"
    cache, model, preds = tmp / f"{tag}.vwcache", tmp / f"{tag}.vwmodel", tmp / f"{tag}.pred"
    common.write_text(train, train_txt, vw=True)
    common.write_text(test, test_txt, vw=True)
    parse_s, seen = _vw_run(f"-d {train_txt} --cache_file {cache} {VW_FLAGS}")
    if seen != train.n_rows:
        raise RuntimeError(f"VW read {seen} examples from text, expected {train.n_rows}")
    n = max(2, epochs)
    one, many, others, cpu = [], [], [], []
    own = 0.0
    for _ in range(max(1, repeats)):
        if quiet > 0:
            common.wait_for_quiet(quiet, settle=2)
        with common.CpuMeter() as meter:
            s1, seen1 = _vw_run(f"--cache_file {cache} --passes 1 {VW_FLAGS}")
            sn, seenn = _vw_run(f"--cache_file {cache} --passes {n} {VW_FLAGS} -f {model}")
        if seen1 != train.n_rows or seenn != n * train.n_rows:
            raise RuntimeError(f"VW saw {seen1}/{seenn} examples from its cache, "
                               f"expected {train.n_rows}/{n * train.n_rows}")
        one.append(s1)
        many.append(sn)
        others.append(meter.others)
        own += meter.own * (s1 + sn)
        # CPU of the pair over its wall time, spread over passes like the wall time
        cpu.append(meter.own * (sn - s1) / (n - 1))
    per_pass = [(b - a) / (n - 1) for a, b in zip(one, many)]
    _vw_run(f"-i {model} -t -d {test_txt} -p {preds} --quiet")
    margin = np.loadtxt(preds, usecols=0, ndmin=1)
    acc = float(np.mean(np.where(margin >= 0.0, 1.0, -1.0) == test.labels))
    note = f"{n} passes; 1 pass {np.median(one):.3f}s, {n} passes {np.median(many):.3f}s"
    res = Result("Vowpal Wabbit (from cache)", Timing(tuple(per_pass), tuple(others)), acc,
                 note, own / (sum(one) + sum(many)), float(np.median(cpu)))
    return res, parse_s


# --------------------------------------------------------------------------------------
# pure Python (the first published implementation's approach)
# --------------------------------------------------------------------------------------
def _python_pass(rows: list[list[tuple[int, float]]], labels: list[float],
                 w: dict[int, float], lr: float, l2: float) -> None:
    """Hinge SGD, same update as the kernel (L2 on updating steps only): weights in a dict,
    rows as (index, value) lists."""
    keep = 1.0 - lr * l2
    bias = w.get(-1, 0.0)
    for x, y in zip(rows, labels):
        m = bias
        for i, v in x:
            m += w.get(i, 0.0) * v
        if y * m < 1.0:
            for i, v in x:
                w[i] = w.get(i, 0.0) * keep + lr * y * v
            bias += lr * y
    w[-1] = bias


def run_python(train: Any, n_rows: int, repeats: int) -> Result:
    """Time a pass over the first ``n_rows`` rows and scale to the whole train set."""
    n_rows = min(n_rows, train.n_rows)
    ip, ix, vs = train.indptr, train.indices.tolist(), train.values.tolist()
    rows = [list(zip(ix[ip[r]:ip[r + 1]], vs[ip[r]:ip[r + 1]])) for r in range(n_rows)]
    labels = train.labels[:n_rows].tolist()
    w: dict[int, float] = {}
    t = common.time_runs(lambda: _python_pass(rows, labels, w, 0.5, 1e-5), repeats)
    scale = train.n_rows / n_rows
    return Result("pure Python dict SGD", Timing(tuple(r * scale for r in t.runs), t.others),
                  None, f"timed on {n_rows:,} rows, scaled x{scale:.1f}")


# --------------------------------------------------------------------------------------
# What limits the 2-thread speedup
# --------------------------------------------------------------------------------------
def investigate_threads(train: Any, repeats: int,
                        quiet: float = 0.0) -> list[tuple[str, float, str, str]]:
    """The kernel called directly on the whole (renumbered) train set, from a model trained
    one pass.

    Shared w written directly (hot=0) vs shared w with the product's buffered hot features
    (per-thread view of the frequent weights, published in tiers; calls as long as the trainer
    makes them) vs a private w per thread (no sharing at all: the ceiling, what two cores
    streaming at once cost anyway). 1 thread on half the rows is the perfect-scaling time.
    """
    from hogwild.engine.trainer import Trainer, TrainParams
    from hogwild.model import kernels
    from hogwild.model.hot import RENUMBERED_HOT_FEATURES, ROWS_PER_HOT_FEATURE

    p = TrainParams(loss=LOSS)
    tr = Trainer(train.n_features, TrainParams(loss=LOSS, threads=1))
    tr.fit_epoch(train, 0)
    w0 = tr.w.copy()
    n, nf = train.n_rows, train.n_features
    a = (train.indptr, train.indices, train.values, train.labels)
    lr = p.learning_rate * p.lr_decay
    half = n // 2
    hot_all = min(RENUMBERED_HOT_FEATURES, nf)
    # the trainer's call length with buffered features (the view costs O(hot) per call)
    wide = min(max(p.batch_rows, ROWS_PER_HOT_FEATURE * hot_all), half)

    def kernel(w: np.ndarray, lo: int, hi: int, hot: int, batch: int) -> None:
        t = 1.0
        for s in range(lo, hi, batch):
            t, _ = kernels.sgd_range(*a, s, min(hi, s + batch), w, nf, 0, lr, 0, 0.5,
                                     t, p.l2, True, 2.0, hot)

    def one(lo: int, hi: int) -> None:
        kernel(w0.copy(), lo, hi, 0, p.batch_rows)

    def two(shared: bool, hot: int, batch: int) -> None:
        wa = w0.copy()
        wb = wa if shared else w0.copy()
        th = threading.Thread(target=kernel, args=(wb, half, n, hot, batch))
        th.start()
        kernel(wa, 0, half, hot, batch)
        th.join()

    # Share of rows whose hinge gradient is zero (margin >= 1): those steps write nothing.
    margins = np.empty(n, dtype=np.float64)
    kernels.decision(train.indptr, train.indices, train.values, w0, nf, margins)
    inactive = float(np.mean(train.labels * margins >= 1.0))

    variants: list[tuple[str, Any]] = [
        ("1 thread, all rows", lambda: one(0, n)),
        ("1 thread, half the rows (perfect 2T)", lambda: one(0, half)),
        ("2 threads, shared w, hot=0 (plain HOGWILD! writes)",
         lambda: two(True, 0, p.batch_rows)),
        (f"2 threads, shared w, hot={hot_all:,} (product default)",
         lambda: two(True, hot_all, wide)),
        ("2 threads, private w each (ceiling)", lambda: two(False, 0, p.batch_rows)),
    ]
    # Interleaved rounds (every variant once per round), median over the (quiet) rounds.
    times: list[list[float]] = [[] for _ in variants]
    others: list[float] = []
    for _ in range(repeats):
        if quiet > 0:
            common.wait_for_quiet(quiet, settle=2)
        with common.CpuMeter() as m:
            for i, (_, fn) in enumerate(variants):
                t0 = time.perf_counter()
                fn()
                times[i].append(time.perf_counter() - t0)
        others.append(m.others)
    timings = [Timing(tuple(t), tuple(others)) for t in times]
    med = [t.median for t in timings]
    out: list[tuple[str, float, str, str]] = []
    for i, (label, _) in enumerate(variants):
        out.append((label, med[i], f"{med[0] / med[i]:.2f}x", timings[i].quality()))
    out.append((f"rows with zero hinge gradient after 1 pass: {inactive:.1%}", float("nan"),
                "", ""))
    return out


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------
def engines_on(train: Any, test: Any, tmp: Path, tag: str, *, epochs: int, repeats: int,
               with_locked: bool, python_rows: int,
               quiet: float = 0.0) -> tuple[dict[str, Result], float]:
    """Every engine on one (train, test) pair, already renumbered (``common.renumbered``);
    train rows are permuted once up front.
    ``quiet`` > 0: before each round of passes (and each VW run, and the Python run) wait up
    to that many seconds for the other processes on the machine to go idle."""
    train = common.shuffled(train, seed=1)

    from hogwild.model.hot import RENUMBERED_HOT_FEATURES

    hot = RENUMBERED_HOT_FEATURES  # the product default (thread_buffer: true)
    engines: dict[str, PassEngine] = {
        "1T": HogwildEngine(train, test, mode="hogwild", threads=1, name="hogwild 1 thread",
                            hot_features=hot),
        "2T": HogwildEngine(train, test, mode="hogwild", threads=2, name="hogwild 2 threads",
                            hot_features=hot, note="product default: buffered hot features"),
        "2T-plain": HogwildEngine(train, test, mode="hogwild", threads=2,
                                  name="hogwild 2 threads, hot_features=0", hot_features=0,
                                  note="plain HOGWILD! writes, shared cache lines"),
    }
    if with_locked:
        engines["locked"] = HogwildEngine(train, test, mode="locked", threads=2,
                                          name="locked, 2 threads (round robin)",
                                          hot_features=hot)
        engines["serial"] = HogwildEngine(train, test, mode="serial", threads=1, name="serial",
                                          hot_features=hot)
    engines["sklearn"] = SklearnEngine(train, test)
    res = run_interleaved(engines, epochs, quiet)
    del engines
    res["vw"], parse_s = run_vw(train, test, tmp, epochs=epochs, repeats=repeats, tag=tag,
                                quiet=quiet)
    if python_rows > 0:
        if quiet > 0:
            common.wait_for_quiet(quiet)
        res["python"] = run_python(train, python_rows, repeats)
    return res, parse_s


def print_results(res: dict[str, Result], title: str) -> None:
    rows = [(r.name, r.seconds, r.per_pass.spread() if r.per_pass else None,
             None if r.accuracy is None else f"{100 * r.accuracy:.2f}%",
             None if r.own is None else f"{r.own:.2f}", r.cpu,
             r.per_pass.quality() if r.per_pass else None, r.note)
            for r in res.values()]
    common.print_table(["engine", "s/pass (median)", "min-max", "test acc", "own cores",
                        "CPU s/pass",
                        "timed runs", "note"], rows, title)
    print(f"(own cores: cores this bench used while timed; CPU s/pass: CPU seconds it used "
          f"per pass, median, which a busy machine barely changes; a run is 'quiet' when other "
          f"processes used under {common.DISTURBED_CORES} cores meanwhile, and the median is "
          f"taken over quiet runs when there are at least 3)")


def thread_scaling(train: Any, test: Any, threads: list[int], epochs: int,
                   quiet: float) -> None:
    """The table of ``--threads``: one hogwild engine per thread count, run interleaved."""
    from hogwild.model.hot import RENUMBERED_HOT_FEATURES

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    engines: dict[str, PassEngine] = {
        str(t): HogwildEngine(train, test, mode="hogwild", threads=t, name=f"{t} thread(s)",
                              hot_features=RENUMBERED_HOT_FEATURES)
        for t in threads}
    res = run_interleaved(engines, epochs, quiet)
    one = res[str(threads[0])].seconds if threads else float("nan")
    rows = []
    for t in threads:
        r = res[str(t)]
        speedup = one / r.seconds if threads[0] == 1 else float("nan")
        rows.append((t, f"{r.seconds:.4f}", f"{speedup:.2f}x",
                     f"{train.nnz / r.seconds / 1e6:,.0f}M",
                     None if r.accuracy is None else f"{r.accuracy:.4f}",
                     None if r.own is None else f"{r.own:.2f}",
                     "oversubscribed" if t > usable else ""))
    common.print_table(["threads", "s/pass (median)", "speedup", "nnz/s", "test acc",
                        "own cores", "note"], rows,
                       f"thread scaling, hogwild mode, {epochs} passes ({usable} usable "
                       "cores)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer rows everywhere (a check that everything runs, ~1 min)")
    ap.add_argument("--rows", type=int, default=None,
                    help="synthetic rows, 90%% train / 10%% test (default 800000; quick 100000)")
    ap.add_argument("--epochs", type=int, default=5,
                    help="passes per engine: per-pass median and accuracy at equal epochs")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of VW runs and probes")
    ap.add_argument("--no-real", action="store_true", help="skip the sets in ../shared/data")
    ap.add_argument("--no-investigation", action="store_true",
                    help="skip the 2-thread investigation")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each timed engine wait up to SECONDS for other processes "
                         "to go idle (default 0: do not wait)")
    ap.add_argument("--threads", default="", metavar="LIST",
                    help="e.g. 1,2,4,8,16: print only the thread-scaling table")
    args = ap.parse_args(argv)
    try:
        thread_list = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads: expected a comma-separated list of integers, got {args.threads!r}")
    if any(t < 1 or t > 256 for t in thread_list):
        ap.error("--threads: each count must be between 1 and 256")

    rows = args.rows or (100_000 if args.quick else 800_000)
    epochs = max(3, args.epochs)
    python_rows = 5_000 if args.quick else 20_000
    real_cap = 20_000 if args.quick else None

    from hogwild.model.warmup import warmup

    started = time.perf_counter()
    print(common.machine_line())
    print(common.load_line())
    warmup()  # numba compile (or cache load) outside every timing
    bw = common.read_bandwidth(n_bytes=(512 << 20) if args.quick else (1 << 30),
                               quiet=args.wait_quiet)
    print(f"streaming read bandwidth (numpy sum of a {512 if args.quick else 1024} MiB float64 "
          f"array, median of 5): 1 thread {bw.numpy_1t / 1e9:.1f} GB/s, "
          f"2 threads {bw.threads_2 / 1e9:.1f} GB/s ({bw.quality})")

    with common.stopwatch() as gen_s:
        data = common.rcv1_like(rows, seed=0)
    n_train = rows * 9 // 10
    train, test = data.slice(0, n_train), data.slice(n_train, rows)
    with common.stopwatch() as ren_s:
        train, test = common.renumbered(train, test)
    print(f"synthetic RCV1-shaped data: {train.n_rows:,} train / {test.n_rows:,} test rows, "
          f"{train.nnz:,} train non-zeros ({train.nnz / train.n_rows:.1f}/row), "
          f"{train.n_features:,} features; generated in {gen_s[0]:.1f}s, renumbered by "
          f"document frequency in {ren_s[0]:.1f}s")

    if thread_list:
        thread_scaling(train, test, thread_list, epochs, args.wait_quiet)
        print(f"total {time.perf_counter() - started:.0f}s")
        return 0

    with common.workdir() as tmpname:
        tmp = Path(tmpname)
        res, vw_parse = engines_on(train, test, tmp, "synthetic", epochs=epochs,
                                   repeats=args.repeats, with_locked=True,
                                   python_rows=python_rows, quiet=args.wait_quiet)
        print_results(res, f"synthetic, {epochs} passes each (per-pass median of {epochs}; "
                           f"VW: see note)")
        print(f"VW parsing its text + writing its cache (1 pass included): {vw_parse:.2f}s")

        # Memory floor of one pass.
        csr_bytes = train.nbytes
        floor_bytes = csr_bytes + 16 * train.nnz
        floor_s = floor_bytes / bw.best
        print(f"\nmemory floor of one pass: ({csr_bytes / 1e6:.0f} MB of CSR arrays + 16 B x "
              f"{train.nnz / 1e6:.1f}M non-zeros of weight reads/writes = "
              f"{floor_bytes / 1e6:.0f} MB) / {bw.best / 1e9:.1f} GB/s = {floor_s:.3f}s "
              f"(CSR arrays alone: {csr_bytes / bw.best:.3f}s)")

        one, two, skl, vw = res["1T"], res["2T"], res["sklearn"], res["vw"]
        acc_gap_1 = 100 * (one.accuracy - skl.accuracy)  # type: ignore[operator]
        acc_gap_2 = 100 * (two.accuracy - skl.accuracy)  # type: ignore[operator]
        print("\n== ratios (time of the other / time of ours; > 1 means ours is faster) ==")
        print(common.ratio_line("ours 1T vs Vowpal Wabbit", vw.seconds / one.seconds, ">= 2x",
                                vw.seconds / one.seconds >= 2.0))
        print(common.ratio_line("ours 1T vs scikit-learn", skl.seconds / one.seconds, ">= 2x",
                                skl.seconds / one.seconds >= 2.0))
        print(common.ratio_line("ours 2T vs ours 1T", one.seconds / two.seconds, ">= 1.5x",
                                one.seconds / two.seconds >= 1.5))
        print(common.ratio_line("ours 2T / memory floor (time ratio)", two.seconds / floor_s,
                                "<= 3x", two.seconds / floor_s <= 3.0))
        plain = res["2T-plain"]
        print(common.ratio_line("ours 2T hot_features=0 vs ours 1T",
                                one.seconds / plain.seconds))
        print(common.ratio_line("ours 2T vs ours 2T hot_features=0",
                                plain.seconds / two.seconds))
        print(common.ratio_line("ours 2T vs locked 2T", res["locked"].seconds / two.seconds))
        print(common.ratio_line("ours 1T vs serial mode", res["serial"].seconds / one.seconds))
        if "python" in res:
            print(common.ratio_line("pure Python vs ours 1T",
                                    res["python"].seconds / one.seconds))
            print(common.ratio_line("pure Python vs ours 2T",
                                    res["python"].seconds / two.seconds))
        if one.cpu and skl.cpu and vw.cpu:
            print("  CPU seconds per pass instead of wall time (robust on a busy machine):")
            print(common.ratio_line("  ours 1T vs Vowpal Wabbit, CPU time", vw.cpu / one.cpu))
            print(common.ratio_line("  ours 1T vs scikit-learn, CPU time", skl.cpu / one.cpu))
        print(f"  {'accuracy, ours 1T - scikit-learn':<44} {acc_gap_1:+8.2f} pt   target "
              f"|gap|<=0.5 {common.verdict(abs(acc_gap_1) <= 0.5 or acc_gap_1 > 0)}")
        print(f"  {'accuracy, ours 2T - scikit-learn':<44} {acc_gap_2:+8.2f} pt   target "
              f"|gap|<=0.5 {common.verdict(abs(acc_gap_2) <= 0.5 or acc_gap_2 > 0)}")
        print("  (accuracy target: at most 0.5 point below scikit-learn; above it passes)")

        if not args.no_investigation:
            inv = investigate_threads(train, max(5, args.repeats), args.wait_quiet)
            common.print_table(["what limits 2 threads (kernel called directly)", "s/pass",
                                "speedup vs 1T", "timed rounds"], inv,
                               "2-thread investigation")

        if not args.no_real:
            table = []
            for name in common.REAL_SETS:
                try:
                    rtrain, rtest = common.load_real(name, real_cap)
                except FileNotFoundError as exc:
                    print(f"skipping {name}: {exc}")
                    continue
                rtrain, rtest = common.renumbered(rtrain, rtest)
                r, _ = engines_on(rtrain, rtest, tmp, name, epochs=epochs,
                                  repeats=args.repeats, with_locked=False, python_rows=0)

                def acc(k: str, r: dict[str, Result] = r) -> str:
                    return f"{100 * r[k].accuracy:.2f}"  # type: ignore[operator]

                table.append((name, f"{rtrain.n_rows:,}", f"{rtrain.nnz:,}",
                              1e3 * r["1T"].seconds, 1e3 * r["2T"].seconds,
                              1e3 * r["2T-plain"].seconds,
                              1e3 * r["sklearn"].seconds, 1e3 * r["vw"].seconds,
                              acc("1T"), acc("2T"), acc("2T-plain"), acc("sklearn"), acc("vw")))
            common.print_table(["set", "train rows", "nnz", "1T ms", "2T ms", "2T hot=0 ms",
                                "skl ms", "VW ms", "1T acc", "2T acc", "2T hot=0 acc",
                                "skl acc", "VW acc"], table,
                               f"real data sets, per pass (median of {epochs}) and test accuracy "
                               f"after {epochs} passes")
    print(common.load_line())
    print(f"\nbench_engine finished in {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
