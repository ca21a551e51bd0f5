"""Chaos soak, long form: each run under a random fault every 20-40 s, with figures.

    .venv/bin/python bench/bench_chaos.py                     # 10 min per mode, 3 min per other topology
    .venv/bin/python bench/bench_chaos.py --minutes 3 --other-minutes 1   # shorter

Runs (Reuters earn, 8 workers of 1 thread, on loopback): sync and async with the default
topology (`auto`: at 8 workers a tree in sync mode, a mesh in async mode) for --minutes each,
then each other topology in sync mode for --other-minutes each. Each
run gets kill -9 + restart of a worker and SIGSTOP of a worker for 5-15 s at random, one kill
-9 of the coordinator followed by `--resume`, and one bad member (a worker restarted with its
delta values 1e30 for a minute); see tests/cluster/soak.py. Each is compared with the same
run without faults (--clean-minutes long). Prints the Markdown tables (one row a run, then
every fault with its recovery time) and the targets each run missed, and writes the raw
figures as JSON (--json).

Targets: test accuracy within 0.5 point of the clean run; RSS growth under 10 % after the
first minute; no descriptor growth; 0 hangs (a process alive 60 s after its run should have
ended); every fault logged with its recovery time.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.cluster (the soak) and its data paths

from tests.cluster.soak import Soak, SoakReport, clean_accuracy, missed, table

from hogwild.settings.rules import resolve_topology


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="each default-topology run (sync, async)")
    parser.add_argument("--other-minutes", type=float, default=3.0,
                        help="each other topology's run (star, tree; sync)")
    parser.add_argument("--clean-minutes", type=float, default=1.5,
                        help="the clean runs the accuracy is compared with")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hogwild-soak-"))
    # The default topology (auto) as it resolves for this many workers in each mode, then
    # each other topology in sync mode.
    default_sync = resolve_topology("auto", args.workers, "sync")
    runs = [("sync", default_sync, args.minutes),
            ("async", resolve_topology("auto", args.workers, "async"), args.minutes)]
    runs += [("sync", other, args.other_minutes) for other in ("mesh", "star", "tree")
             if other != default_sync]
    reports: list[SoakReport] = []
    for i, (mode, topology, minutes) in enumerate(runs):
        if minutes <= 0:
            continue
        where = workdir / f"{i}-{mode}-{topology}"
        where.mkdir(parents=True)
        print(f"[soak] {mode} {topology}: {minutes:g} min, {args.workers} workers", flush=True)
        report = Soak(where, mode, topology, args.workers, 60 * minutes, args.seed + i).run()
        report.clean_accuracy = clean_accuracy(where / "clean", mode, topology, args.workers,
                                               60 * args.clean_minutes)
        reports.append(report)
        print(table([report]), flush=True)
    print(f"\nmachine: {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}\n")
    print(table(reports))
    failed = False
    for r in reports:
        why = missed(r)
        failed = failed or bool(why)
        print(f"{r.mode} {r.topology}: {'all targets met' if not why else '; '.join(why)}")
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in reports], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
