"""`train`, `run`, `coordinator` and `worker`: the commands that train on the run's settings."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from hogwild.commands.common import verbosity_of
from hogwild.outputs import console

if TYPE_CHECKING:
    from hogwild.cluster.localrun.prespawn import CommandRunner
    from hogwild.config import Settings
    from hogwild.outputs.plotter import BackgroundPlot


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """What `run` takes besides the settings."""
    parser.add_argument("--keep-going", action="store_true",
                        help="do not stop the other processes when a worker fails")


def train(settings: Settings, plot: BackgroundPlot | None = None) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.inprocess.local import train_job

    train_job(settings, plot=plot)  # prints (and with --json, the metrics) as console says
    return 0


def run(settings: Settings, args: argparse.Namespace, fork: CommandRunner | None) -> int:
    """``fork``: how a forked child runs its command line, when this is the whole process
    (see hogwild.cluster.localrun.launcher.run_local)."""
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.cluster.localrun.launcher import run_local

    return run_local(settings, config_path=args.config, keep_going=args.keep_going,
                     insecure=settings.insecure, fork=fork, verbosity=verbosity_of(args))


def coordinator(settings: Settings, plot: BackgroundPlot | None = None) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.cluster.coordinator.server import serve

    # --json: standard output is the metrics' alone (the port line goes to stderr too).
    return serve(settings, out=sys.stderr if console.current().as_json else None, plot=plot)


def worker(settings: Settings) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.cluster.worker import serve

    return serve(settings)
