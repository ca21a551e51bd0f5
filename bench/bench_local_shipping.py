"""Coordinator peak memory and start-up with shipping partition vs local (workers read their rows).

Writes synthetic RCV1-shaped svmlight files (train, plus a separate test file so that the
coordinator's held-out rows are the 10 % validation share only), then runs `hogwild run`
(coordinator + 2 workers as processes on loopback, 1 thread, --epochs passes) with each shipping mode, alternating, and
prints the coordinator's peak RSS (`coordinator_peak_rss_bytes` in metrics.json), the time from
start to training and the test accuracy. Medians over --repeats runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import repo_env


def write_data(rows: int, workdir: Path) -> tuple[Path, Path]:
    train = workdir / f"train-{rows}.svm"
    test = workdir / f"test-{rows}.svm"
    if not train.exists():
        subprocess.run([sys.executable, "-m", "hogwild.cli", "gen-data", "rcv1", "--rows",
                        str(rows), "--test-rows", str(max(1000, rows // 10)), "--out",
                        str(train)], check=True, env=repo_env(), capture_output=True)
        made = workdir / f"train-{rows}.test.svm"
        if made.exists():
            made.rename(test)
    if not test.exists():  # gen-data names the test file after the train file
        found = sorted(workdir.glob(f"train-{rows}*test*"))
        if not found:
            raise SystemExit(f"gen-data wrote no test file next to {train}")
        found[0].rename(test)
    return train, test


def run_once(train: Path, test: Path, shipping: str, workdir: Path,
             epochs: int) -> dict[str, Any]:
    out = workdir / f"out-{shipping}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "hogwild.cli", "run", "--workers", "2", "--threads", "1",
            "--data", str(train), "--test", str(test), "--out", str(out), "--epochs", str(epochs),
            "--patience", "0", "--shipping", shipping, "--data-cache", "false",
            "--insecure"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=repo_env(), check=False,
                          timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{shipping} run failed ({proc.returncode}):\n{proc.stdout[-3000:]}"
                         f"\n{proc.stderr[-3000:]}")
    m = json.loads((out / "latest" / "metrics.json").read_text())
    return {"rss_mb": m["coordinator_peak_rss_bytes"] / 1e6, "wall": wall,
            "load_s": m["load_seconds"], "ship_s": m["ship_seconds"],
            "acc": m["test_accuracy"], "shipped_mb": m["shipped_bytes"] / 1e6,
            "plan_mb": m.get("plan_bytes", 0) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="200000", help="comma-separated training row counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="hogwild-bench-local-") as tmp:
        workdir = Path(tmp)
        print("| rows | shipping | coordinator peak RSS MB | load s | ship s | shipped MB | "
              "plan MB | test acc |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for rows in (int(r) for r in args.rows.split(",")):
            train, test = write_data(rows, workdir)
            runs: dict[str, list[dict[str, Any]]] = {"partition": [], "local": []}
            for _ in range(args.repeats):
                for shipping, done in runs.items():
                    done.append(run_once(train, test, shipping, workdir, args.epochs))
            for shipping, got in runs.items():
                med = {k: statistics.median(r[k] for r in got) for k in got[0]}
                print(f"| {rows:,} | {shipping} | {med['rss_mb']:.0f} | {med['load_s']:.2f} | "
                      f"{med['ship_s']:.2f} | {med['shipped_mb']:.1f} | {med['plan_mb']:.2f} | "
                      f"{med['acc']:.4f} |", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
