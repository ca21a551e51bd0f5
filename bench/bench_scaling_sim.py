"""Simulated scaling: time to accuracy with W = 1 to 64 workers, in the transport-free engine.

    .venv/bin/python bench/bench_scaling_sim.py --data train.svm --test test.svm
    .venv/bin/python bench/bench_scaling_sim.py --data DATA --workers 1,8,16,64 --seeds 0,1,2

Each row is one `hogwild simulate` run (the same Simulation, settings and cost model as the
command: only --workers, --threads 1 and --mode given, the rest at their defaults, so combine
and topology are the defaults' choice for W), evaluated 16 times an epoch. Time to accuracy
is the simulated time at which the coordinator's model first reaches the one-worker run's
best validation accuracy less 0.005 (the same seed's); the speed-up is the one-worker run's
time to accuracy over this one's. Medians over --seeds, with the lowest and highest speed-up
of the seeds beside them. The data is loaded once. W: the workers started; E: those
`engage` trains on (--engage all: every one).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from hogwild import config
from hogwild.commands.simulate import SimOptions, kernel_plan, scenario_of, simulation_of
from hogwild.engine.runstart import load_splits, model_spec
from hogwild.model.evaluation import evaluate_model
from hogwild.model.losses import get_loss

TOLERANCE = 0.005


def simulate(splits: Any, base: dict[str, Any], workers: int, mode: str, seed: int,
             evals: float) -> dict[str, Any]:
    s = config.load(None, {}, {**base, "workers": workers, "threads": 1, "mode": mode,
                               "seed": seed}).for_run(splits.train.n_rows, splits.train.nnz)
    spec = model_spec(s, splits.train.n_features)
    sc = scenario_of(s, SimOptions(evals_per_epoch=evals), splits.train.n_rows,
                     splits.train.nnz, kernel_plan(s, spec))
    began = time.perf_counter()
    result = simulation_of(s, splits, sc, spec).run()
    test = evaluate_model(splits.test, result.best_weights, get_loss(s.loss), spec).accuracy
    return {"history": result.history, "seconds": result.seconds, "messages": result.messages,
            "bytes": result.bytes, "test": test, "topology": s.topology, "engaged": s.workers,
            "combine": sc.rules.combine, "wall": time.perf_counter() - began}


def time_to(history: list[dict[str, Any]], target: float) -> float | None:
    for row in history:
        if row["val_accuracy"] is not None and row["val_accuracy"] >= target:
            return float(row["elapsed"])
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--test", default=None)
    ap.add_argument("--workers", default="1,2,4,8,16,32,64")
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--evals-per-epoch", type=float, default=16)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for every run but the one-worker reference, e.g. "
                         "tree_fanout=2 (repeatable)")
    ap.add_argument("--engage", default="auto", choices=("auto", "all"),
                    help="auto (the default's choice: W workers started, E of them trained "
                         "on) or all (every worker trains)")
    args = ap.parse_args(argv)
    base = {"data": args.data, "test_data": args.test, "epochs": args.epochs,
            "engage": args.engage}
    splits = load_splits(config.load(None, {}, base))
    extra = dict(item.split("=", 1) for item in args.set)
    workers = [int(w) for w in args.workers.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    print(f"{splits.train.n_rows:,} training rows; default cost model; medians of "
          f"{len(seeds)} seed(s)")
    print(f"{'mode':>5} {'W':>3} {'E':>3} {'topology':>8} {'to_acc_s':>9} {'speedup':>7} "
          f"{'seeds':>13} {'total_s':>8} {'messages':>9} {'MB':>8} {'test_acc':>8}")
    for mode in args.modes.split(","):
        ref: dict[int, tuple[float, float]] = {}
        for w in workers:
            rows = []
            for seed in seeds:
                if seed not in ref:
                    one = simulate(splits, base, 1, mode, seed, args.evals_per_epoch)
                    best = max(r["val_accuracy"] for r in one["history"])
                    t1 = time_to(one["history"], best - TOLERANCE)
                    assert t1 is not None
                    ref[seed] = (best, t1)
                r = one if w == 1 else simulate(splits, {**base, **extra}, w, mode, seed,
                                                 args.evals_per_epoch)
                t = time_to(r["history"], ref[seed][0] - TOLERANCE)
                rows.append((r, t, None if t is None else ref[seed][1] / t))
            reached = [t for _, t, _ in rows if t is not None]
            ups = [u for _, _, u in rows if u is not None]
            first = rows[0][0]
            to_acc = f"{statistics.median(reached):.4f}" if len(reached) == len(rows) else "never"
            speedup = f"{statistics.median(ups):.2f}x" if len(ups) == len(rows) else "-"
            # One seed's figure can be far from the median: the spread says how far.
            spread = f"{min(ups):.2f}-{max(ups):.2f}x" if len(ups) > 1 else ""
            print(f"{mode:>5} {w:>3} {first['engaged']:>3} {first['topology']:>8} {to_acc:>9} {speedup:>7} "
                  f"{spread:>13} {statistics.median(r['seconds'] for r, _, _ in rows):>8.3f} "
                  f"{int(statistics.median(r['messages'] for r, _, _ in rows)):>9,} "
                  f"{statistics.median(r['bytes'] for r, _, _ in rows) / 1e6:>8.0f} "
                  f"{statistics.median(r['test'] for r, _, _ in rows):>8.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
