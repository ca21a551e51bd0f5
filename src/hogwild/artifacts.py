"""Run outputs written atomically (model, metrics, loss plot); one writer per output directory."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import logging
import math
import os
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from hogwild.errors import ConfigError, OutputError

log = logging.getLogger("hogwild")

MODEL_FILE = "model.npz"
MODEL_META_FILE = "model.json"
METRICS_FILE = "metrics.json"
HISTORY_FILE = "metrics.jsonl"
TRACE_FILE = "trace.jsonl"
PLOT_FILE = "loss.png"
PROBE_PREFIX = ".hogwild-write-probe-"
LOCK_FILE = ".hogwild.lock"


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` only when the block ends without an error
    (temp file in the same directory, fsync, rename); on an error nothing is left behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes 0600 files; give the result the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file + rename: readers never see half a file."""
    with atomic_open(path) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def dumps(value: Any, indent: int | None = None) -> str:
    """JSON text that also accepts numpy scalars/arrays and paths. A number that is not
    finite (a loss that overflowed, a metric not measured) is written as null: JSON has no
    Infinity or NaN, and strict readers (jq, JavaScript, most languages' parsers) refuse
    the whole file over one."""
    try:
        return json.dumps(value, default=_json_default, sort_keys=True, indent=indent,
                          allow_nan=False)
    except ValueError:  # rare: only then is the value walked
        return json.dumps(_finite(value), default=_json_default, sort_keys=True,
                          indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite number replaced by None (numpy values as Python's)."""
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.tolist()  # a numpy scalar's tolist() is its Python value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def save_weights(path: str | Path, w: np.ndarray) -> Path:
    """A weight vector as an ``.npz`` with one array ``w`` (float64), written atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, w=np.asarray(w, dtype=np.float64))
    return atomic_write_bytes(path, buffer.getvalue())


def save_model(out_dir: str | Path, w: np.ndarray, meta: Mapping[str, Any]) -> Path:
    """Write ``model.npz`` (weights; ``w[-1]`` is the bias) and ``model.json`` (metadata)."""
    out = Path(out_dir)
    path = save_weights(out / MODEL_FILE, w)
    atomic_write_text(out / MODEL_META_FILE, dumps(dict(meta), indent=2) + "\n")
    return path


def load_model(out_dir: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """The weights and metadata written by :func:`save_model`."""
    out = Path(out_dir)
    with np.load(out / MODEL_FILE) as archive:
        w = np.array(archive["w"])
    meta = json.loads((out / MODEL_META_FILE).read_text(encoding="utf-8"))
    return w, meta


def write_metrics(out_dir: str | Path, metrics: Mapping[str, Any]) -> Path:
    """``metrics.json``: the final summary of a run (test_accuracy, test_loss, epochs, seconds, ...)."""
    text = dumps(dict(metrics), indent=2) + "\n"
    return atomic_write_text(Path(out_dir) / METRICS_FILE, text)


def write_history(out_dir: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """``metrics.jsonl``: one JSON object per evaluation, rewritten whole (atomically)."""
    text = "".join(dumps(dict(row)) + "\n" for row in rows)
    return atomic_write_text(Path(out_dir) / HISTORY_FILE, text)


def write_trace(out_dir: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """``trace.jsonl``: one JSON object per copy of the model taken during training."""
    text = "".join(dumps(dict(row)) + "\n" for row in rows)
    return atomic_write_text(Path(out_dir) / TRACE_FILE, text)


def append_history(out_dir: str | Path, row: Mapping[str, Any]) -> None:
    """Add one evaluation to ``metrics.jsonl`` as it happens (one line, flushed), so a run
    that dies keeps its history; the end of the run rewrites the file whole."""
    path = Path(out_dir) / HISTORY_FILE
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(dumps(dict(row)) + "\n")
        handle.flush()


def plot_loss(out_dir: str | Path, rows: Sequence[Mapping[str, Any]], title: str = "") -> Path:
    """``loss.png``: validation (and training, when present) loss against elapsed seconds."""
    # A bare Figure on the Agg canvas: no pyplot, no display, and about a second less to import.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for key, label in (("val_loss", "validation loss"), ("train_loss", "training loss")):
        points = [(r["elapsed"], r[key]) for r in rows
                  if r.get(key) is not None and r.get("elapsed") is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
    acc = [(r["elapsed"], r["val_accuracy"]) for r in rows
           if r.get("val_accuracy") is not None and r.get("elapsed") is not None]
    if acc:
        ax2 = ax.twinx()
        xs, ys = zip(*acc)
        # Markers as on the losses: a single evaluation is a point, not an invisible line.
        ax2.plot(xs, ys, color="tab:green", linestyle="--", marker="s", markersize=3,
                 label="validation accuracy")
        ax2.set_ylabel("accuracy")
    ax.set_xlabel("elapsed seconds")
    ax.set_ylabel("loss")
    # A fixed title height: left to matplotlib it is placed clear of the tick labels, which
    # measures them all once more (0.03 of a 0.12 s plot); nothing sits above the axes here.
    ax.set_title(title or "loss vs time", y=1.0, pad=6.0)
    ax.grid(alpha=0.3)
    # One legend for both axes, under the plot, where it cannot hide a curve. Fixed margins
    # rather than bbox_inches="tight", which lays the figure out twice: 0.17 s against 0.29 s
    # per plot, and a job waits for its plot.
    fig.subplots_adjust(left=0.1, right=0.9, top=0.92, bottom=0.22)
    handles = [h for a in fig.axes for h in a.get_legend_handles_labels()[0]]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
    buffer = io.BytesIO()
    # zlib level 1: the same pixels, a file a little larger, encoded in a third of the time.
    fig.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
    return atomic_write_bytes(Path(out_dir) / PLOT_FILE, buffer.getvalue())


def check_out_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` if needed and prove it writable by writing and removing a probe file.

    The outputs are only written at the end of a run; without this check a read-only or
    mistyped out_dir would be found after every worker has trained. ConfigError (naming the
    key, the path and the OS reason) otherwise.
    """
    path = Path(out_dir)
    probe: str | None = None
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=PROBE_PREFIX, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"hogwild\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.unlink(probe)
        probe = None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError("out_dir", f"cannot create or write {str(path)!r}: {reason}") from None
    finally:
        if probe is not None:
            with contextlib.suppress(OSError):
                os.unlink(probe)
    return path


def check_out_file(path: str | Path, key: str = "out") -> Path:
    """Prove that a file can be written at ``path``, before the work that produces it.

    Output files are written at the end (:func:`atomic_open`); without this check a
    directory given as the file, a path under a file or a read-only directory would be found
    only once every row has been scored or hashed. Nothing is created: the probe file goes
    into the nearest directory that exists (atomic_open makes the missing ones). ConfigError
    (naming ``key``, the path and the reason) otherwise.
    """
    path = Path(path)
    where = f"cannot create or write {str(path)!r}"
    probe: str | None = None
    try:
        if path.is_dir():
            raise ConfigError(key, f"{where}: {os.strerror(errno.EISDIR)}")
        parent = path.parent
        while not parent.exists():  # "/" and "." always exist
            parent = parent.parent
        if not parent.is_dir():
            raise ConfigError(key, f"{where}: {str(parent)!r} is not a directory")
        fd, probe = tempfile.mkstemp(dir=parent, prefix=PROBE_PREFIX, suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
        probe = None
    except OSError as exc:
        raise ConfigError(key, f"{where}: {exc.strerror or type(exc).__name__}") from None
    finally:
        if probe is not None:
            with contextlib.suppress(OSError):
                os.unlink(probe)
    return path


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """An OSError raised in the block (a full disk, a directory removed or made read-only
    under way) as one OutputError naming ``path``; atomic_open has left nothing behind."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def out_dir_held(out_dir: str | Path, command: str) -> Iterator[None]:
    """Hold ``out_dir`` for this process while it may write there.

    Two commands writing one directory at once would leave the files of two runs mixed (the
    model of one beside the metrics of the other), each exiting 0. The second is refused:
    ConfigError naming ``out_dir`` and the command, process and host that hold it. The lock
    is the kernel's (flock on LOCK_FILE), so it goes with its process: a killed coordinator
    leaves none behind for its resume. A file system without locks (some network mounts) is
    said at debug level and not guarded.
    """
    path = Path(out_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise ConfigError("out_dir", f"cannot create {str(path)!r}: "
                                     f"{exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
            raise ConfigError("out_dir", f"{str(out_dir)!r} is being written by "
                                         f"{holder or 'another hogwild process'}: give this "
                                         "run an out_dir of its own, or wait for that one to "
                                         "end") from None
        except OSError as exc:
            log.debug("%s: no lock (%s): not guarded against a second writer", path, exc)
        else:
            note = (f"hogwild {command} (pid {os.getpid()} on {socket.gethostname()}, since "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n").encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, note, 0)
        yield
    finally:
        os.close(fd)
