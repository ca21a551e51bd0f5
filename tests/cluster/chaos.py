"""Random freezes, kills and restarts of workers during one run; prints how every process ended.

Not part of the test suite (a random schedule is not a repeatable test): a tool for looking
for faults the fixed scenarios of test_faults.py miss. Run from the repository root, e.g.

    .venv/bin/python -m tests.cluster.chaos --mode sync --topology star --seed 3

The faults stop well before the time budget, so every process should end on its own: the
coordinator and every worker not killed with exit 0, no worker left dropped, the test accuracy
near a clean run's. It prints one JSON line; the exit status is 0 when all of that held.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .helpers import Cluster, read_metrics
from .test_faults import PROGRESS_ROW, _advertised, _respawn, faulty

# Faults stop this long before the time budget, so the last frozen or restarted worker is
# back (or dropped for good) before the run ends.
QUIET_END = 12.0


def run(mode: str, topology: str, seed: int, n: int, budget: float, workdir: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    out = workdir / "out"
    extra: dict[str, Any] = {"topology": topology}
    if mode == "async":
        extra["staleness"] = 4
    settings = faulty(out, mode=mode, time_budget=budget, **extra)
    cluster = Cluster(workdir)
    events: list[str] = []
    try:
        cluster.start(n, **settings)
        assert cluster.coordinator is not None
        advertised = _advertised(cluster)
        cluster.coordinator.wait_for(PROGRESS_ROW, 60)
        current = {wid: proc for wid, (proc, _, _) in advertised.items()}
        # Reported by worker id (spawn order is not id order).
        label = {proc.name: f"worker {wid}" for wid, proc in current.items()}
        label[cluster.coordinator.name] = "coordinator"
        killed: set[str] = set()
        stop_at = time.monotonic() + budget - QUIET_END
        while True:
            time.sleep(rng.uniform(1.5, 4.0))
            wid, freeze, seconds = rng.randrange(n), rng.random() < 0.5, rng.uniform(1.0, 8.0)
            if time.monotonic() + (seconds if freeze else 3.0) > stop_at:
                break
            proc = current[wid]
            if proc.proc.poll() is not None:
                continue
            if freeze:
                proc.proc.send_signal(signal.SIGSTOP)
                time.sleep(seconds)
                proc.proc.send_signal(signal.SIGCONT)
                events.append(f"froze worker {wid} {seconds:.1f}s")
            else:
                proc.proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                killed.add(proc.name)
                time.sleep(rng.uniform(0.5, 3.0))
                current[wid] = _respawn(cluster, out, mode, budget, advertised, wid,
                                        workers=n, name=f"worker-{wid}-restart-{len(killed)}")
                label[current[wid].name] = f"worker {wid}, restart {len(killed)}"
                events.append(f"killed and restarted worker {wid}")
        codes: dict[str, int | None] = {}
        cluster.coordinator.proc.wait(budget + 150)
        for proc in cluster.procs:
            try:
                codes[proc.name] = proc.proc.wait(60)
            except subprocess.TimeoutExpired:  # still running: that is the finding
                codes[proc.name] = None
        metrics = read_metrics(out) if (out / "metrics.json").exists() else {}
        ok = (all(code == 0 for name, code in codes.items() if name not in killed)
              and bool(metrics) and metrics.get("dropped_workers") == [])
        return {"ok": ok, "mode": mode, "topology": topology, "seed": seed, "events": events,
                "exit_codes": {label.get(name, name): code for name, code in codes.items()},
                "stop_reason": metrics.get("stop_reason"),
                "test_accuracy": metrics.get("test_accuracy"),
                "dropped_workers": metrics.get("dropped_workers"),
                "max_abs_diff_to_global": [s.get("max_abs_diff_to_global")
                                           for s in metrics.get("worker_states", [])]}
    finally:
        cluster.reap()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--topology", choices=["mesh", "star", "tree"], default="mesh")
    parser.add_argument("--seed", type=int, default=0, help="seeds the schedule of faults")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--budget", type=float, default=40.0, help="the run's time budget (s)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the run writes (default: a new temporary directory)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hogwild-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = run(args.mode, args.topology, args.seed, args.workers, args.budget, workdir)
    print(json.dumps({**report, "workdir": str(workdir)}))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
