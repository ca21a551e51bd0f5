"""What every command shares: -q / -v / --json and the log set-up."""

from __future__ import annotations

import argparse
import logging
import sys

from hogwild.outputs import console

# Commands whose result --json prints as one object on standard output.
_JSON_RESULT = ("train", "run", "coordinator", "predict", "eval")


def add_output_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """-q / -v (and --json where the command has one result to print)."""
    group = parser.add_argument_group("output")
    level = group.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true",
                       help="print only errors and the final result line")
    level.add_argument("-v", "--verbose", action="store_true",
                       help="print every progress row and debug logs")
    if command in _JSON_RESULT and command != "eval":  # eval's --json is documented with it
        what = ("the run's metrics (as metrics.json has them)" if command != "predict"
                else "the summary (rows, metrics); needs --out for the predictions")
        group.add_argument("--json", action="store_true",
                           help=f"print {what} as one JSON object on standard output; "
                                "human lines go to standard error")


def add_positional_or_flag(parser: argparse.ArgumentParser, dest: str, flag: str,
                           metavar: str, help: str) -> None:
    """``dest`` given either as a positional argument or as ``flag VALUE`` (the spelling of
    the commands that take it among other flags). The command's parser (hogwild.cli's
    subcommand parser, which keeps an ``either`` list) requires exactly one of the two, and
    leaves the value in ``dest``."""
    parser.add_argument(dest, nargs="?", metavar=metavar, help=f"{help} (or {flag} {metavar})")
    parser.add_argument(flag, dest=f"{dest}_flag", metavar=metavar, help=f"the same as {metavar}")
    either: list[tuple[str, str, str]] = getattr(parser, "either")  # noqa: B009
    either.append((dest, flag, metavar))


def verbosity_of(args: argparse.Namespace) -> console.Verbosity:
    """The command line's -q / -v / --json (normal, no JSON, for commands without them)."""
    level = (console.QUIET if getattr(args, "quiet", False)
             else console.VERBOSE if getattr(args, "verbose", False) else console.NORMAL)
    return console.Verbosity(level, bool(getattr(args, "json", False)))


def setup_logging(level: str) -> None:
    """Log lines at ``level`` and above to standard error."""
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
