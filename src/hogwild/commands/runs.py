"""`hogwild runs list|prune`: the run history of a runs directory, and its pruning."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from hogwild import config
from hogwild.errors import UsageError


def add_runs(sub: Any) -> None:
    """`runs`: list or prune the runs of out_dir."""
    runs = sub.add_parser(
        "runs", help="list the runs of a runs directory, or remove the oldest",
        description="the run directories of --out (default: out_dir of the settings): list "
                    "them, or prune them to the newest N complete runs (the keep_runs "
                    "setting does so each time a run is published)")
    verbs = runs.add_subparsers(dest="runs_command", metavar="VERB", required=True)
    for verb, text in (("list", "each run: name, complete or not, size; latest marked"),
                       ("prune", ("remove the oldest complete runs beyond --keep; never the "
                                  "one latest names, nor incomplete ones"))):
        cmd = verbs.add_parser(verb, help=text, description=text)
        cmd.add_argument("--out", metavar="DIR", default=None,
                         help="runs directory (default: out_dir of the settings, runs)")
        if verb == "prune":
            cmd.add_argument("--keep", type=int, required=True, metavar="N",
                             help="complete runs to keep, the newest (at least 1)")


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def runs(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `hogwild runs` command."""
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.outputs.artifacts import list_runs, prune

    root = args.out
    if root is None:
        root = config.load(config.default_config_path(environ), environ).out_dir
    if args.runs_command == "list":
        entries = list_runs(root)
        if not entries:
            print(f"no runs in {root}")
            return 0
        width = max(len(e.name) for e in entries)
        for e in entries:
            state = "complete" if e.complete else "incomplete"
            mark = "  latest" if e.latest else ""
            print(f"{e.name:<{width}}  {state:<10}  {_megabytes(e.size):>10}{mark}")
        total = sum(e.size for e in entries)
        print(f"{len(entries)} run(s), {_megabytes(total)} in {root}")
        return 0
    if args.keep < 1:
        raise UsageError(f"--keep must be at least 1, got {args.keep}")
    removed = prune(root, args.keep)
    names = ", ".join(p.name for p in removed)
    print(f"removed {len(removed)} run(s) from {root}" + (f": {names}" if names else ""))
    return 0
