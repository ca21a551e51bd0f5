"""`run --workers 2 --threads 1` against `train --threads 2`: training time and accuracy.

Each command runs as its own process, in alternation (train, run, train, run, ...), from an
empty working directory (so no settings.yaml of a checkout changes the defaults), with the
parsed-array cache on (parsing is paid once, before the first pair). Compared is the time
each one reports for training: train's done line ("N epochs in X s"), run's metrics.json
"seconds" (the workers' training, start to stop); and the test accuracy. On a shared machine
only the ratio of neighbouring runs means much: the table gives each pair's ratio and the
median of the ratios. Usage:

    python bench/bench_cluster_vs_train.py --data train.svm --test test.svm [--pairs 3]
        [--epochs 3] [--shipping partition|local] [-- extra run flags]
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
from pathlib import Path

DONE = re.compile(r"done \([^)]*\): \d+ epochs(?: \(model of epoch \d+\))? in ([0-9.]+)s"
                  r".*test accuracy ([0-9.]+)")


def hogwild() -> list[str]:
    return [sys.executable, "-c", "import sys; from hogwild.cli import main; sys.exit(main())"]


def run_train(args: argparse.Namespace, cwd: Path) -> tuple[float, float]:
    out = subprocess.run([*hogwild(), "train", "--data", args.data, "--test", args.test,
                          "--threads", "2", "--epochs", str(args.epochs)],
                         cwd=cwd, capture_output=True, text=True, check=True).stdout
    match = DONE.search(out)
    if match is None:
        raise SystemExit(f"train: no done line in:\n{out}")
    return float(match.group(1)), float(match.group(2))


def run_cluster(args: argparse.Namespace, cwd: Path) -> tuple[float, float, dict[str, float]]:
    proc = subprocess.run([*hogwild(), "run", "--data", args.data, "--test", args.test,
                           "--workers", "2", "--threads", "1", "--epochs", str(args.epochs),
                           "--shipping", args.shipping, *args.extra],
                          cwd=cwd, capture_output=True, text=True, check=False)
    match = re.search(r"outputs in (\S+)", proc.stdout + proc.stderr)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    metrics = json.loads((cwd / match.group(1) / "metrics.json").read_text())
    timers: dict[str, float] = {}
    for state in metrics.get("worker_states") or []:
        for name, entry in (state.get("timings") or {}).items():
            timers[name] = timers.get(name, 0.0) + float(entry["seconds"]) / 2
            if name.startswith("rpc:PushDelta"):
                timers[name + " calls"] = timers.get(name + " calls", 0.0) + entry["count"] / 2
    timers["coordinator_eval"] = float(metrics.get("eval_seconds", 0.0))
    timers["coordinator_cpu"] = float(metrics.get("coordinator_cpu_seconds", 0.0))
    timers["epochs"] = float(metrics["epochs"])
    return float(metrics["seconds"]), float(metrics["test_accuracy"]), timers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--shipping", default="partition")
    parser.add_argument("extra", nargs="*", help="more `run` flags (after --)")
    args = parser.parse_args()
    args.data, args.test = str(Path(args.data).resolve()), str(Path(args.test).resolve())
    env_src = str(Path(__file__).resolve().parents[1] / "src")
    os.environ["PYTHONPATH"] = env_src + os.pathsep + os.environ.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        cwd = Path(tmp)
        run_train(args, cwd)  # the cache is built (or checked) once, outside the pairs
        ratios, rows = [], []
        print("pair  train_s  run_s  ratio  train_acc  run_acc  worker timers (mean s)")
        for k in range(args.pairs):
            t_s, t_acc = run_train(args, cwd)
            r_s, r_acc, timers = run_cluster(args, cwd)
            ratios.append(r_s / t_s)
            rows.append((t_s, r_s, t_acc, r_acc))
            shown = ", ".join(f"{name} {sec:.2f}" for name, sec in sorted(timers.items())
                              if sec >= 0.01)
            print(f"{k + 1:>4}  {t_s:7.2f}  {r_s:5.2f}  {r_s / t_s:5.2f}  {t_acc:9.4f}  "
                  f"{r_acc:7.4f}  {shown}", flush=True)
        med = statistics.median
        print(f"median: train {med(r[0] for r in rows):.2f}s, run {med(r[1] for r in rows):.2f}s, "
              f"ratio {med(ratios):.2f} (of pairs), accuracy train "
              f"{med(r[2] for r in rows):.4f} / run {med(r[3] for r in rows):.4f}")


if __name__ == "__main__":
    main()
