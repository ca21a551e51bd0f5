"""Data at scale: wall time to a model, time in training, accuracy and peak RSS per process.

Two generated sets, each as svmlight text and (when pyarrow is importable) Parquet:
an RCV1-shaped set (`hogwild gen-data rcv1`, 47,236 tf-idf features) and a click-like
set hashed into 2^22 features (`hogwild gen-data rcv1 --features 4194304`: about 75 active
features per row with Zipf-like popularity, scattered over 4,194,304 ids as a hash would,
so that most ids are rare and a few are in most rows, as in hashed click logs). For each set it runs, each as a fresh process timed by the wall clock:
`hogwild train`, `hogwild run --workers 2` (and 4) with `shipping: local`, Vowpal Wabbit
and Spark MLlib local[2] (8 GB driver memory) when pyspark is importable; then `train` and
`run --workers 2` again, out of core (``--out-of-core true``), with every process under the
same memory cap, set below the training rows' in-memory size plus a fixed allowance for the
libraries (RLIMIT_DATA through ``preexec_fn``, inherited by each process on its own), to
show that the workers' memory adds up.

Peak RSS per process is each process's VmHWM from /proc, polled over the process tree.
Data files are kept in --workdir and reused by later runs. Not run in CI; usage:

    .venv/bin/python bench/bench_data_scale.py                 # 10M rows: an hour or more
    .venv/bin/python bench/bench_data_scale.py --rows 1000000 --no-spark
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

CLICK_FEATURES = 1 << 22
EPOCHS = 3
# The Parquet layout written here: a label column and the row's sparse vector as two list
# columns. How a hogwild source string names them (filled with the file's path):
PARQUET_SOURCE = "parquet:{path}?label=label&sparse=indices:values"


@dataclass
class Result:
    """One tool's run on one set."""

    tool: str
    data: str
    wall: float | None = None
    train: float | None = None
    accuracy: float | None = None
    rss: dict[str, float] = field(default_factory=dict)  # role -> peak RSS bytes
    note: str = ""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOGWILD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(common.REPO / "src"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    return env


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _role(pid: int) -> str:
    """A short name for a process: its hogwild role, else its program."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    for role in ("coordinator", "worker", "plotter", "train", "run"):
        if any(w == role or w.endswith(f".{role}") for w in words):
            return role
    return Path(words[0]).name if words else "?"


def _hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeWatch:
    """Polls the peak RSS (VmHWM) of a process and all its descendants until stopped."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid, self.every = pid, every
        self.peaks: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for pid in [self.pid, *_children(self.pid)]:
                peak = _hwm(pid)
                if peak:
                    role = self.peaks.get(pid, (_role(pid), 0))[0]
                    self.peaks[pid] = (role, max(peak, self.peaks.get(pid, ("", 0))[1]))
            self._stop.wait(self.every)

    def stop(self) -> dict[str, float]:
        """Peak RSS in bytes by role (``worker``, ``worker#2``, ... for repeated roles).
        `hogwild run` forks its coordinator first, then its workers: children that carry
        the launcher's own command line are named in that order."""
        self._stop.set()
        self._thread.join()
        out: dict[str, float] = {}
        top = self.peaks.get(self.pid, ("?", 0))[0]
        forked = 0
        for pid, (role, peak) in sorted(self.peaks.items()):
            if role == "plotter" or peak < (20 << 20):
                continue  # the plot helper, short-lived helpers
            if role == "run":
                if pid == self.pid:
                    role = "launcher"
                else:
                    role = "coordinator" if forked == 0 else "worker"
                    forked += 1
            elif pid != self.pid and role == top:
                role = "child"
            name, n = role, 1
            while name in out:
                n += 1
                name = f"{role}#{n}"
            out[name] = float(peak)
        return out


def _cap(limit: int | None) -> Callable[[], None] | None:
    if limit is None:
        return None

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return preexec


def run_timed(argv: list[str], log: Path, *, cap: int | None = None,
              timeout: float = 3600.0) -> tuple[float, dict[str, float], int, str]:
    """Run ``argv``; (wall seconds, peak RSS by role, exit code, last stderr line)."""
    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=_env(),
                                preexec_fn=_cap(cap))  # noqa: PLW1509 - only setrlimit
        watch = TreeWatch(proc.pid)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        wall = time.perf_counter() - t0
    rss = watch.stop()
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return wall, rss, code, (lines[-1][:160] if lines else "")


def hogwild(*args: str) -> list[str]:
    return [sys.executable, "-m", "hogwild.cli", *args]


@dataclass
class DataSet:
    name: str
    train: Path
    test: Path
    n_features: int
    train_bytes: int  # in-memory CSR size of the training rows
    parquet_train: Path | None = None
    parquet_test: Path | None = None
    vw_train: Path | None = None
    vw_test: Path | None = None


def make_sets(rows: int, work: Path, kinds: list[str], parquet: bool = True,
              vw_text: bool = True) -> list[DataSet]:
    """Generate (or reuse) the sets in ``work`` (``parquet``: with Parquet copies, where
    pyarrow is importable; ``vw_text``: with Vowpal Wabbit's text, for the runs of it)."""
    from hogwild.data.formats.svmlight import read_svmlight

    test_rows = max(1000, rows // 10)
    sets = []
    for kind in kinds:
        train = work / f"{kind}-{rows}.svm"
        test = work / f"{kind}-{rows}.test.svm"
        if kind == "rcv1":
            gen = ["gen-data", "rcv1"]
            n_features = common.RCV1_FEATURES
        else:
            gen = ["gen-data", "rcv1", "--features", str(CLICK_FEATURES)]
            n_features = CLICK_FEATURES
        if not (train.exists() and test.exists()):
            print(f"generating {train.name} ({rows:,} + {test_rows:,} rows) ...", flush=True)
            subprocess.run(hogwild(*gen, "--rows", str(rows), "--test-rows", str(test_rows),
                                   "--out", str(train)), check=True, env=_env(),
                           capture_output=True)
        ds = DataSet(kind, train, test, n_features, 0)
        for part, path in (("train", train), ("test", test)):
            data = None
            pq, vw = path.with_suffix(".parquet"), path.with_suffix(".vw")
            want_pq = parquet and _have("pyarrow") and not pq.exists()
            want_vw = vw_text and not vw.exists()
            if want_vw or want_pq:
                data = read_svmlight(path, n_features=n_features, cache=False)
                if want_vw:
                    common.write_text(data, vw, vw=True, digits=6)
                if want_pq:
                    _write_parquet(data, pq)
            if part == "train":
                size = data.nbytes if data is not None else _csr_bytes(path, n_features)
                ds.train_bytes = size
                ds.vw_train, ds.parquet_train = vw, pq if pq.exists() else None
            else:
                ds.vw_test, ds.parquet_test = vw, pq if pq.exists() else None
        sets.append(ds)
    return sets


def _csr_bytes(path: Path, n_features: int) -> int:
    from hogwild.data.formats.svmlight import read_svmlight

    return int(read_svmlight(path, n_features=n_features, cache=False).nbytes)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _write_parquet(data: Any, path: Path, rows_per_group: int = 100_000) -> None:
    """Label, indices (0-based) and values as list columns, one row group per 100k rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        for r0 in range(0, data.n_rows, rows_per_group):
            r1 = min(data.n_rows, r0 + rows_per_group)
            a, b = int(data.indptr[r0]), int(data.indptr[r1])
            offsets = pa.array((data.indptr[r0:r1 + 1] - a).astype(np.int32))
            table = pa.table({
                "label": pa.array(data.labels[r0:r1]),
                "indices": pa.ListArray.from_arrays(offsets, pa.array(data.indices[a:b])),
                "values": pa.ListArray.from_arrays(offsets, pa.array(data.values[a:b])),
            })
            if writer is None:
                writer = pq.ParquetWriter(str(path) + ".part", table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    Path(str(path) + ".part").replace(path)


def run_hogwild(ds: DataSet, fmt: str, work: Path, command: str, workers: int,
                cap: int | None = None) -> Result:
    if fmt == "parquet":
        if ds.parquet_train is None or ds.parquet_test is None:
            return Result(_tool(command, workers, cap), f"{ds.name} parquet",
                          note="pyarrow not importable: no Parquet files")
        train = PARQUET_SOURCE.format(path=ds.parquet_train)
        test = PARQUET_SOURCE.format(path=ds.parquet_test)
    else:
        train, test = str(ds.train), str(ds.test)
    out = work / f"out-{ds.name}-{fmt}-{command}-{workers}-{time.monotonic_ns()}"
    args = [command, "--data", train, "--test", test, "--out", str(out), "--epochs",
            str(EPOCHS), "--patience", "0", "--val-fraction", "0", "--data-cache", "false",
            "--n-features", str(ds.n_features)]
    if command == "run":
        # Each worker reads its own part: byte ranges of the text, row groups of Parquet.
        args += ["--workers", str(workers), "--threads", "1", "--shipping", "local",
                 "--insecure"]
    else:
        args += ["--threads", "2"]
    if cap is not None:  # under the cap both train from disk: train its cache, workers theirs
        args += ["--out-of-core", "true"]
    res = Result(_tool(command, workers, cap), f"{ds.name} {fmt}")
    wall, rss, code, last = run_timed(hogwild(*args), out.with_suffix(".log"), cap=cap)
    res.rss = rss
    capped = "" if cap is None else f"each process capped at {cap / 1e9:.2f} GB (RLIMIT_DATA)"
    if code != 0:
        res.note = f"failed (exit {code}): {last}" + (f"; {capped}" if capped else "")
        return res
    metrics = json.loads((out / "latest" / "metrics.json").read_text())
    res.wall, res.train = wall, float(metrics["seconds"])
    res.accuracy = float(metrics["test_accuracy"])
    res.note = capped
    return res


def _tool(command: str, workers: int, cap: int | None) -> str:
    name = "hogwild train --threads 2" if command == "train" else \
        f"hogwild run --workers {workers} --threads 1, shipping local"
    return name + (", out of core, capped" if cap is not None else "")


VW_SCRIPT = """
import sys
from vowpalwabbit import pyvw
train, test, cache, model, preds, passes, bits = sys.argv[1:]
ws = pyvw.Workspace(f"-d {train} -c --cache_file {cache} --passes {passes} "
                    f"--loss_function hinge --holdout_off -b {bits} --quiet -f {model}")
ws.run_parser()
ws.finish()
ws = pyvw.Workspace(f"-i {model} -t -d {test} -p {preds} --quiet")
ws.run_parser()
ws.finish()
"""


def run_vw(ds: DataSet, work: Path) -> Result:
    res = Result("Vowpal Wabbit", f"{ds.name} VW text")
    if not _have("vowpalwabbit"):
        res.note = "vowpalwabbit not importable"
        return res
    cache, model, preds = (work / f"{ds.name}.vwcache", work / f"{ds.name}.vwmodel",
                           work / f"{ds.name}.pred")
    cache.unlink(missing_ok=True)
    bits = max(18, int(np.ceil(np.log2(ds.n_features))))
    wall, rss, code, last = run_timed(
        [sys.executable, "-c", VW_SCRIPT, str(ds.vw_train), str(ds.vw_test), str(cache),
         str(model), str(preds), str(EPOCHS), str(bits)], work / f"vw-{ds.name}.log")
    res.rss = rss
    if code != 0:
        res.note = f"failed (exit {code}): {last}"
        return res
    labels = np.array([1.0 if line.split(b" ", 1)[0] in (b"1", b"+1") else -1.0
                       for line in ds.vw_test.read_bytes().splitlines()]) \
        if ds.vw_test is not None else np.zeros(0)
    margin = np.loadtxt(preds, usecols=0, ndmin=1)
    res.wall = wall
    res.accuracy = float(np.mean(np.where(margin >= 0.0, 1.0, -1.0) == labels))
    res.note = f"-c --passes {EPOCHS} --loss_function hinge -b {bits}, fresh cache"
    return res


SPARK_SCRIPT = """
import sys, time
from pyspark.sql import SparkSession
from pyspark.ml.classification import LinearSVC
train, test, n_features = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "8g")
         .getOrCreate())
df = spark.read.format("libsvm").option("numFeatures", n_features).load(train).cache()
df.count()
t0 = time.perf_counter()
model = LinearSVC(maxIter=50).fit(df)
trained = time.perf_counter() - t0
te = spark.read.format("libsvm").option("numFeatures", n_features).load(test)
pred = model.transform(te)
acc = pred.filter(pred.label == pred.prediction).count() / te.count()
print(f"RESULT {trained} {acc}")
spark.stop()
"""


def run_spark(ds: DataSet, work: Path, enabled: bool) -> Result:
    res = Result("Spark MLlib local[2], LinearSVC 50 iter", f"{ds.name} svmlight")
    if not enabled:
        res.note = "skipped (--no-spark)"
        return res
    if not _have("pyspark"):
        res.note = "pyspark not importable: not run"
        return res
    # libsvm labels for Spark's binary classifiers are 0/1: convert -1 to 0 once.
    files = []
    for path in (ds.train, ds.test):
        spark_path = path.with_suffix(".spark.svm")
        if not spark_path.exists():
            with open(path, "rb") as src, open(spark_path, "wb") as dst:
                dst.writelines(b"0" + line[2:] if line.startswith(b"-1") else line
                               for line in src)
        files.append(spark_path)
    wall, rss, code, last = run_timed(
        [sys.executable, "-c", SPARK_SCRIPT, str(files[0]), str(files[1]),
         str(ds.n_features)], work / f"spark-{ds.name}.log")
    res.rss = {k: v for k, v in rss.items() if k != "python"}
    out = (work / f"spark-{ds.name}.log").read_text(errors="replace")
    found = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if code != 0 or not found:
        res.note = f"failed (exit {code}): {last}"
        return res
    _, trained, acc = found[-1].split()
    res.wall, res.train, res.accuracy = wall, float(trained), float(acc)
    return res


def _rss_text(rss: dict[str, float]) -> str:
    return ", ".join(f"{role} {peak / 1e6:.0f}" for role, peak in rss.items()) or "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000,
                    help="training rows per set (default 10M); test rows: a tenth")
    ap.add_argument("--sets", default="rcv1,click", help="rcv1, click or both (default)")
    ap.add_argument("--workers", default="2,4", help="worker counts for `run` (default 2,4)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hogwild-data-scale"),
                    help="where the data files are written and reused")
    ap.add_argument("--no-spark", action="store_true", help="skip Spark MLlib")
    ap.add_argument("--no-parquet", action="store_true", help="skip the Parquet runs")
    ap.add_argument("--formats", default="svmlight,parquet",
                    help="the formats hogwild's uncapped runs read (default both)")
    ap.add_argument("--hogwild-only", action="store_true",
                    help="only hogwild's uncapped runs (no Vowpal Wabbit, Spark or capped runs)")
    ap.add_argument("--cap-fraction", type=float, default=0.75,
                    help="memory cap per process: this share of the training rows' "
                         "in-memory size (default 0.75) ...")
    ap.add_argument("--cap-base", type=float, default=1.5,
                    help="... plus this many GB for the libraries, threads' malloc arenas "
                         "and gRPC (default 1.5)")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(common.machine_line())
    print(common.load_line())
    print(f"scale: {args.rows:,} training rows per set, {EPOCHS} epochs; "
          f"command: {shlex.join(sys.argv)}")
    sets = make_sets(args.rows, args.workdir, args.sets.split(","),
                     parquet="parquet" in args.formats and not args.no_parquet,
                     vw_text=not args.hogwild_only)
    workers = [int(w) for w in args.workers.split(",") if w]
    results: list[Result] = []
    for ds in sets:
        print(f"\n{ds.name}: {ds.train} ({ds.train.stat().st_size / 1e9:.2f} GB of text), "
              f"training rows in memory {ds.train_bytes / 1e9:.2f} GB", flush=True)
        formats = [f for f in args.formats.split(",") if f and not (
            f == "parquet" and args.no_parquet)]
        first = len(results)
        for fmt in formats:
            results.append(run_hogwild(ds, fmt, args.workdir, "train", 1))
            for w in workers:
                results.append(run_hogwild(ds, fmt, args.workdir, "run", w))
        if not args.hogwild_only:
            results.append(run_vw(ds, args.workdir))
            results.append(run_spark(ds, args.workdir, not args.no_spark))
            cap = int(args.cap_base * 1e9 + args.cap_fraction * ds.train_bytes)
            results.append(run_hogwild(ds, "svmlight", args.workdir, "train", 1, cap=cap))
            results.append(run_hogwild(ds, "svmlight", args.workdir, "run", 2, cap=cap))
        for r in results[first:]:
            print(f"  {r.tool} [{r.data}]: wall {r.wall}, train {r.train}, acc "
                  f"{r.accuracy}, {_rss_text(r.rss)} {r.note}", flush=True)
    common.print_table(
        ["tool", "data", "wall s", "training s", "test acc", "peak RSS MB per process", "note"],
        [(r.tool, r.data, r.wall, r.train, None if r.accuracy is None else
          f"{100 * r.accuracy:.2f}%", _rss_text(r.rss), r.note) for r in results],
        f"{args.rows:,} rows, {EPOCHS} epochs, each run a fresh process (wall: start to "
        f"model and test accuracy)")
    print(common.load_line())
    print(f"\nbench_data_scale finished in {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
