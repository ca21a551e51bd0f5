"""The loss plot drawn by a helper process, so that importing matplotlib never delays a job.

A job starts the helper first thing (``BackgroundPlot()``): it imports matplotlib on the
other core while the job loads its data, then waits for one JSON request on stdin
(``{"out_dir", "rows", "title"}``), draws ``loss.png`` atomically, says ``drawn`` on stdout
and exits. ``finish`` hands it the history and waits for it; if the helper cannot be started
or does not say it drew, the plot is drawn in-process instead, so the outputs are the same
either way. The helper is started with ``subprocess`` (fork + exec), which is safe after
gRPC has started.

A helper may be handed to a forked child (`hogwild run` starts the coordinator's before it
forks the coordinator): the child then talks to a process that is not its own, whose exit
status it cannot read, which is why success is the helper's word on stdout, not its exit
code; the starting process closes its ends of the pipes (:meth:`handed_over`) and reaps it
(:meth:`reap`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hogwild.base.atomic import atomic_write_bytes, dumps
from hogwild.base.startup import end_process, import_long_lived, single_blas_thread
from hogwild.outputs.artifacts import PLOT_FILE

if TYPE_CHECKING:  # matplotlib itself is imported when a figure is drawn (start-up time)
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

WAIT_SECONDS = 30.0
DRAWN = b"drawn"


class BackgroundPlot:
    """A helper process ready to draw the loss plot."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        """``env``: the helper's environment (default: this process's)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._drawing: threading.Thread | None = None
        self._request = b""
        self._failure: object = None  # why the helper did not draw the plot, if it did not
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hogwild.outputs.plotter"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=None if env is None else dict(env))
        except OSError as exc:
            log.debug("no plot helper (%s): the plot will be drawn in-process", exc)

    @property
    def helper(self) -> subprocess.Popen[bytes] | None:
        """The helper process (None: none started, or closed), for a caller that watches
        it: its pid, whether it still runs."""
        return self._proc

    def start(self, out_dir: str | Path, rows: Sequence[Mapping[str, Any]],
              title: str = "", saved: float | None = None) -> None:
        """Hand the helper the final history now: it draws while this process goes on with
        its other outputs; ``finish`` with the same arguments then waits for the file."""
        proc = self._proc
        if proc is None or self._drawing is not None:
            return
        self._request = _request(out_dir, rows, title, saved)
        self._drawing = threading.Thread(target=self._talk, args=(proc, self._request),
                                         name="plot", daemon=True)
        self._drawing.start()

    def _talk(self, proc: subprocess.Popen[bytes], request: bytes) -> None:
        try:
            said, err = proc.communicate(request, timeout=WAIT_SECONDS)
            if said.strip() != DRAWN:
                self._failure = (err.decode(errors="replace").strip().splitlines()[-1:]
                                 or f"exit code {proc.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            proc.kill()
            proc.wait()
            self._failure = exc

    def finish(self, out_dir: str | Path, rows: Sequence[Mapping[str, Any]],
               title: str = "", saved: float | None = None) -> Path:
        """Have ``loss.png`` drawn in ``out_dir``; returns its path once it is written.
        ``saved``: the epoch of the model saved, marked on the plot."""
        self.start(out_dir, rows, title, saved)
        drawing, self._drawing = self._drawing, None
        self._proc = None
        if drawing is not None:
            drawing.join()
            if self._failure is None and self._request == _request(out_dir, rows, title,
                                                                   saved):
                return Path(out_dir) / "loss.png"
            if self._failure is not None:
                log.warning("plot helper failed (%s); drawing in-process", self._failure)
        return plot_loss(out_dir, rows, title=title, saved=saved)

    def close(self) -> None:
        """Stop the helper if it was never used (e.g. the job failed)."""
        proc, self._proc = self._proc, None
        drawing, self._drawing = self._drawing, None
        if proc is not None and drawing is not None:  # its thread reaps it and its pipes
            proc.kill()
            drawing.join()
        elif proc is not None:
            proc.kill()
            proc.wait()
            _close_pipes(proc)

    def handed_over(self) -> None:
        """A forked child took this helper over: close this process's ends of its pipes (the
        helper's stdin must reach its end when the child closes it) and leave the talking to
        the child; :meth:`reap` collects the helper's exit later."""
        if self._proc is not None:
            _close_pipes(self._proc)

    def reap(self, grace: float = 5.0) -> None:
        """After the child that took this helper over has ended: collect the helper, killing
        it if it is still there after ``grace`` seconds (the child died while it drew)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _request(out_dir: str | Path, rows: Sequence[Mapping[str, Any]], title: str,
             saved: float | None) -> bytes:
    return dumps({"out_dir": str(Path(out_dir)), "rows": list(rows), "title": title,
                  "saved": saved}).encode()


# Characters of a title line at the plot's width and font: longer titles are wrapped, not
# cut at the figure's edge.
TITLE_WIDTH = 70
# The accuracy axis spans at least this much (and the losses' starts at 0): the last points of
# a run differing in the fourth decimal are not drawn as a cliff.
MIN_ACCURACY_SPAN = 0.05
# The first loss point more than this many times the highest trained one is drawn at the top
# edge of an axis fitted to the trained ones (see loss_limit).
CLIP_FACTOR = 1.5


def epoch_of(row: Mapping[str, Any]) -> float | None:
    """A row's place in epochs: `run`'s fractional ``epochs``, `train`'s ``epoch``."""
    value = row.get("epochs", row.get("epoch"))
    return float(value) if isinstance(value, (int, float)) else None


def accuracy_limits(values: Sequence[float]) -> tuple[float, float]:
    """The accuracy axis: the values' range padded by a tenth, at least MIN_ACCURACY_SPAN
    wide (centred on them), kept within [0, 1] where the values are."""
    lo, hi = min(values), max(values)
    span = max(hi - lo, MIN_ACCURACY_SPAN)
    mid = (lo + hi) / 2
    lo, hi = mid - 0.55 * span, mid + 0.55 * span
    if hi > 1.0 >= max(values):
        lo, hi = lo - (hi - 1.0), 1.0
    if lo < 0.0 <= min(values):
        lo, hi = 0.0, hi - lo
    return lo, hi


def loss_limit(first: float | None, rest: Sequence[float]) -> float | None:
    """The top of the loss axis when the first point (epoch 0: the model before training)
    would squash the trained ones into the bottom of the plot; None to show every point.

    An untrained model's loss (1.0 for the hinge, 0.69 for the logistic) is often ten times
    a trained one's: on one linear axis the curve that matters took the bottom tenth. A log
    axis would keep every point but reads badly near the small differences that matter at
    the end of a run and turns the linear plot's honest zero into an arbitrary floor; so the
    axis spans the trained points and the first one is drawn at the top edge, its value
    written beside it."""
    if first is None or not rest:
        return None
    top = max(rest)
    if top <= 0 or first <= CLIP_FACTOR * top:
        return None
    return 1.1 * top


def loss_figure(rows: Sequence[Mapping[str, Any]], title: str = "",
                saved: float | None = None) -> Figure:
    """The loss plot as a bare Agg figure: validation and training loss (left axis) and
    validation accuracy (right axis) against epochs, from epoch 0 (the model before training)
    on; against elapsed seconds only for rows that give no epoch. Only measured points are
    drawn, each with a marker, and joined only to a neighbouring row that measured the same
    value (a row without one breaks the line: a straight line across it claimed points that
    were never measured). The loss axis spans the trained points (see loss_limit).
    ``saved``: the epoch of the model saved, a dotted vertical line."""
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Constrained layout makes room for the wrapped title, the right axis's label and the
    # legend below, whatever their sizes (fixed margins cut them).
    fig = Figure(figsize=(7, 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    by_epoch = any(epoch_of(r) is not None for r in rows)

    def x_of(row: Mapping[str, Any]) -> float | None:
        value = epoch_of(row) if by_epoch else row.get("elapsed")
        return float(value) if isinstance(value, (int, float)) else None

    def points(key: str) -> list[tuple[float, float]]:
        return [(x, float(r[key])) for r in rows
                if (x := x_of(r)) is not None and isinstance(r.get(key), (int, float))]

    def gapped(key: str) -> tuple[list[float], list[float]]:
        """Every row's x and value from the first measured one to the last, NaN where a row
        has none (matplotlib breaks the line there)."""
        xs, ys = [], []
        for r in rows:
            x, value = x_of(r), r.get(key)
            if x is not None:
                xs.append(x)
                ys.append(float(value) if isinstance(value, (int, float)) else math.nan)
        kept = [i for i, y in enumerate(ys) if not math.isnan(y)]
        return xs[kept[0]:kept[-1] + 1], ys[kept[0]:kept[-1] + 1]

    # The model before training: the first row, at epoch 0 (or before any example).
    start = rows[0] if rows and (x_of(rows[0]) == 0 or rows[0].get("examples") == 0) else None
    firsts: list[tuple[float, float, Any]] = []   # the untrained model's points
    rest: list[float] = []
    for key, label in (("val_loss", "validation loss"), ("train_loss", "training loss")):
        if pts := points(key):
            line, = ax.plot(*gapped(key), marker="o", markersize=3, label=label)
            measured_at_start = start is not None and isinstance(start.get(key), (int, float))
            if measured_at_start:
                firsts.append((*pts[0], line.get_color()))
            rest.extend(y for _, y in pts[1 if measured_at_start else 0:])
    if ax.lines:
        ax.set_ylim(bottom=0.0)  # every loss here is at least 0
        top = loss_limit(max((y for _, y, _ in firsts), default=None), rest)
        if top is not None:
            ax.set_ylim(0.0, top)
            for x0, y0, color in firsts:
                if y0 > top:  # drawn at the edge, its value beside it
                    ax.plot([x0], [top], marker="^", markersize=6, color=color, clip_on=False)
                    ax.annotate(f"epoch 0: {y0:.3g}", (x0, top), xytext=(8, -12),
                                textcoords="offset points", fontsize=8, color=color)
    if acc := points("val_accuracy"):
        ax2 = ax.twinx()
        xs, ys = zip(*acc)
        # Markers as on the losses: a single evaluation is a point, not an invisible line.
        ax2.plot(xs, ys, color="tab:green", linestyle="--", marker="s", markersize=3,
                 label="validation accuracy")
        ax2.set_ylim(*accuracy_limits(ys))
        ax2.set_ylabel("validation accuracy")
    if saved is not None:
        ax.axvline(float(saved), color="0.4", linestyle=":", linewidth=1.2,
                   label=f"model saved (epoch {saved:.3g})")
    xs_all = [x for r in rows if (x := x_of(r)) is not None]
    if xs_all:  # from epoch 0 (or the first point before it), with room for the markers
        lo, hi = min(0.0, *xs_all), max(xs_all)
        hi = hi if hi > lo else lo + 1.0
        ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))
    ax.set_xlabel("epochs" if by_epoch else "elapsed seconds")
    ax.set_ylabel("loss")
    text = title or ("loss vs epochs" if by_epoch else "loss vs time")
    ax.set_title(textwrap.fill(text, TITLE_WIDTH), fontsize=10)
    ax.grid(alpha=0.3)
    # One legend for both axes, under the plot, where it cannot hide a curve.
    handles = [h for a in fig.axes for h in a.get_legend_handles_labels()[0]]
    if handles:
        # (two columns beyond three entries: four in a row overran the figure's width)
        fig.legend(handles=handles, loc="outside lower center",
                   ncol=len(handles) if len(handles) <= 3 else 2,
                   frameon=False)
    return fig


def plot_loss(out_dir: str | Path, rows: Sequence[Mapping[str, Any]], title: str = "",
              saved: float | None = None) -> Path:
    """``loss.png``: validation and training loss, and validation accuracy, against epochs,
    the saved model's epoch marked (see hogwild.outputs.plotter.loss_figure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image  # matplotlib's own PNG writer

    fig = loss_figure(rows, title, saved)
    # The canvas drawn once and its pixels encoded here: ``savefig`` draws the figure a
    # second time for the file (8-10 ms of the helper's 50-60 ms, the same pixels).
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]
    pixels = canvas.buffer_rgba()  # type: ignore[no-untyped-call]
    image = Image.frombuffer("RGBA", canvas.get_width_height(), pixels, "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    # zlib level 1: the same pixels, a file a little larger, encoded in a third of the time.
    image.save(buffer, format="png", compress_level=1, dpi=(fig.dpi, fig.dpi))
    return atomic_write_bytes(Path(out_dir) / PLOT_FILE, buffer.getvalue())


def main() -> int:
    """The helper: import matplotlib now, then draw what stdin asks for."""
    single_blas_thread()  # before matplotlib imports numpy

    # The job's own start-up (its imports, its data) is what the user waits for: this
    # helper takes the CPU that is left over, and has most of a run to finish its import.
    with contextlib.suppress(OSError):
        os.nice(10)

    import_long_lived("matplotlib.backends.backend_agg", "matplotlib.figure")

    raw = sys.stdin.buffer.read()
    if not raw:
        return 0  # the job ended without a plot
    request = json.loads(raw)
    plot_loss(request["out_dir"], request["rows"], title=request.get("title", ""),
              saved=request.get("saved"))
    sys.stdout.buffer.write(DRAWN + b"\n")
    # The job waits for this process to end (its pipes to close), and nothing is left to do:
    # the file is written and renamed. The interpreter's teardown of matplotlib's objects
    # took another 13-19 ms; skip it.
    end_process(0)


if __name__ == "__main__":
    sys.exit(main())

