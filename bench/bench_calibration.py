"""The calibrated simulator against real processes: `simulate --calibrate` next to `hogwild run`.

Runs the same settings as real processes over loopback (`hogwild run`) and as a calibrated
simulation (`hogwild simulate --calibrate`), alternating, ``--pairs`` times, and prints each
pair's training seconds, the simulated / real ratio and its median, against the target of
0.7-1.3 (the simulated run within 30 % of the real one), each run started once the machine
is quiet. Both train the same rounds; the script checks that too. Usage:

    python bench/bench_calibration.py [--rows 200000] [--workers 2] [--epochs 4] [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import load_line, machine_line, ratio_line, repo_env, wait_for_quiet


def _metrics(command: str, out: Path, settings: list[str], *extra: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-m", "hogwild.cli", command, *settings,
                           "--out", str(out), *extra],
                          check=False, capture_output=True, text=True, timeout=900,
                          env=repo_env())
    if proc.returncode != 0:
        raise SystemExit(f"hogwild {command} failed:\n{proc.stderr[-2000:]}")
    return dict(json.loads((out / "latest" / "metrics.json").read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--mode", default="sync")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    settings = ["--data", f"synthetic:rcv1?rows={args.rows}&seed=3",
                "--workers", str(args.workers), "--threads", str(args.threads),
                "--epochs", str(args.epochs), "--mode", args.mode, "--insecure", "-q"]
    print(machine_line())
    print(load_line())
    print(f"{args.workers} worker(s) x {args.threads} thread(s), {args.mode}, {args.rows:,} "
          f"synthetic RCV1-shaped rows, {args.epochs} epochs; {args.pairs} pairs, alternating")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="hogwild-bench-") as tmp:
        for i in range(args.pairs):
            # Each after the machine is quiet again (the run before it draws its plot after
            # it ends): the calibration times this machine, and a busy one reads slower.
            wait_for_quiet(15)
            real = _metrics("run", Path(tmp) / f"real{i}", settings)
            wait_for_quiet(15)
            sim = _metrics("simulate", Path(tmp) / f"sim{i}", settings, "--calibrate")
            if real["rounds"] != sim["rounds"]:
                raise SystemExit(f"different rounds: real {real['rounds']}, "
                                 f"simulated {sim['rounds']}")
            real_s, sim_s = float(real["seconds"]), float(sim["simulated_seconds"])  # type: ignore[arg-type]
            ratios.append(sim_s / real_s)
            print(f"  pair {i + 1}: real {real_s:.3f} s, simulated {sim_s:.3f} s, "
                  f"ratio {sim_s / real_s:.2f} ({real['rounds']} rounds)")
    median = statistics.median(ratios)
    print(ratio_line("simulated / real training time (median)", median, "0.7-1.3",
                     0.7 <= median <= 1.3))
    print(load_line())


if __name__ == "__main__":
    main()
