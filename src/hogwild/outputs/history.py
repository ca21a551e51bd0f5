"""A run's evaluations: each appended to metrics.jsonl as it is made; a bounded copy in memory."""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hogwild.base import atomic
from hogwild.outputs import artifacts

log = logging.getLogger("hogwild.outputs.history")

# Rows kept in memory for the loss plot: evenly spaced over the whole run. A plot of 4,096
# points is as legible as one of a million, and a coordinator running for days at the default
# eval_interval (0.25 s) makes about a million rows (0.5 KB each: 500 MB if all were kept), as
# does `hogwild train` of a million short epochs.
PLOT_ROWS = 4096
# Rows kept while metrics.jsonl cannot be appended to (a full disk): at 0.25 s an evaluation,
# about 80 minutes of them. Past that the oldest are dropped, counted and said.
PENDING_ROWS = 20_000


class Thinned:
    """Every row counted; at most ``cap`` of them kept, evenly spaced (every ``stride``-th,
    the stride doubling whenever the copy is full), plus always the newest."""

    def __init__(self, cap: int = PLOT_ROWS) -> None:
        if cap < 2:
            raise ValueError("cap must be at least 2")
        self.cap = cap
        self.count = 0
        self.stride = 1
        self._kept: list[dict[str, Any]] = []
        self._last: dict[str, Any] | None = None
        self.best_val_loss: float | None = None

    def add(self, row: Mapping[str, Any]) -> None:
        row = dict(row)
        if self.count % self.stride == 0:
            self._kept.append(row)
            if len(self._kept) > self.cap:
                # Rows 0, 2s, 4s, ... stay: the same rows a stride of 2s would have kept.
                self._kept = self._kept[::2]
                self.stride *= 2
        self.count += 1
        self._last = row
        loss = row.get("val_loss")
        if isinstance(loss, (int, float)) and math.isfinite(loss) and (
                self.best_val_loss is None or loss < self.best_val_loss):
            self.best_val_loss = float(loss)

    def rows(self) -> list[dict[str, Any]]:
        """The rows kept, oldest first, ending with the newest row."""
        if self._last is None or (self._kept and self._kept[-1] is self._last):
            return list(self._kept)
        return [*self._kept, self._last]


@dataclass
class ReadBack:
    """The evaluations a checkpoint's ``metrics.jsonl`` held: the thinned rows, and where
    they end in the file (``end``, bytes), or, from a version-1 checkpoint that carried
    them, ``inline`` (the file is rewritten from them)."""

    rows: Thinned = field(default_factory=Thinned)
    end: int = 0
    inline: list[dict[str, Any]] | None = None

    @property
    def count(self) -> int:
        return self.rows.count

    @classmethod
    def of_rows(cls, rows: Iterable[Mapping[str, Any]]) -> ReadBack:
        thinned = Thinned()
        inline = [dict(row) for row in rows]
        for row in inline:
            thinned.add(row)
        return cls(rows=thinned, inline=inline)


def read_back(path: Path, rows: int, accept: Callable[[Any], bool]) -> tuple[ReadBack, str]:
    """The first ``rows`` lines of ``path`` that ``accept`` takes, stopping at the first it
    does not (so those rows are a prefix of the file), and why it stopped early ("" if not)."""
    got = ReadBack()
    problem = ""
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if got.count == rows:
                    break
                if not line.endswith(b"\n"):  # a row cut short, or one more would join it
                    problem = f"line {number} is cut short"
                    break
                try:
                    row = json.loads(line)
                except ValueError:
                    problem = f"line {number} is not JSON"
                    break
                if not accept(row):
                    problem = f"line {number} is not an evaluation of this run"
                    break
                got.rows.add(row)
                got.end += len(line)
    except OSError as exc:
        problem = f"cannot read it: {exc.strerror or exc}"
    if got.count < rows and not problem:
        problem = "the file ends early"
    return got, problem


class EvalHistory:
    """The run's evaluations as they are made: each one is appended to ``metrics.jsonl`` in
    ``out_dir`` (the run's own directory, see artifacts.RunDir), so a run that dies keeps
    them, and memory holds only a thinned copy for the plot, the count and the best
    validation loss, so it does not grow with the run.

    A failed append (a full disk) costs no training: the row waits, with any later ones, and
    they are all written at the next row or :meth:`catch_up` that can, after the file is cut
    back to its last whole row. At most ``pending_limit`` rows wait; older ones are dropped,
    and said.
    """

    def __init__(self, out_dir: str | Path, cap: int = PLOT_ROWS,
                 pending_limit: int = PENDING_ROWS) -> None:
        self.path = Path(out_dir) / artifacts.HISTORY_FILE
        self.rows = Thinned(cap)
        self.pending_limit = pending_limit
        self.written = 0           # rows in the file
        self.lost = 0              # rows dropped while the file could not be written
        self.error: OSError | None = None  # the last failure, None once the file is whole
        self._pending: deque[str] = deque()
        self._good = 0             # bytes of the file up to its last whole row

    @property
    def count(self) -> int:
        """Every evaluation of the run, a resumed run's earlier ones included."""
        return self.rows.count

    @property
    def waiting(self) -> int:
        """Rows not in the file yet (it could not be written)."""
        return len(self._pending)

    def begin(self, resumed: ReadBack | None = None) -> None:
        """Start the file: empty, or holding a resumed run's rows (cut after the last row the
        checkpoint counted); OSError if it cannot be written."""
        if resumed is None:
            atomic.atomic_write_text(self.path, "")
            self._good = 0
        elif resumed.inline is not None:
            text = "".join(atomic.dumps(dict(row)) + "\n" for row in resumed.inline)
            self._good = atomic.atomic_write_text(self.path, text).stat().st_size
        else:
            with open(self.path, "ab") as handle:
                if handle.seek(0, 2) > resumed.end:  # rows after the checkpoint's go
                    handle.truncate(resumed.end)
            self._good = resumed.end
        if resumed is not None:
            self.rows = resumed.rows
            self.written = resumed.count

    def add(self, row: Mapping[str, Any]) -> None:
        """Count and keep ``row``, and append it to the file (or leave it waiting)."""
        self.rows.add(row)
        self._pending.append(atomic.dumps(dict(row)) + "\n")
        if len(self._pending) > self.pending_limit:
            self._pending.popleft()
            self.lost += 1
            if self.lost == 1:
                log.warning("%s: more than %d evaluations wait to be written; the oldest are "
                            "dropped from the file from now on (counted in the log when it is "
                            "written again)", self.path, self.pending_limit)
        self._write()

    def write_all(self) -> None:
        """Write the rows that wait, if any; the OSError of the last attempt if they still
        cannot be written."""
        if not self.catch_up():
            assert self.error is not None
            raise self.error

    def catch_up(self) -> bool:
        """Write the rows that wait, if any; True if the file then holds every row kept."""
        if self._pending:
            self._write()
        return not self._pending

    def _write(self) -> None:
        was_behind = self.error is not None
        try:
            with open(self.path, "ab") as handle:
                # A row a failure cut short must not stay in the file. (A file shorter than
                # that, recreated meanwhile, is appended to: never padded.)
                if was_behind and handle.seek(0, 2) > self._good:
                    handle.truncate(self._good)
                handle.write("".join(self._pending).encode("utf-8"))
                handle.flush()
                self._good = handle.tell()
        except OSError as exc:
            if not was_behind:
                log.warning("cannot add to %s (%s): training goes on; the rows wait in memory "
                            "and are written as soon as there is room", self.path,
                            exc.strerror or exc)
            self.error = exc
            return
        self.written += len(self._pending)
        self._pending.clear()
        self.error = None
        if was_behind:
            lost = f", {self.lost} evaluations dropped meanwhile" if self.lost else ""
            log.info("%s is whole again (%d rows%s)", self.path.name, self.written, lost)
