"""The experiment's figures, drawn on bare Agg figures (no pyplot): speedup, test error and
training error against threads per trainer, CPU time per data size, mini-batch sizes,
regression and cluster workers. Each plot shows medians over repeats."""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hogwild.base import atomic
from hogwild.experiment.runner import MIN_TIMED_SECONDS, TOO_SHORT, Record, median

if TYPE_CHECKING:  # matplotlib itself is imported when a figure is drawn (start-up time)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Series = dict[str, list[tuple[float, float]]]
# Characters of a title line in a panel 5.2 inches wide at font size 10.
TITLE_CHARS = 60


def new_figure(ncols: int, width: float = 5.2, height: float = 3.9) -> Figure:
    """A bare Agg figure of ``ncols`` panels side by side, each ``width`` x ``height`` inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Constrained layout: wrapped titles, axis labels and legends get the room they need
    # instead of running off the edge or into the next panel.
    fig = Figure(figsize=(width * ncols, height), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def panel_title(ax: Axes, text: str) -> None:
    """A panel's title, wrapped to the panel's width (a long data path would run off it)."""
    ax.set_title(textwrap.fill(text, TITLE_CHARS), fontsize=10)


def epoch_axis(ax: Axes) -> None:
    """An epochs axis from epoch 0, the untrained model's place, whatever the first row is."""
    ax.set_xlabel("epochs")
    ax.set_xlim(left=0.0)


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return atomic.atomic_write_bytes(path, buffer.getvalue())


def _ok(records: Sequence[Record], study: str) -> list[Record]:
    return [r for r in records if study in r["studies"].split("+") and r["status"] == "ok"]


def _series(records: Sequence[Record], name: Callable[[Record], str], x: str,
            y: Callable[[Record], float | None]) -> Series:
    """Median of ``y`` per (series name, x), sorted by x; points without a value dropped."""
    cells: dict[str, dict[float, list[float | None]]] = {}
    for rec in records:
        cells.setdefault(name(rec), {}).setdefault(float(rec[x]), []).append(y(rec))
    out: Series = {}
    for key, by_x in cells.items():
        points = [(xv, m) for xv, ys in sorted(by_x.items()) if (m := median(ys)) is not None]
        if points:
            out[key] = points
    return out


def _trainer_name(rec: Record) -> str:
    if rec["workers"]:
        return f"cluster, {rec['threads']} thread(s) per worker"
    batch = f" (batch {rec['batch_size']})" if rec["batch_size"] > 1 else ""
    return f"{rec['trainer']}{batch}"


def _column(key: str) -> Callable[[Record], float | None]:
    """A record's value of ``key`` (None when missing)."""

    def get(rec: Record) -> float | None:
        value = rec.get(key)
        return None if value is None else float(value)

    return get


def _epoch_curve(recs: Sequence[Record], key: str) -> list[tuple[float, float]]:
    """Median over repeats of ``key`` at each epoch."""
    by_epoch: dict[int, list[float | None]] = {}
    for rec in recs:
        for row in rec["epoch_rows"]:
            by_epoch.setdefault(int(row["epoch"]), []).append(row.get(key))
    return [(float(e), m) for e, ys in sorted(by_epoch.items()) if (m := median(ys)) is not None]


def _threads_axis(ax: Axes, xs: Sequence[float], cores: int) -> None:
    """log2 thread axis with a tick per thread count; the oversubscribed side shaded."""
    ticks = sorted(set(xs))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{int(t)}" for t in ticks])
    ax.set_xlabel(f"threads ({cores} cores)")
    if ticks and ticks[-1] > cores:
        ax.axvspan(cores * 1.25, ticks[-1] * 1.25, color="0.9", zorder=0,
                   label="oversubscribed")
        ax.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)
    ax.grid(alpha=0.3)


def _natural(text: str) -> tuple[Any, ...]:
    """Sort key that orders the numbers inside labels by value ("10k" before "100k",
    "2 threads" before "16 threads")."""
    parts = re.split(r"(\d+)", text)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


def _palette(names: Iterable[str]) -> dict[str, str]:
    """One colour per series name, the same in every panel of a figure."""
    return {name: f"C{i % 10}" for i, name in enumerate(sorted(set(names), key=_natural))}


def _lines(ax: Axes, series: Series, palette: dict[str, str] | None = None,
           marker: str = "o") -> list[float]:
    xs: list[float] = []
    colours = palette if palette is not None else _palette(series)
    for name in sorted(series, key=_natural):
        pts = series[name]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, markersize=4,
                label=name, color=colours.get(name))
        xs += [p[0] for p in pts]
    return xs


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, frameon=False)


def _untimed_note(ax: Axes, recs: Sequence[Record]) -> None:
    """Say on a speedup panel that runs too short to time are left out (derive gave them no
    speedup, so the series above have no point for them)."""
    short = sum(r.get("timing", "ok") != "ok" for r in recs)
    if short:
        ax.text(0.02, 0.02, f"{short} run(s) not shown: {TOO_SHORT}\n(they or their serial "
                f"run trained under {MIN_TIMED_SECONDS * 1000:.0f} ms)", transform=ax.transAxes,
                fontsize=7, color="0.4")


def _speedup_panels(fig: Figure, recs: Sequence[Record], cores: int, what: str) -> None:
    palette = _palette(_trainer_name(r) for r in recs)
    for i, (key, label) in enumerate((("speedup", "fixed epochs"),
                                      ("speedup_to_target", "time to target validation loss"))):
        ax = fig.add_subplot(1, 2, i + 1)
        series = _series(recs, _trainer_name, "threads", _column(key))
        xs = _lines(ax, series, palette)
        if xs:
            top = [t for t in sorted(set(xs)) if t <= cores]
            ax.plot(top, top, color="0.5", linestyle=":", label="linear")
            _threads_axis(ax, xs, cores)
        ax.axhline(1.0, color="0.6", linewidth=0.8)
        ax.set_ylabel("speedup over serial SGD")
        panel_title(ax, f"{what}: {label}")
        _untimed_note(ax, recs)
        _legend(ax)


def plot_speedup(records: Sequence[Record], cores: int, path: Path) -> Path | None:
    """Speedup vs threads per trainer (HOGWILD! paper Fig. 2; COS 518 Fig. 1a)."""
    recs = _ok(records, "threads")
    if not recs:
        return None
    fig = new_figure(2)
    _speedup_panels(fig, recs, cores, recs[0]["data"])
    return _save(fig, path)


def plot_test_error(records: Sequence[Record], cores: int, path: Path) -> Path | None:
    """Test error vs threads per trainer (COS 518 Fig. 1b)."""
    recs = _ok(records, "threads")
    if not recs:
        return None
    fig = new_figure(1)
    ax = fig.add_subplot()
    xs = _lines(ax, _series(recs, _trainer_name, "threads", _column("test_error")))
    if xs:
        _threads_axis(ax, xs, cores)
    ax.set_ylabel("test error")
    panel_title(ax, f"{recs[0]['data']}: test error after {recs[0]['epochs']} epochs")
    _legend(ax)
    return _save(fig, path)


def _per_epoch_grid(fig: Figure, recs: Sequence[Record], key: str, ylabel: str,
                    panel_of: Callable[[Record], str],
                    line_of: Callable[[Record], str]) -> None:
    panels = sorted({panel_of(r) for r in recs}, key=_natural)
    palette = _palette(line_of(r) for r in recs)
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        mine = [r for r in recs if panel_of(r) == panel]
        for line in sorted({line_of(r) for r in mine}, key=_natural):
            pts = _epoch_curve([r for r in mine if line_of(r) == line], key)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                        label=line, color=palette[line])
        epoch_axis(ax)
        ax.set_ylabel(ylabel)
        panel_title(ax, panel)
        ax.grid(alpha=0.3)
        _legend(ax)


def _threads_label(rec: Record) -> str:
    over = " (oversubscribed)" if rec["oversubscribed"] else ""
    return f"{rec['threads']} thread{'s' if rec['threads'] > 1 else ''}{over}"


def plot_train_error(records: Sequence[Record], path: Path) -> Path | None:
    """Training error after each epoch: one panel per trainer, a line per thread count."""
    recs = _ok(records, "threads")
    if not recs:
        return None
    panels = len({_trainer_name(r) for r in recs})
    fig = new_figure(panels, width=4.2, height=3.6)
    _per_epoch_grid(fig, recs, "train_error", "training error", _trainer_name, _threads_label)
    return _save(fig, path)


def plot_cpu_time(records: Sequence[Record], cores: int, path: Path) -> Path | None:
    """CPU and wall seconds vs threads per data size, hogwild trainer (HOGWILD! Fig. 3)."""
    recs = [r for r in _ok(records, "size") if r["trainer"] in ("hogwild", "serial")]
    hog = [r for r in recs if r["trainer"] == "hogwild"]
    if not hog:
        return None
    fig = new_figure(2)
    for i, (key, label) in enumerate((("cpu_seconds", "CPU seconds"),
                                      ("wall_seconds", "wall seconds"))):
        ax = fig.add_subplot(1, 2, i + 1)
        series = _series(hog, lambda r: f"{r['data']} ({r['train_rows']:,} train rows)",
                         "threads", _column(key))
        xs = _lines(ax, series)
        if xs:
            _threads_axis(ax, xs, cores)
        ax.set_yscale("log")
        ax.set_ylabel(f"{label}, {hog[0]['epochs']} epochs")
        panel_title(ax, f"hogwild: {label} vs threads per data size")
        _legend(ax)
    return _save(fig, path)


def plot_batch(records: Sequence[Record], cores: int, path: Path) -> Path | None:
    """Mini-batch sizes (COS 518 Fig. 4): training error per epoch at the largest thread
    count that fits the cores, and wall time vs threads, per trainer and batch size."""
    recs = _ok(records, "batch")
    if not recs:
        return None
    fig = new_figure(2)
    fitting = [r["threads"] for r in recs if not r["oversubscribed"]]
    t_show = max(fitting) if fitting else min(r["threads"] for r in recs)
    palette = _palette(_trainer_name(r) for r in recs)
    ax = fig.add_subplot(1, 2, 1)
    shown = [r for r in recs if r["threads"] == t_show]
    for name in sorted({_trainer_name(r) for r in shown}, key=_natural):
        pts = _epoch_curve([r for r in shown if _trainer_name(r) == name], "train_error")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name,
                color=palette[name])
    epoch_axis(ax)
    ax.set_ylabel("training error")
    panel_title(ax, f"{recs[0]['data']}: training error, {t_show} thread(s)")
    ax.grid(alpha=0.3)
    _legend(ax)
    ax = fig.add_subplot(1, 2, 2)
    xs = _lines(ax, _series(recs, _trainer_name, "threads",
                            lambda r: r["wall_seconds"] / max(1, r["epochs_done"])), palette)
    if xs:
        _threads_axis(ax, xs, cores)
    ax.set_yscale("log")
    ax.set_ylabel("wall seconds per epoch")
    panel_title(ax, "time per epoch vs threads")
    _legend(ax)
    return _save(fig, path)


def plot_regression(records: Sequence[Record], cores: int, path: Path) -> Path | None:
    """Least squares (COS 518 Fig. 6): speedup vs threads per trainer and training RMSE per
    epoch at the largest thread count that fits the cores."""
    recs = _ok(records, "regression")
    if not recs:
        return None
    fig = new_figure(2)
    palette = _palette(_trainer_name(r) for r in recs)
    ax = fig.add_subplot(1, 2, 1)
    xs = _lines(ax, _series(recs, _trainer_name, "threads", _column("speedup")), palette)
    if xs:
        top = [t for t in sorted(set(xs)) if t <= cores]
        ax.plot(top, top, color="0.5", linestyle=":", label="linear")
        _threads_axis(ax, xs, cores)
    ax.axhline(1.0, color="0.6", linewidth=0.8)
    ax.set_ylabel("speedup over serial SGD")
    panel_title(ax, f"{recs[0]['data']} (squared loss): speedup")
    _untimed_note(ax, recs)
    _legend(ax)
    ax = fig.add_subplot(1, 2, 2)
    fitting = [r["threads"] for r in recs if not r["oversubscribed"]]
    t_show = max(fitting) if fitting else 1
    shown = [r for r in recs if r["threads"] == t_show or r["trainer"] == "serial"]
    for name in sorted({_trainer_name(r) for r in shown}, key=_natural):
        pts = _epoch_curve([r for r in shown if _trainer_name(r) == name], "train_rmse")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name,
                color=palette[name])
    epoch_axis(ax)
    ax.set_ylabel("training RMSE")
    ax.set_yscale("log")
    panel_title(ax, f"training RMSE per epoch, {t_show} thread(s)")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def plot_workers(records: Sequence[Record], path: Path) -> Path | None:
    """Cluster runs (`hogwild run`): training seconds and test error vs worker processes,
    with the in-process serial run on the same data as a reference line."""
    recs = _ok(records, "workers")
    if not recs:
        return None
    serial = [r for r in records if r["trainer"] == "serial" and r["status"] == "ok"
              and r["source"] == recs[0]["source"]]
    fig = new_figure(2)
    for i, (key, label) in enumerate((("wall_seconds", "training seconds"),
                                      ("test_error", "test error"))):
        ax = fig.add_subplot(1, 2, i + 1)
        xs = _lines(ax, _series(recs, _trainer_name, "workers", _column(key)))
        ref = median(r.get(key) for r in serial)
        if ref is not None:
            ax.axhline(ref, color="0.5", linestyle="--", label="serial, in process")
        ax.set_xticks(sorted(set(xs)))
        ax.set_xlabel("worker processes (hogwild run, loopback)")
        ax.set_ylabel(label)
        panel_title(ax, f"{recs[0]['data']}: {label} vs workers")
        ax.grid(alpha=0.3)
        _legend(ax)
    return _save(fig, path)


def draw_all(records: Sequence[Record], cores: int, plot_dir: Path) -> list[Path]:
    """Every figure that has data; returns the files written."""
    made = [
        plot_speedup(records, cores, plot_dir / "speedup.png"),
        plot_test_error(records, cores, plot_dir / "test_error.png"),
        plot_train_error(records, plot_dir / "train_error.png"),
        plot_cpu_time(records, cores, plot_dir / "cpu_time.png"),
        plot_batch(records, cores, plot_dir / "batch_size.png"),
        plot_regression(records, cores, plot_dir / "regression.png"),
        plot_workers(records, plot_dir / "workers.png"),
    ]
    return [p for p in made if p is not None]
