"""How much a command prints (quiet, normal, verbose, --json), progress rows thinned out, and
a live status line (progress and ETA) on a terminal."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

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


# Beyond this magnitude a number is printed in scientific notation: a fixed-point loss of
# 1e300 is a 300-digit row.
FIXED_BELOW = 1e5


def number(value: float | None, digits: int = 4) -> str:
    """A float for a human line: ``digits`` decimals while short (0.0312), scientific beyond
    FIXED_BELOW (1.235e+300), ``nan`` / ``inf`` as such, ``-`` for None."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(float(value))
    if abs(value) >= FIXED_BELOW:
        return f"{value:.{max(digits - 1, 1)}e}"
    return f"{value:.{digits}f}"


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
            from hogwild.outputs.artifacts import dumps

            _line(sys.stdout, dumps(metrics))

    def rows(self) -> RowThrottle:
        """The filter of this command's progress rows; on a terminal at normal verbosity the
        rows held back show as one live status line (with the progress and an ETA)."""
        live = self.level == NORMAL and _is_terminal(self.out)
        self._live = RowThrottle(self.level, live=live)
        return self._live


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
    4th, 8th, ... and at most one per ``gap`` seconds in between. Every row still goes to
    metrics.jsonl: only printing is thinned. :attr:`held` is the last row's text when it
    was not printed, for the caller to print at the end (the last row is always shown)."""

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

    def offer(self, text: str, out: TextIO, done: float | None = None) -> None:
        """Print the row ``text`` to ``out`` if it is due, else hold it as the latest (and
        on a terminal show it as the live line). ``done``: the fraction of the run's
        budget (epochs) trained, for the ETA."""
        if self.due():
            self.clear(out)
            _line(out, text)
            self.printed += 1
            self.held = None
        elif self.level > QUIET:
            self.held = text
            if self.live:
                self._draw(text, out, done)

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
        """Print the last row if it was held back (the end of the run)."""
        self.clear(out)
        if self.held is not None:
            _line(out, self.held)
            self.printed += 1
            self.held = None
