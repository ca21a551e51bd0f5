"""Scaling study: W machines of C cores against one machine of C cores, machines simulated by
pinning each process to its own cores (os.sched_setaffinity).

    .venv/bin/python bench/bench_scaling.py                          # what this machine allows
    .venv/bin/python bench/bench_scaling.py --cores 4 --workers 1,2,3  # a 16-core machine
    .venv/bin/python bench/bench_scaling.py --data synthetic:rcv1?rows=1600000 --epochs 10

The peer is `hogwild train --threads C` pinned to cores [0, C). A cluster of W workers is a
`hogwild coordinator` on cores [0, C) and worker k (C threads) on cores [(k+1)C, (k+2)C),
all on loopback with the run's default settings (only --workers, --threads and --mode given).
Printed per row: the cores each process got (a row whose processes had to share cores, on a
machine with fewer than (W + 1) x C, says "shared"), the time from the start of training to
the first validation accuracy at or above the target (default: the one-machine run's best
validation accuracy less half a point), its ratio to one machine, the saved model's test
accuracy, and the bytes the coordinator received per round. Times are the runs' own clocks
(training only: loading and shipping are apart). Medians over --repeats runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
READY = re.compile(r"coordinator listening on port (\d+)")


def _cores(block: int, per: int, available: list[int]) -> tuple[list[int], bool]:
    """Cores of machine ``block`` (per cores each) and whether it had to share them."""
    want = [block * per + i for i in range(per)]
    shared = any(c >= len(available) for c in want)
    return sorted({available[c % len(available)] for c in want}), shared


def _popen(argv: list[str], cores: list[int], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: os.sched_setaffinity(0, cores))  # noqa: PLW1509


def _common(args: argparse.Namespace, out: Path, seed: int) -> list[str]:
    flags = [f"--data={args.data}", f"--epochs={args.epochs}", f"--out={out}",
             f"--seed={seed}", "--log-level=warning"]
    if args.test:
        flags.append(f"--test={args.test}")
    return flags


def _time_to(rows: list[dict[str, Any]], target: float) -> float | None:
    for row in rows:
        acc = row.get("val_accuracy")
        if acc is not None and acc >= target:
            return float(row["elapsed"])
    return None


def _read(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = out / "latest" if (out / "latest").exists() else out  # the published run
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    return metrics, rows


def one_machine(args: argparse.Namespace, available: list[int], seed: int,
                tmp: Path) -> dict[str, Any]:
    cores, shared = _cores(0, args.cores, available)
    out = tmp / f"train-{seed}"
    argv = [sys.executable, "-m", "hogwild.cli", "train", f"--threads={args.cores}",
            *_common(args, out, seed)]
    proc = _popen(argv, cores, tmp / f"train-{seed}.log")
    if proc.wait(args.timeout) != 0:
        raise SystemExit(f"train failed: {(tmp / f'train-{seed}.log').read_text()[-2000:]}")
    metrics, rows = _read(out)
    return {"metrics": metrics, "rows": rows, "cores": cores, "shared": shared}


def cluster(args: argparse.Namespace, workers: int, available: list[int], seed: int,
            tmp: Path) -> dict[str, Any]:
    out = tmp / f"run-{workers}-{seed}"
    cores, shared = _cores(0, args.cores, available)
    log = tmp / f"coordinator-{workers}-{seed}.log"
    coordinator = _popen([sys.executable, "-m", "hogwild.cli", "coordinator", "--insecure",
                          "--bind-host=127.0.0.1", "--port=0", f"--workers={workers}",
                          f"--threads={args.cores}", f"--mode={args.mode}",
                          *_common(args, out, seed)], cores, log)
    port = None
    deadline = time.monotonic() + args.timeout
    while port is None and time.monotonic() < deadline:
        match = READY.search(log.read_text(errors="replace"))
        if match:
            port = int(match.group(1))
        elif coordinator.poll() is not None:
            raise SystemExit(f"coordinator failed: {log.read_text()[-2000:]}")
        else:
            time.sleep(0.05)
    if port is None:
        coordinator.kill()
        raise SystemExit("the coordinator did not start in time")
    procs = []
    all_cores = [cores]
    for k in range(workers):
        wcores, wshared = _cores(k + 1, args.cores, available)
        shared = shared or wshared
        all_cores.append(wcores)
        procs.append(_popen([sys.executable, "-m", "hogwild.cli", "worker", "--insecure",
                             "--bind-host=127.0.0.1", "--port=0",
                             f"--coordinator=127.0.0.1:{port}", f"--threads={args.cores}",
                             "--log-level=warning"],
                            wcores, tmp / f"worker-{workers}-{k}-{seed}.log"))
    try:
        if coordinator.wait(args.timeout) != 0:
            raise SystemExit(f"coordinator failed: {log.read_text()[-2000:]}")
    finally:
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    metrics, rows = _read(out)
    return {"metrics": metrics, "rows": rows, "cores": all_cores, "shared": shared}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="synthetic:rcv1?rows=200000&seed=1")
    # No test file by default: a synthetic set's test rows must come from its own generator
    # (another seed plants another separator), so they are split off (test_fraction).
    parser.add_argument("--test", default="")
    parser.add_argument("--cores", type=int, default=0,
                        help="cores per machine (default: as many as (W + 1) machines of the "
                             "largest W allow, at least 1)")
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument("--mode", default="sync", choices=("sync", "async"))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    available = sorted(os.sched_getaffinity(0))
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    if args.cores <= 0:
        args.cores = max(1, len(available) // (max(counts) + 1))
    print(f"machine: {len(available)} cores available; {args.cores} core(s) per simulated "
          f"machine; data {args.data}; {args.epochs} epochs; mode {args.mode}; "
          f"{args.repeats} repeat(s); load average {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[int, list[dict[str, Any]]] = {0: []}
    with tempfile.TemporaryDirectory(prefix="hogwild-scaling-") as name:
        tmp = Path(name)
        for r in range(args.repeats):
            seed = r
            results[0].append(one_machine(args, available, seed, tmp))
            for w in counts:
                results.setdefault(w, []).append(cluster(args, w, available, seed, tmp))
    best = statistics.median(max((row["val_accuracy"] or 0.0) for row in run["rows"])
                             for run in results[0])
    target = args.target if args.target is not None else best - 0.005
    print(f"target validation accuracy {target:.4f}")
    print(f"{'setup':<22} {'cores':<28} {'to target s':>11} {'speed-up':>8} "
          f"{'test acc':>8} {'bytes/round':>12}")
    base_times = [_time_to(run["rows"], target) for run in results[0]]
    base = statistics.median([t for t in base_times if t is not None] or [float("nan")])
    for w, runs in results.items():
        times = [_time_to(run["rows"], target) for run in runs]
        reached = [t for t in times if t is not None]
        t = statistics.median(reached) if reached else None
        acc = statistics.median(run["metrics"]["test_accuracy"] for run in runs)
        per_round = ([run["metrics"].get("bytes_received", 0)
                      / max(1, run["metrics"].get("rounds", 1)) for run in runs] if w else [])
        label = (f"1 machine x {args.cores} threads" if w == 0 else
                 f"{w} worker(s) x {args.cores}")
        cores = str(runs[0]["cores"]) + (" shared" if runs[0]["shared"] else "")
        speed = f"{base / t:.2f}x" if t else "-"
        print(f"{label:<22} {cores:<28} {t if t is not None else float('nan'):>11.3f} "
              f"{speed:>8} {acc:>8.4f} "
              f"{statistics.median(per_round) if per_round else 0:>12,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
