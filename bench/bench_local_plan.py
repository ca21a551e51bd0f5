"""The coordinator's plan under shipping local: the whole-file scan against the plan from a sample.

For each svmlight file given, times `load_local` (the coordinator's whole plan: the ranges,
the held-out rows it evaluates on, the feature order) with `local_plan: scan` and with
`local_plan: sample`, alternating, and prints the medians and their ratio. With --e2e it
then times `hogwild train --threads 2` against `hogwild run --workers 2 --threads 1
--shipping local` (each plan) end to end on the first file, alternating, and prints the wall
times' ratios to train's. --parquet SPECS times the plan of each `parquet:` source instead
(from its footers and a sample), and with --e2e `train` against `run --shipping local` and
`run --shipping partition` on the first. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import repo_env


def plan_seconds(data: Path | str, plan: str, workers: int,
                 n_features: int | None) -> tuple[float, int]:
    """Seconds of the coordinator's plan of ``data`` in a fresh process, and its held-out rows."""
    script = (
        "import sys, time, json\n"
        "from hogwild import config\n"
        "from hogwild.cluster.coordinator.data.localplan import load_local\n"
        "s = config.load(None, {}, json.loads(sys.argv[1]))\n"
        "t = time.perf_counter()\n"
        "splits, local = load_local(s)\n"
        "print(json.dumps([time.perf_counter() - t, splits.val.n_rows]))\n")
    # No test file: the held-out rows are validation and test shares of the data (a test
    # file beside it, NAME.test.svm, would be loaded whole and timed too).
    settings = {"data": str(data), "shipping": "local",
                "workers": workers, "local_plan": plan, "n_features": n_features,
                "data_cache": False}
    if n_features is None:
        del settings["n_features"]
    out = subprocess.run([sys.executable, "-c", script, json.dumps(settings)], check=True,
                         env=repo_env(), capture_output=True, text=True).stdout
    seconds, held = json.loads(out.strip().splitlines()[-1])
    return float(seconds), int(held)


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=repo_env(), capture_output=True)
    return time.perf_counter() - t


def parquet(args: argparse.Namespace) -> None:
    """The plans of the --parquet sources, then (--e2e) the three commands on the first."""
    specs = args.parquet.split(",")
    print("| source | plan s (median) | runs | validation rows |")
    print("|---|---|---|---|")
    for spec in specs:
        times, held = [], 0
        for _ in range(args.repeats):
            seconds, held = plan_seconds(spec, "auto", args.workers, None)
            times.append(seconds)
        print(f"| {spec.split('?')[0]} | {statistics.median(times):.2f} | "
              f"{', '.join(f'{t:.2f}' for t in times)} | {held:,} |", flush=True)
    if not args.e2e:
        return
    hogwild = [sys.executable, "-m", "hogwild.cli"]
    common = ["--data", specs[0], "--epochs", str(args.epochs), "--patience", "0",
              *(["--test", args.test] if args.test else [])]
    run = [*hogwild, "run", *common, "--workers", str(args.workers), "--threads", "1"]
    commands = {"train --threads 2": [*hogwild, "train", *common, "--threads", "2"],
                f"run --workers {args.workers} --shipping local": [*run, "--shipping", "local"],
                f"run --workers {args.workers} --shipping partition": [
                    *run, "--shipping", "partition"]}
    compare(commands, args.repeats, f"{specs[0].split('?')[0]}, {args.epochs} epochs")


def compare(commands: dict[str, list[str]], repeats: int, what: str) -> None:
    """Each command ``repeats`` times, alternating; medians against the first one's."""
    runs: dict[str, list[float]] = {name: [] for name in commands}
    accuracy: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for name, cmd in commands.items():
                out = f"{tmp}/{name}{i}"
                runs[name].append(wall([*cmd, "--out", out]))
                metrics = json.loads((Path(out) / "latest" / "metrics.json").read_text())
                accuracy[name].append(float(metrics["test_accuracy"]))
    first = statistics.median(runs[next(iter(commands))])
    print(f"\nend to end on {what}, medians of {repeats} (wall seconds, then test accuracy):")
    for name, cmd in commands.items():
        r = statistics.median(runs[name])
        print(f"  {name}: {r:.2f} s = {r / first:.2f}x "
              f"({', '.join(f'{x:.2f}' for x in runs[name])}); "
              f"test accuracy {statistics.median(accuracy[name]):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="", help="comma-separated svmlight files")
    ap.add_argument("--parquet", default="", help="comma-separated parquet: sources")
    ap.add_argument("--test", default="", help="test file for --e2e (default: the data's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n-features", type=int, default=47237)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--e2e", action="store_true", help="also train vs run end to end")
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    if args.parquet:
        parquet(args)
        return
    if not args.data:
        ap.error("give --data or --parquet")
    files = [Path(p) for p in args.data.split(",")]
    print("| file | text bytes | scan s (median) | sample s (median) | sample / scan | "
          "validation rows (scan / sample) |")
    print("|---|---|---|---|---|---|")
    for data in files:
        times: dict[str, list[float]] = {"scan": [], "sample": []}
        held: dict[str, int] = {}
        for _ in range(args.repeats):
            for plan in ("scan", "sample"):
                seconds, held[plan] = plan_seconds(data, plan, args.workers, args.n_features)
                times[plan].append(seconds)
        scan, sample = statistics.median(times["scan"]), statistics.median(times["sample"])
        print(f"| {data.name} | {data.stat().st_size:,} | {scan:.2f} | {sample:.2f} | "
              f"{sample / scan:.3f} | {held['scan']:,} / {held['sample']:,} |", flush=True)
    if not args.e2e:
        return
    data, test = files[0], Path(args.test) if args.test else files[0]
    hogwild = [sys.executable, "-m", "hogwild.cli"]
    common = ["--data", str(data), "--test", str(test), "--epochs", str(args.epochs),
              "--patience", "0", "--data-cache", "false", "--n-features", str(args.n_features)]
    commands = {"train --threads 2": [*hogwild, "train", *common, "--threads", "2"]}
    for plan in ("scan", "sample"):
        commands[f"run --workers {args.workers} --shipping local --local-plan {plan}"] = [
            *hogwild, "run", *common, "--workers", str(args.workers), "--threads", "1",
            "--shipping", "local", "--local-plan", plan]
    compare(commands, args.repeats, f"{data.name}, {args.epochs} epochs")


if __name__ == "__main__":
    main()
