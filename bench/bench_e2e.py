"""End to end as a user feels it: from a svmlight text file to test accuracy, 5 epochs.

`hogwild train` (the installed command, a fresh process) against Vowpal Wabbit on the same
rows in its own text format (parsing once into a fresh cache, 5 passes) and against
scikit-learn's load_svmlight_file + SGDClassifier; each tool runs as its own process and is
timed by the wall clock, start-up included. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

EPOCHS = 5

VW_SCRIPT = """
import sys
from vowpalwabbit import pyvw
train, test, cache, model, preds, passes = sys.argv[1:]
ws = pyvw.Workspace(f"-d {train} -c --cache_file {cache} --passes {passes} "
                    f"--loss_function hinge --holdout_off -b 18 --quiet -f {model}")
ws.run_parser()
seen = ws.get_weighted_examples()
ws.finish()
ws = pyvw.Workspace(f"-i {model} -t -d {test} -p {preds} --quiet")
ws.run_parser()
ws.finish()
print(int(seen))
"""

SKLEARN_SCRIPT = """
import sys
import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.linear_model import SGDClassifier
train, test, n_features, epochs = sys.argv[1:]
def load(path):
    X, y = load_svmlight_file(path, n_features=int(n_features), dtype=np.float32)
    # load_svmlight_file can return 64-bit index arrays, which SGDClassifier refuses
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X, y
X, y = load(train)
clf = SGDClassifier(loss="hinge", max_iter=int(epochs), tol=None, random_state=0).fit(X, y)
Xt, yt = load(test)
print(clf.score(Xt, yt))
"""


# Runs argv[2:], writes "peak RSS in KiB of its largest process, CPU seconds" to argv[1],
# exits with its code.
RUSAGE_WRAPPER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


@dataclass
class Run:
    """One tool's end-to-end run."""

    name: str
    seconds: float
    accuracy: float
    note: str = ""
    others: float = 0.0  # cores other processes used during the run (should be ~0)
    cpu: float = 0.0  # CPU seconds the tool's process used (robust on a busy machine)
    rss: float = 0.0  # peak resident set size in bytes of the largest process of the tool


def _run(cmd: list[str], log: Path, quiet: float) -> tuple[float, str, float, float, float]:
    """Run a command to completion; (wall seconds, stdout, cores other processes used
    meanwhile, CPU seconds of the command and its children, peak RSS in bytes of the largest
    of its processes, from wait4). ``quiet`` > 0: first wait up to that many seconds for the
    others to go idle. Raises with the command's log on failure."""
    env = dict(os.environ)
    src = str(common.REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if quiet > 0:
        common.wait_for_quiet(quiet)
    out_path, err_path = log.with_suffix(".out"), log.with_suffix(".err")
    usage_path = log.with_suffix(".rusage")
    # A small Python in between runs the tool and reports its rusage: a child forked from
    # this (large) process would count this process's pages in its peak RSS.
    with open(out_path, "w") as out, open(err_path, "w") as err, common.CpuMeter() as meter:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", RUSAGE_WRAPPER, str(usage_path), *cmd],
                              stdout=out, stderr=err, env=env, check=False)
        seconds = time.perf_counter() - t0
    stdout, stderr = out_path.read_text(), err_path.read_text()
    log.write_text(stdout + "\n--- stderr ---\n" + stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}:\n"
                           f"{stderr[-2000:]}")
    maxrss_kb, cpu = usage_path.read_text().split()
    return seconds, stdout, meter.others, float(cpu), float(maxrss_kb) * 1024.0


def hogwild_cmd() -> list[str]:
    """The installed `hogwild` script next to this Python, else the same entry point via -c."""
    script = Path(sys.executable).parent / "hogwild"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from hogwild.cli import main; sys.exit(main())"]


def run_hogwild(train: Path, test: Path, out: Path, *, data_cache: bool, threads: int,
                name: str, note: str, quiet: float = 0.0) -> Run:
    cmd = hogwild_cmd() + [
        "train", "--data", str(train), "--test", str(test), "--threads", str(threads),
        "--epochs", str(EPOCHS), "--out", str(out),
        "--data-cache", "true" if data_cache else "false",
        # Train on every row for exactly EPOCHS passes, as the peers do.
        "--val-fraction", "0", "--patience", "0", "--n-features", str(common.RCV1_FEATURES),
    ]
    seconds, _, others, cpu, rss = _run(cmd, out.with_suffix(".log"), quiet)
    metrics = json.loads((out / "latest" / "metrics.json").read_text())
    if int(metrics["epochs"]) != EPOCHS:
        raise RuntimeError(f"hogwild ran {metrics['epochs']} epochs, expected {EPOCHS}")
    if not (out / "latest" / "loss.png").is_file():
        raise RuntimeError("hogwild exited without its loss plot")
    return Run(name, seconds, float(metrics["test_accuracy"]),
               f"{note}; load {metrics['load_seconds']:.2f}s, train "
               f"{metrics['seconds']:.2f}s (its own clocks)", others, cpu, rss)


def run_vw(train_vw: Path, test_vw: Path, tmp: Path, n_train: int, labels: np.ndarray,
           quiet: float = 0.0) -> Run:
    cache, model, preds = tmp / "e2e.vwcache", tmp / "e2e.vwmodel", tmp / "e2e.pred"
    cache.unlink(missing_ok=True)  # a fresh cache: VW parses its text exactly once
    seconds, out, others, cpu, rss = _run(
        [sys.executable, "-c", VW_SCRIPT, str(train_vw), str(test_vw), str(cache), str(model),
         str(preds), str(EPOCHS)], tmp / "vw.log", quiet)
    seen = int(out.strip().splitlines()[-1])
    if seen != EPOCHS * n_train:
        raise RuntimeError(f"VW saw {seen} examples, expected {EPOCHS * n_train}")
    margin = np.loadtxt(preds, usecols=0, ndmin=1)
    acc = float(np.mean(np.where(margin >= 0.0, 1.0, -1.0) == labels))
    return Run("Vowpal Wabbit", seconds, acc,
               f"-c --passes {EPOCHS} --loss_function hinge --holdout_off, fresh cache; "
               f"+ test predictions", others, cpu, rss)


def run_sklearn(train: Path, test: Path, tmp: Path, quiet: float = 0.0) -> Run:
    seconds, out, others, cpu, rss = _run(
        [sys.executable, "-c", SKLEARN_SCRIPT, str(train), str(test), str(common.RCV1_FEATURES),
         str(EPOCHS)], tmp / "sklearn.log", quiet)
    return Run("scikit-learn", seconds, float(out.strip().splitlines()[-1]),
               f"load_svmlight_file + SGDClassifier(hinge, max_iter={EPOCHS}, tol=None)", others,
               cpu, rss)


def _median_run(runs: list[Run]) -> Run:
    """The run with the median wall time (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda r: r.seconds)
    return ordered[(len(ordered) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=180_000, help="training rows (default 180000)")
    ap.add_argument("--test-rows", type=int, default=20_000, help="test rows (default 20000)")
    ap.add_argument("--threads", type=int, default=2, help="hogwild threads (default 2)")
    ap.add_argument("--no-sklearn", action="store_true", help="skip scikit-learn (the slowest)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="interleaved runs of hogwild and VW, medians reported (default 3)")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each timed run wait up to SECONDS for other processes to go "
                         "idle (default 0: do not wait)")
    args = ap.parse_args(argv)
    quiet = args.wait_quiet

    started = time.perf_counter()
    print(common.machine_line())
    print(common.load_line())
    with common.workdir("hogwild-e2e-") as tmpname:
        tmp = Path(tmpname)
        with common.stopwatch() as prep:
            data = common.rcv1_like(args.rows + args.test_rows, seed=0)
            train = data.slice(0, args.rows)
            test = data.slice(args.rows, args.rows + args.test_rows)
            train_svm, test_svm = tmp / "train.svm", tmp / "test.svm"
            train_vw, test_vw = tmp / "train.vw", tmp / "test.vw"
            size_svm = common.write_text(train, train_svm, digits=6)
            common.write_text(test, test_svm, digits=6)
            size_vw = common.write_text(train, train_vw, vw=True, digits=6)
            common.write_text(test, test_vw, vw=True, digits=6)
        print(f"data: {train.n_rows:,} train rows ({train.nnz:,} non-zeros, svmlight "
              f"{size_svm / 1e6:.0f} MB, VW text {size_vw / 1e6:.0f} MB), {test.n_rows:,} "
              f"test rows, values with 6 decimals; written in {prep[0]:.1f}s (not timed)")

        # Throwaway run: fills numba's on-disk compile cache so that no timed run compiles.
        small, small_test = tmp / "small.svm", tmp / "small_test.svm"
        common.write_text(data.slice(0, 2000), small, digits=6)
        common.write_text(data.slice(2000, 2500), small_test, digits=6)
        run_hogwild(small, small_test, tmp / "warm", data_cache=False, threads=args.threads,
                    name="warm-up", note="")

        csr_bytes = train.nbytes + test.nbytes
        print(f"CSR arrays of train + test: {csr_bytes / 1e6:.0f} MB (int64 row pointers, int32 "
              "ids, float32 values and labels)")
        # Interleaved repeats (hogwild, VW, hogwild, VW, ...): a neighbour's burst of CPU use
        # then lands on both tools alike; medians over the repeats.
        colds: list[Run] = []
        vws: list[Run] = []
        for i in range(args.repeats):
            colds.append(run_hogwild(train_svm, test_svm, tmp / f"cold{i}", data_cache=False,
                                     threads=args.threads,
                                     name=f"hogwild train, {args.threads} threads",
                                     note="parses the text, no data cache", quiet=quiet))
            vws.append(run_vw(train_vw, test_vw, tmp, train.n_rows, test.labels, quiet))
        cold, vw = _median_run(colds), _median_run(vws)
        runs: list[Run] = [cold, vw]
        skl = None
        if not args.no_sklearn:
            skl = run_sklearn(train_svm, test_svm, tmp, quiet)
            runs.append(skl)
        cache_env = {"XDG_CACHE_HOME": str(tmp / "xdg")}  # the user cache dir, in the tmp dir
        os.environ.update(cache_env)
        writer = run_hogwild(train_svm, test_svm, tmp / "writes", data_cache=True,
                             threads=args.threads, name="hogwild train, writing the data cache",
                             note="parses the text, writes the cache", quiet=quiet)
        warm = _median_run([run_hogwild(train_svm, test_svm, tmp / f"warmcache{i}",
                                        data_cache=True, threads=args.threads,
                                        name="hogwild train, data cache warm",
                                        note="second run: arrays from the cache", quiet=quiet)
                            for i in range(args.repeats)])
        runs += [writer, warm]

        common.print_table(["run", "wall s", "CPU s", "peak RSS MB", "test acc", "others", "note"],
                           [(r.name, r.seconds, r.cpu, f"{r.rss / 1e6:.0f}",
                             f"{100 * r.accuracy:.2f}%", f"{r.others:.2f}", r.note)
                            for r in runs],
                           f"end to end, {EPOCHS} epochs, each tool a fresh process (numba "
                           f"compile cache warm from a throwaway run); hogwild and VW: median "
                           f"of {args.repeats} interleaved runs")
        print("(CPU s: CPU seconds of the tool's processes, all threads; peak RSS: of the "
              "largest process of the tool, from wait4; others: cores used by other processes "
              "during the run, well above 0 means a neighbour took CPU from it)")
        print("  hogwild runs:", ", ".join(f"{r.seconds:.2f}s" for r in colds),
              "| VW runs:", ", ".join(f"{r.seconds:.2f}s" for r in vws))
        print("\n== ratios ==")
        ratio = cold.seconds / vw.seconds
        print(common.ratio_line("hogwild wall / Vowpal Wabbit wall", ratio, "<= 0.8x",
                                ratio <= 0.8))
        mem = cold.rss / csr_bytes
        print(common.ratio_line("hogwild peak RSS / its CSR arrays", mem, "<= 2x", mem <= 2.0))
        print(common.ratio_line("hogwild peak RSS / Vowpal Wabbit peak RSS", cold.rss / vw.rss))
        if skl is not None:
            print(common.ratio_line("scikit-learn wall / hogwild wall", skl.seconds / cold.seconds,
                                    ">= 5x", skl.seconds / cold.seconds >= 5.0))
            print(common.ratio_line("scikit-learn peak RSS / hogwild peak RSS",
                                    skl.rss / cold.rss))
        print(common.ratio_line("hogwild first run / data cache warm",
                                cold.seconds / warm.seconds))
        print(common.ratio_line("hogwild, data cache warm / Vowpal Wabbit",
                                warm.seconds / vw.seconds))
        print("  CPU seconds instead of wall time (robust on a busy machine):")
        print(common.ratio_line("  hogwild CPU / Vowpal Wabbit CPU", cold.cpu / vw.cpu))
        if skl is not None:
            print(common.ratio_line("  scikit-learn CPU / hogwild CPU", skl.cpu / cold.cpu))
        gap = 100 * (cold.accuracy - vw.accuracy)
        print(f"  {'accuracy, hogwild - Vowpal Wabbit':<44} {gap:+8.2f} pt")
        if skl is not None:
            gap = 100 * (cold.accuracy - skl.accuracy)
            print(f"  {'accuracy, hogwild - scikit-learn':<44} {gap:+8.2f} pt")
    print(common.load_line())
    print(f"\nbench_e2e finished in {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
