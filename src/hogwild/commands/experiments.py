"""`experiment`: its parser and handler; the sweep itself is hogwild.experiment."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from hogwild import config
from hogwild.commands.common import setup_logging

# (light: --help builds its parser from it; the sweep's own stack loads when it runs)
from hogwild.experiment.command import add_arguments as experiment_arguments
from hogwild.experiment.command import options_from_args, run_experiment


def add_experiment(sub: Any) -> None:
    """`experiment`: the HOGWILD! paper's comparisons."""
    experiment = sub.add_parser(
        "experiment", help="reproduce the HOGWILD! paper's comparisons: threads, trainers, "
        "data sizes, mini-batch sizes; writes runs.csv, runs.jsonl and plots",
        description="sweep threads x trainers (hogwild, locked, serial, syncsgd), data sizes, "
                    "mini-batch sizes, a regression set and optionally cluster workers; "
                    "writes runs.csv, runs.jsonl, summary.txt and plots/*.png under --out")
    experiment_arguments(experiment)


def experiment(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    opts = options_from_args(args)
    base = config.load(args.config or config.default_config_path(environ), environ)
    setup_logging(base.log_level)
    result = run_experiment(opts, base)
    if result["failed"]:
        print(f"hogwild experiment: error: {result['failed']} run(s) failed (see runs.csv)",
              file=sys.stderr)
        return 1
    return 0
