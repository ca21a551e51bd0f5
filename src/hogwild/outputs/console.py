"""What a command prints: verbosity, progress rows (columns, thinning, live ETA) and `done` line.

Every command's progress rows and result line are formatted here, nowhere else: quiet,
normal, verbose or --json; rows thinned out, with a live status line on a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hogwild.base.text import number

QUIET, NORMAL, VERBOSE = 0, 1, 2

# At normal verbosity a progress row is printed at the 1st, 2nd, 4th, 8th, ... evaluation
# and otherwise at most once per ROW_GAP seconds; the last row always.
ROW_GAP = 1.0
# The live status line (a terminal only) is redrawn at most this often.
LIVE_GAP = 0.2
CLEAR_LINE = "\r\033[K"


@dataclass(frozen=True)
class Verbosity:
    """The command line's choice: ``level`` (QUIET, NORMAL, VERBOSE) and ``as_json`` (the
    result as one JSON object on standard output, every human line on standard error)."""

    level: int = NORMAL
    as_json: bool = False


_current = Verbosity()


def use(verbosity: Verbosity) -> None:
    """Set this process's verbosity (the `hogwild` command line sets it for its command)."""
    global _current
    _current = verbosity


def current() -> Verbosity:
    """This process's verbosity (normal, unless the command line said otherwise)."""
    return _current


def _line(out: TextIO, text: str) -> None:
    """``text`` and its newline in one write: print() writes them apart, and a line of
    another thread (a log record, on the same stream) could land between the two."""
    out.write(text + "\n")
    out.flush()


class Console:
    """Where a command's human lines go, and which of them are printed."""

    def __init__(self, out: TextIO | None = None, verbosity: Verbosity | None = None) -> None:
        v = current() if verbosity is None else verbosity
        self.level = v.level
        self.as_json = v.as_json
        # Looked up now, not at import (a test may have replaced sys.stdout since); with
        # --json standard output is the result's alone.
        self.out = out if out is not None else sys.stderr if v.as_json else sys.stdout
        self._live: RowThrottle | None = None  # the rows whose live line may be showing

    def say(self, text: str, level: int = NORMAL) -> None:
        """A line printed at ``level`` and above (VERBOSE: only with -v)."""
        if self.level >= level:
            if self._live is not None:
                self._live.clear(self.out)
            _line(self.out, text)

    def result(self, text: str) -> None:
        """The final line: printed at every level, except -q with --json (the JSON object on
        standard output is the result then)."""
        if not (self.as_json and self.level <= QUIET):
            if self._live is not None:
                self._live.clear(self.out)
            _line(self.out, text)

    def json_result(self, metrics: Any) -> None:
        """With --json: ``metrics`` as one line of JSON on standard output (as metrics.json
        has them)."""
        if self.as_json:
            # deferred: base.atomic loads numpy, which `hogwild --help` does without
            from hogwild.base.atomic import dumps

            _line(sys.stdout, dumps(metrics))

    def rows(self) -> RowThrottle:
        """The filter of this command's progress rows; on a terminal at normal verbosity the
        rows held back show as one live status line (with the progress and an ETA)."""
        live = self.level == NORMAL and _is_terminal(self.out)
        return self.follow(RowThrottle(self.level, live=live))

    def follow(self, rows: RowThrottle) -> RowThrottle:
        """Erase ``rows``' live status line before each line printed here; returns ``rows``."""
        self._live = rows
        return rows


def _is_terminal(out: TextIO) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):  # closed, or not a real stream
        return False


def eta_text(done: float, elapsed: float) -> str:
    """"ETA 12s" for a run ``done`` (a fraction) of the way after ``elapsed`` seconds; empty
    when it cannot be told yet."""
    if not 0 < done < 1 or elapsed <= 0:
        return ""
    left = elapsed * (1 - done) / done
    if left >= 3600:
        return f"ETA {left / 3600:.1f}h"
    if left >= 60:
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"
    return f"ETA {left:.0f}s"


class RowThrottle:
    """Which progress rows to print: every one with -v, none with -q; else the 1st, 2nd,
    4th, 8th, ... and at most one per ``gap`` seconds in between, and always the last one
    and the best one (the row of the model saved). Every row still goes to metrics.jsonl:
    only printing is thinned. :attr:`held` is the last row's text when it was not printed,
    for the caller to print at the end.

    The best row so far (offered with ``best=True``) that was not printed is kept aside
    and printed just before the next row printed, or at the end: the rows stay in order,
    and the one whose model is saved is never thinned out (a run that said "saved the model
    of epoch 5" had printed no row of epoch 5). While the model keeps improving each row
    is the best one, so this prints no more rows than before."""

    def __init__(self, level: int = NORMAL, gap: float = ROW_GAP,
                 clock: Callable[[], float] = time.monotonic, live: bool = False) -> None:
        self.level = level
        self.gap = gap
        self.clock = clock
        # A terminal: a row held back is drawn over the last one (no newline), with the
        # progress and an ETA; cleared before anything else is printed.
        self.live = live
        self.began = clock()
        self._showing = False
        self._drawn_at: float | None = None
        self.seen = 0
        self.printed = 0
        self._last_printed: float | None = None
        self.held: str | None = None
        self._best: str | None = None  # the best row so far, when it was not printed

    def due(self) -> bool:
        """Whether the next row is to be printed (each row is asked about once, in order)."""
        self.seen += 1
        if self.level <= QUIET:
            return False
        now = self.clock()
        doubling = self.seen & (self.seen - 1) == 0  # 1, 2, 4, 8, ...
        if (self.level >= VERBOSE or doubling or self._last_printed is None
                or now - self._last_printed >= self.gap):
            self._last_printed = now
            return True
        return False

    def offer(self, text: str, out: TextIO, done: float | None = None,
              best: bool = False, due: bool = False) -> None:
        """Print the row ``text`` to ``out`` if it is due, else hold it as the latest (and
        on a terminal show it as the live line). ``done``: the fraction of the run's
        budget (epochs) trained, for the ETA; ``best``: this row's model is the best so far
        (the one to save if none beats it); ``due``: print it whatever the thinning says
        (but not with -q)."""
        if best:
            self._best = None  # an earlier best row is no longer the one to show
        if self.due() or (due and self.level > QUIET):
            self.clear(out)
            self._print_best(out)
            _line(out, text)
            self.printed += 1
            self.held = None
        elif self.level > QUIET:
            self.held = text
            if best:
                self._best = text
            if self.live:
                self._draw(text, out, done)

    def _print_best(self, out: TextIO) -> None:
        if self._best is not None:
            _line(out, self._best)
            self.printed += 1
            self._best = None

    def _draw(self, text: str, out: TextIO, done: float | None) -> None:
        now = self.clock()
        if self._drawn_at is not None and now - self._drawn_at < LIVE_GAP:
            return
        self._drawn_at = now
        tail = []
        if done is not None:
            tail.append(f"{100 * min(1.0, done):.0f}%")
            eta = eta_text(done, now - self.began)
            if eta:
                tail.append(eta)
        line = text.strip() + (f"  [{' '.join(tail)}]" if tail else "")
        out.write(CLEAR_LINE + line)
        out.flush()
        self._showing = True

    def clear(self, out: TextIO) -> None:
        """Erase the live line, if one is showing (before any other line is printed)."""
        if self._showing:
            out.write(CLEAR_LINE)
            out.flush()
            self._showing = False

    def flush(self, out: TextIO) -> None:
        """Print the best row and the last one if they were held back (the end of the run)."""
        self.clear(out)
        if self._best is not None and self._best is not self.held:
            self._print_best(out)
        self._best = None
        if self.held is not None:
            _line(out, self.held)
            self.printed += 1
            self.held = None


# ---------------------------------------------------------------- progress rows and done line


def duration(seconds: float) -> str:
    """A wall time for a progress line: 1.25s, or in milliseconds below 10 ms (3.4ms),
    where two decimals of a second would print 0.00s."""
    return f"{seconds:.2f}s" if seconds >= 0.01 else f"{seconds * 1e3:.2g}ms"


@dataclass(frozen=True)
class Column:
    """One column of progress rows: its title, its width (right-aligned) and its text for a
    row (a metrics.jsonl row: the same keys)."""

    title: str
    width: int
    text: Callable[[Mapping[str, Any]], str]


class RowFormat:
    """The header and rows of one command's progress table, from one list of columns."""

    def __init__(self, *columns: Column) -> None:
        self.columns = columns

    def header(self) -> str:
        return " ".join(c.title.rjust(c.width) for c in self.columns)

    def row(self, values: Mapping[str, Any]) -> str:
        return " ".join(c.text(values).rjust(c.width) for c in self.columns)


def _metric(key: str) -> Callable[[Mapping[str, Any]], str]:
    """The column of ``key``: its number, or a text the caller made of it (as it is)."""
    def text(row: Mapping[str, Any]) -> str:
        value = row.get(key)
        return value if isinstance(value, str) else number(value)
    return text


def _seconds(row: Mapping[str, Any]) -> str:
    return f"{number(row['elapsed'], 2)}s"


# `train`: one row per epoch (metrics.jsonl's rows: epoch, elapsed, train_loss, ...).
TRAIN_ROWS = RowFormat(
    Column("epoch", 5, lambda r: str(r["epoch"])),
    Column("elapsed", 8, _seconds),
    Column("train_loss", 10, _metric("train_loss")),
    Column("val_loss", 9, _metric("val_loss")),
    Column("val_acc", 8, _metric("val_accuracy")))

# `run` / `coordinator`: one row per periodic evaluation of the global model. deltas: the
# worker rounds whose deltas the model holds; MB_in: the delta bytes received so far;
# stale: the largest round gap between workers (see docs/guides/commands.md).
RUN_ROWS = RowFormat(
    Column("elapsed", 8, _seconds),
    Column("round", 6, lambda r: str(r["round"])),
    Column("examples", 10, lambda r: str(r["examples"])),
    Column("epochs", 7, lambda r: f"{r['epochs']:.2f}"),
    Column("val_loss", 9, _metric("val_loss")),
    Column("val_acc", 8, _metric("val_accuracy")),
    Column("deltas", 7, lambda r: str(r["delta_rounds"])),
    Column("MB_in", 8, lambda r: f"{r['bytes_received'] / 1e6:.2f}"),
    Column("stale", 5, lambda r: str(r["max_staleness"])))

# `simulate`: rows of the simulated run (epoch fractions, simulated milliseconds).
SIMULATE_ROWS = RowFormat(
    Column("epoch", 6, lambda r: f"{r['epoch']:.2f}"),
    Column("sim_ms", 9, lambda r: f"{r['elapsed'] * 1e3:.2f}"),
    Column("train_loss", 10, _metric("train_loss")),
    Column("val_loss", 9, _metric("val_loss")),
    Column("val_acc", 8, _metric("val_accuracy")))


@dataclass
class DoneLine:
    """A run's last line: ``done (REASON): CLAUSES; CLAUSES; ...; outputs in DIR``.

    Clauses are kept in named groups (the order they were first added in), the clauses of
    a group joined by ", ", the groups by "; ". A new figure is one more ``add``: to a group
    of its own, or to the group it belongs with."""

    reason: str | None = None
    groups: dict[str, list[str]] = field(default_factory=dict)

    def add(self, group: str, clause: str) -> DoneLine:
        self.groups.setdefault(group, []).append(clause)
        return self

    def text(self, outputs: str | Path) -> str:
        head = "done" if self.reason is None else f"done ({self.reason})"
        body = "; ".join(", ".join(clauses) for clauses in self.groups.values() if clauses)
        return f"{head}: {body}; outputs in {outputs}"


def _of_epoch(epochs: float, saved_epoch: float | None, digits: int | None) -> str:
    """`` (model of epoch E)`` when the weights saved are not the last epoch's."""
    if saved_epoch is None or saved_epoch == epochs:
        return ""
    text = str(saved_epoch) if digits is None else f"{saved_epoch:.{digits}f}"
    return f" (model of epoch {text})"


def train_done(reason: str, epochs: int, saved_epoch: int, seconds: float, test_loss: float,
               test_accuracy: float | None) -> DoneLine:
    """`train`'s done line (in memory or out of core)."""
    return (DoneLine(reason)
            .add("training", f"{epochs} epochs{_of_epoch(epochs, saved_epoch, None)} in "
                             f"{duration(seconds)}")
            .add("training", f"test loss {number(test_loss)}")
            .add("training", f"test accuracy {number(test_accuracy)}"))


def run_done(reason: str, epochs: float, saved_epoch: float | None, rounds: int,
             seconds: float, workers: int, mode: str, test_loss: float,
             test_accuracy: float | None, deltas: int, bytes_received: int) -> DoneLine:
    """`run`'s and the coordinator's done line."""
    return (DoneLine(reason)
            .add("training", f"{epochs:.2f} epochs{_of_epoch(epochs, saved_epoch, 2)}")
            .add("training", f"{rounds} rounds in {seconds:.2f}s with {workers} worker(s) "
                             f"({mode})")
            .add("test", f"test loss {number(test_loss)}")
            .add("test", f"test accuracy {number(test_accuracy)}")
            .add("traffic", f"{deltas} deltas")
            .add("traffic", f"{bytes_received / 1e6:.1f} MB received"))


def simulate_done(rounds: int, simulated: float, wall: float, messages: int, nbytes: int,
                  max_staleness: int, test_accuracy: float | None,
                  final_test_accuracy: float | None, speedup: float,
                  one_worker_seconds: float, shares: Mapping[str, float]) -> DoneLine:
    """`simulate`'s done line (a simulation has no stop reason of its own): what it did,
    the test accuracy, the speed-up against one worker and where the workers' time went."""
    acc = ("-" if test_accuracy is None else f"{number(test_accuracy)} (best validated model; "
           f"the last one {number(final_test_accuracy)})")
    # (3 significant digits: a run of many workers on little data is thousands of times
    # slower than one, and one worker's time on a small set is a fraction of a millisecond)
    return (DoneLine()
            .add("training", f"{rounds} rounds in {simulated:.3g} simulated s "
                             f"({wall:.2f}s here)")
            .add("training", f"{messages} messages")
            .add("training", f"{nbytes / 1e6:.1f} MB")
            .add("training", f"max staleness {max_staleness}")
            .add("test", f"test accuracy {acc}")
            .add("scale", f"{speedup:.3g}x one worker's time for the same epochs "
                          f"({one_worker_seconds:.3g} s)")
            .add("scale", f"worker time {shares['training']:.0%} training, "
                          f"{shares['waiting']:.0%} waiting, their senders busy "
                          f"{shares['sending']:.0%}"))


def train_saved_line(epoch: int, loss: float, accuracy: float | None) -> str:
    """`train`'s line when the model saved is not the last epoch's."""
    kept = ("validation loss " if accuracy is None
            else f"validation accuracy {number(accuracy)}, loss ")
    return f"saved the model of epoch {epoch}, the best validated one ({kept}{number(loss)})"


def run_saved_line(saved: Mapping[str, Any], last: Mapping[str, Any]) -> str:
    """`run`'s line when the model saved is not the closing evaluation's (metrics.jsonl rows)."""
    def scores(r: Mapping[str, Any]) -> str:
        acc_part = ("" if r["val_accuracy"] is None
                    else f"validation accuracy {number(r['val_accuracy'])}, ")
        return f"{acc_part}validation loss {number(r['val_loss'])}"

    return (f"saved the best validated model, from round {saved['round']} (epoch "
            f"{saved['epochs']:.2f}, {scores(saved)}) rather than the last one "
            f"({scores(last)})")
