"""`hogwild experiment`: parse the sweep, run it, write runs.csv / runs.jsonl / plots, print."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from hogwild.config import Settings
from hogwild.errors import ConfigError
from hogwild.experiment.plan import ExperimentOptions, build_plan, quick_options


def _ints(key: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(key, f"expected comma-separated integers, got {text!r}") from None
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The experiment's own flags (model settings come from --config / HOGWILD_*)."""
    a = parser.add_argument
    a("--config", metavar="PATH", help="settings file for the model settings (learning_rate, "
      "l2, lr_schedule, thread_buffer, splits, ...); default as for `hogwild train`")
    a("--quick", action="store_true",
      help="seconds, not minutes: 20k rows, threads 1,2, 3 epochs (flags still override); "
      "runs that train for under 50 ms are too short to time and get no speedup")
    a("--out", metavar="DIR", help="output directory (default runs/experiment)")
    a("--threads", metavar="LIST", help="thread counts, e.g. 1,2,4 (above the core count the "
      "runs are labelled oversubscribed)")
    a("--trainers", metavar="LIST", help="among hogwild,locked,serial,syncsgd (default all)")
    a("--main-rows", metavar="N", help="rows of the data set of the threads, trainers and "
      "batch studies (default 200000; quick 20000)")
    a("--rows", metavar="LIST", help="data sizes of the CPU-time study (default "
      "10000,50000,100000,500000)")
    a("--batch-sizes", metavar="LIST", help="mini-batch sizes compared (default 2,125)")
    a("--sync-batch-size", metavar="B", help="mini-batch of syncsgd in the trainer study "
      "(default 125)")
    a("--workers", metavar="LIST", help="also run `hogwild run` with these worker counts "
      "(default: no cluster runs)")
    a("--worker-threads", metavar="T", help="threads per worker in cluster runs (default 1)")
    a("--epochs", metavar="N", help="passes per run (default 10; quick 3)")
    a("--repeats", metavar="N", help="runs per configuration, interleaved; tables and plots "
      "show medians (default 3; quick 1)")
    a("--loss", choices=("hinge", "logistic"), help="classification loss (default hinge)")
    a("--no-regression", action="store_true", help="skip the least-squares study")
    a("--regression-rows", metavar="N", help="rows of synthetic:regression (default 100000)")
    a("--regression-dim", metavar="D", help="features of synthetic:regression (default 1000)")
    a("--target-loss", metavar="X", help="validation loss that counts as converged "
      "(default: the serial run's final validation loss + target slack)")
    a("--target-slack", metavar="F", help="default target = serial final loss x (1 + F) "
      "(default 0.05)")
    a("--batch-lr-scaling", choices=("none", "linear", "sqrt"),
      help="step size of mini-batch runs: the settings' learning_rate (none, default), "
           "times the batch size (linear) or its square root (sqrt)")
    a("--seed", metavar="S", help="seed of the synthetic data (default 0)")


def options_from_args(args: argparse.Namespace) -> ExperimentOptions:
    """The options the flags ask for; ConfigError names a bad flag."""
    changes: dict[str, Any] = {}
    lists = {"threads": "threads", "rows": "rows", "batch_sizes": "batch_sizes",
             "workers": "workers"}
    for attr, key in lists.items():
        text = getattr(args, attr)
        if text is not None:
            changes[key] = _ints(key, text)
    scalars: dict[str, Callable[[str], Any]] = {
        "main_rows": int, "sync_batch_size": int, "worker_threads": int, "epochs": int,
        "repeats": int, "regression_rows": int, "regression_dim": int, "target_loss": float,
        "target_slack": float, "seed": int}
    for key, conv in scalars.items():
        text = getattr(args, key)
        if text is not None:
            try:
                changes[key] = conv(text)
            except ValueError:
                raise ConfigError(key, f"cannot read {text!r}") from None
    if args.trainers is not None:
        changes["trainers"] = tuple(t.strip() for t in args.trainers.split(",") if t.strip())
    if args.out is not None:
        changes["out_dir"] = args.out
    if args.loss is not None:
        changes["loss"] = args.loss
    if args.batch_lr_scaling is not None:
        changes["batch_lr_scaling"] = args.batch_lr_scaling
    if args.no_regression:
        changes["regression"] = False
    return quick_options(**changes) if args.quick else ExperimentOptions(**changes)


def run_experiment(opts: ExperimentOptions, base: Settings,
                   out: TextIO | None = None) -> dict[str, Any]:
    """Run every study, write the tables and figures; returns their paths and the records.
    Progress and the summary go to ``out`` (default: standard output)."""
    out = sys.stdout if out is None else out
    # Imported on use: the command line imports this module to build its parser.
    from hogwild.base import atomic
    from hogwild.experiment import plots, records
    from hogwild.experiment.runner import execute

    started = time.perf_counter()
    out_dir = Path(opts.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan, skipped = build_plan(opts)
    over = [t for t in opts.threads if t > opts.cores]
    print(f"hogwild experiment: {len(plan)} configurations x {opts.repeats} repeat(s), "
          f"{opts.epochs} epochs each, on {opts.cores} cores"
          + (f" ({', '.join(map(str, over))} threads: oversubscribed)" if over else ""),
          file=out, flush=True)
    for line in skipped:
        print(f"  {line}", file=out)

    def log(line: str) -> None:
        print(line, file=out, flush=True)

    recs = execute(plan, base, opts, out_dir, log)
    csv_path = records.write_csv(out_dir / records.CSV_FILE, recs)
    jsonl_path = records.write_jsonl(out_dir / records.JSONL_FILE, recs)
    lines = records.summary_lines(recs)
    summary = "\n".join(lines).lstrip("\n") + "\n"
    summary_path = atomic.atomic_write_text(out_dir / records.SUMMARY_FILE, summary)
    pngs = plots.draw_all(recs, opts.cores, out_dir / "plots")
    print(summary, file=out)
    print(f"runs: {csv_path}, {jsonl_path}; summary: {summary_path}", file=out)
    print(f"plots ({len(pngs)}) in {out_dir / 'plots'}:", file=out)
    for png in pngs:
        print(f"  {png}", file=out)
    print(f"experiment done in {time.perf_counter() - started:.1f}s", file=out)
    failed = [r for r in recs if r["status"] not in ("ok", "diverged")]
    return {"records": recs, "csv": csv_path, "jsonl": jsonl_path, "summary": summary_path,
            "plots": pngs, "failed": len(failed)}
