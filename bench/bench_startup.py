"""Start-up as a user feels it: `hogwild --version`, and a whole `hogwild run` on Reuters earn.

Prints the median wall time of ``--runs`` runs of `hogwild --version` (target < 0.2 s) with
the heavy libraries it imported (none expected), then of `hogwild run --workers 2 --threads 1`
on the Reuters earn train/test files of ../shared/data (target <= 2.5 s), with the
coordinator's own clocks from metrics.json (loading, training) beside it.

    python bench/bench_startup.py [--runs 3] [--version-runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

HEAVY = ("numba", "grpc", "matplotlib")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(common.REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


CPU: list[float] = []  # CPU seconds of each timed command, all its processes


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    c0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - t0
    CPU.append(_children_cpu() - c0)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    return seconds, proc


def seconds_line(label: str, value: float, target: str, ok: bool) -> str:
    return f"  {label:<44} {value:8.3f} s   target {target:<10} {common.verdict(ok)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of `hogwild run` (default 3)")
    ap.add_argument("--version-runs", type=int, default=5,
                    help="runs of `hogwild --version` (default 5)")
    args = ap.parse_args(argv)
    env = _env()
    hogwild = [sys.executable, "-m", "hogwild.cli"]
    print(common.machine_line())
    print(common.load_line())

    versions = [timed(hogwild + ["--version"], env)[0] for _ in range(args.version_runs)]
    version_cpu = statistics.median(CPU)
    probe = ("import runpy, sys\nsys.argv = ['hogwild', '--version']\ntry:\n"
             "    runpy.run_module('hogwild.cli', run_name='__main__')\nexcept SystemExit:\n"
             "    pass\n"
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    heavy = timed([sys.executable, "-c", probe], env)[1].stderr.strip()
    print(f"\nhogwild --version: median {statistics.median(versions):.3f}s of "
          f"{len(versions)} ({', '.join(f'{v:.3f}' for v in versions)}), CPU "
          f"{version_cpu:.3f}s; heavy modules imported: {heavy}")
    print(seconds_line("hogwild --version, median", statistics.median(versions), "< 0.2 s",
                       statistics.median(versions) < 0.2))

    train = common.SHARED_DATA / common.REAL_SETS["reuters_earn"][0]
    test = common.SHARED_DATA / common.REAL_SETS["reuters_earn"][1]
    if not train.is_file():
        print(f"\nReuters earn not found in {common.SHARED_DATA}: `hogwild run` skipped")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="hogwild-startup-") as tmp:
        env["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # first run parses, later ones hit it
        for i in range(args.runs):
            out = Path(tmp) / f"run{i}"
            with common.CpuMeter() as meter:
                seconds, _ = timed(hogwild + ["run", "--workers", "2", "--threads", "1",
                                              "--data", str(train), "--test", str(test),
                                              "--out", str(out)], env)
            m = json.loads((out / "latest" / "metrics.json").read_text())
            rows.append((i + 1, seconds, CPU[-1], m["load_seconds"], m["seconds"],
                         f"{100 * m['test_accuracy']:.2f}%", f"{meter.others:.2f}"))
    common.print_table(["run", "wall s", "CPU s (all processes)", "coordinator load s",
                        "training s", "test acc", "others"], rows,
                       "hogwild run --workers 2 --threads 1, Reuters earn (wall: launcher "
                       "start to exit)")
    median = statistics.median(r[1] for r in rows)
    print(seconds_line("hogwild run, median", median, "<= 2.5 s", median <= 2.5))
    print(common.load_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
