"""Bytes per feature of each process at hashed scale: peak RSS at 2^22 features against 2^16.

Hashed data touches features all over its space, so that every page of a dense per-feature
vector is written. The set here is ``hogwild gen-data seed000`` (uniform sparse rows) drawn
twice with the same seed and shape, once over 2^16 feature ids and once over 2^22: the rows,
the non-zeros and the work are the same, only the space (and so the number of distinct
features touched) differs. For each process

    bytes per feature = (peak RSS at 2^22 - peak RSS at 2^16) / (2^22 - 2^16)

with `hogwild run --workers 2 --threads 1 --shipping partition` (the coordinator and the
larger worker; defaults otherwise, so combine auto picks momentum from 10,000 rows per
worker) and `hogwild train --threads 1` (the one process). A float64 dense vector is 8 bytes
per feature. Peak RSS is VmHWM read from /proc every few milliseconds while the process
lives (the run's coordinator and workers are forked children of `hogwild run`: the first
one forked is the coordinator; other children, such as the plot helper, are left out);
`train`'s is its rusage maximum.

    python bench/bench_feature_memory.py [--rows 30000] [--epochs 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

SMALL = 1 << 16
LARGE = 1 << 22
POLL_SECONDS = 0.003


def _peak_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid``."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _started(pid: int) -> int:
    """When ``pid`` started (clock ticks since boot; -1 if gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(common.REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_cluster(data: Path, test: Path, features: int, epochs: int, out: Path) -> dict[str, int]:
    """Peak RSS (bytes) of the coordinator and of the larger worker of one `hogwild run`."""
    cmd = [sys.executable, "-m", "hogwild.cli", "run", "--workers", "2", "--threads", "1",
           "--shipping", "partition", "--data", str(data), "--test", str(test),
           "--n-features", str(features), "--epochs", str(epochs), "--seed", "1",
           "--out", str(out)]
    log = out.with_suffix(".log")
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=_env())
        peaks: dict[int, int] = {}
        started: dict[int, int] = {}
        others: set[int] = set()
        launcher = ""
        while proc.poll() is None:
            launcher = launcher or _cmdline(proc.pid)
            for child in _children(proc.pid):
                if child in others:
                    continue
                line = _cmdline(child)
                if line and line != launcher:  # (a process gone reads as "")
                    # The plot helper, started with subprocess: the launcher's command line
                    # only between its fork and its exec.
                    others.add(child)
                    peaks.pop(child, None)
                    continue
                kb = _peak_kb(child)
                if kb is None:
                    continue
                if child not in started:
                    started[child] = _started(child)
                peaks[child] = max(kb, peaks.get(child, 0))
            time.sleep(POLL_SECONDS)
    order = sorted(peaks, key=lambda pid: (started[pid], pid))
    if proc.returncode != 0 or len(order) != 3:
        raise SystemExit(f"run failed ({proc.returncode}, {len(order)} processes seen): {log}")
    coordinator, *workers = order
    return {"coordinator": peaks[coordinator] * 1024,
            "worker": max(peaks[w] for w in workers) * 1024}


def run_train(data: Path, test: Path, features: int, epochs: int, out: Path) -> dict[str, int]:
    """Peak RSS (bytes) of one in-process `hogwild train`."""
    cmd = [sys.executable, "-m", "hogwild.cli", "train", "--threads", "1", "--data", str(data),
           "--test", str(test), "--n-features", str(features), "--epochs", str(epochs),
           "--seed", "1", "--out", str(out)]
    log = out.with_suffix(".log")
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=_env())
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"train failed: {log}")
    return {"train": usage.ru_maxrss * 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="runs per size (median)")
    parser.add_argument("--skip-train", action="store_true")
    args = parser.parse_args()
    print(common.machine_line())
    print(common.load_line())
    with tempfile.TemporaryDirectory(prefix="hogwild-fmem-") as tmp:
        root = Path(tmp)
        files = {}
        for features in (SMALL, LARGE):
            data = root / f"hashed{features}.svm"
            subprocess.run([sys.executable, "-m", "hogwild.cli", "gen-data", "seed000",
                            "--rows", str(args.rows), "--features", str(features),
                            "--test-rows", str(max(1, args.rows // 10)), "--out", str(data)],
                           check=True, env=_env(), stdout=subprocess.DEVNULL)
            files[features] = (data, root / f"hashed{features}.test.svm")
        peaks: dict[int, dict[str, list[int]]] = {SMALL: {}, LARGE: {}}
        for r in range(args.repeats):
            for features in (SMALL, LARGE):
                runs = [run_cluster]
                if not args.skip_train:
                    runs.append(run_train)
                for fn in runs:
                    out = root / f"{fn.__name__}-{features}-{r}"
                    for name, peak in fn(*files[features], features, args.epochs, out).items():
                        peaks[features].setdefault(name, []).append(peak)
        rows = []
        for name in peaks[SMALL]:
            small = statistics.median(peaks[SMALL][name])
            large = statistics.median(peaks[LARGE][name])
            rows.append([name, f"{small / 1e6:.0f}", f"{large / 1e6:.0f}",
                         f"{(large - small) / (LARGE - SMALL):.1f}"])
        common.print_table(["process", "peak RSS 2^16 (MB)", "peak RSS 2^22 (MB)",
                            "bytes per feature"], rows,
                           title=f"{args.rows} rows, {args.epochs} epochs, "
                                 f"median of {args.repeats} run(s) per size")


if __name__ == "__main__":
    main()
