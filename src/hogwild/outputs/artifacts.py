"""Run outputs written atomically (model, metrics, loss plot), each run in a directory of its own
under a runs root, published whole (``latest``) or not at all; one writer per run directory;
the root's run history listed and pruned."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.base.atomic import atomic_write_bytes, atomic_write_text, dumps
from hogwild.errors import ConfigError, HogwildError, OutputError
from hogwild.model.files import MODEL_FILE, MODEL_META_FILE

log = logging.getLogger("hogwild")

METRICS_FILE = "metrics.json"
HISTORY_FILE = "metrics.jsonl"
TRACE_FILE = "trace.jsonl"
PLOT_FILE = "loss.png"
PROBE_PREFIX = ".hogwild-write-probe-"
LOCK_FILE = ".hogwild.lock"
# The link in a runs root to its last published run, and the suffix of a run's directory
# until every file of it is written (a run that failed or was killed keeps it).
LATEST = "latest"
INCOMPLETE = ".incomplete"


def save_weights(path: str | Path, w: np.ndarray) -> Path:
    """A weight vector as an ``.npz`` with one array ``w`` (float64), written atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, w=np.asarray(w, dtype=np.float64))
    return atomic_write_bytes(path, buffer.getvalue())


def save_compact_weights(path: str | Path, w: np.ndarray) -> Path:
    """A weight vector as an ``.npz`` of its non-zeros in float32: ``index`` (int32, int64
    past 2**31 entries), ``value`` (float32) and ``dim``, written atomically. A model of
    4M features, 2% of them non-zero, takes 0.6 MB instead of 32 MB."""
    values = np.asarray(w, dtype=np.float32)
    index = np.flatnonzero(values)
    index = index.astype(np.int32 if values.size < 1 << 31 else np.int64)
    buffer = io.BytesIO()
    np.savez(buffer, index=index, value=values[index], dim=np.int64(values.size))
    return atomic_write_bytes(path, buffer.getvalue())


def load_compact_weights(path: str | Path) -> np.ndarray:
    """The dense float64 vector of a file written by :func:`save_compact_weights`."""
    with np.load(path) as archive:
        w = np.zeros(int(archive["dim"]), dtype=np.float64)
        w[archive["index"]] = archive["value"]
    return w


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


def run_name(run_id: str | None = None, now: float | None = None) -> str:
    """A run directory's name: its start in UTC, then its id (``20250131-154502-3f9a...``),
    so that the runs of a root sort by time; ``run_id`` defaults to a fresh random one."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{run_id or uuid.uuid4().hex[:12]}"


def published(root: str | Path) -> Path:
    """Where the last complete run of the runs root ``root`` is found (``root/latest``)."""
    return Path(root) / LATEST


def check_runs_root(out_dir: str | Path) -> Path:
    """:func:`check_out_dir` for a runs root, which must not be the ``latest`` link itself
    (a run nested in the previous one's directory); ConfigError naming out_dir otherwise."""
    path = Path(out_dir)
    if path.name == LATEST and path.is_symlink():
        raise ConfigError("out_dir", f"{str(path)!r} is the link to the last published run; "
                                     f"give the runs directory it is in ({str(path.parent)!r})")
    return check_out_dir(path)


def _fsync_dir(path: Path) -> None:
    """Make the entries of ``path`` (files renamed or linked there) durable; a file system
    that cannot sync a directory is left to its own ordering."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class RunDir:
    """One run's directory under a runs root.

    It is written as ``root/NAME.incomplete``; :meth:`publish` renames it to ``root/NAME``
    and then points ``root/latest`` at it (a symlink made under a temporary name and renamed
    over the old one), so a reader of ``latest`` or of any directory without the suffix
    sees every file of one complete run, and a run that fails or is killed changes neither.
    A directory name without the suffix is the mark of a complete run (the way TensorBoard
    and MLflow users list finished runs: ``ls runs``)."""

    def __init__(self, root: Path, name: str, path: Path) -> None:
        self.root = root
        self.name = name
        self.path = path          # where its files are written now
        self.published = False
        self.resumed = False      # an incomplete run this process goes on with

    @classmethod
    def create(cls, root: str | Path, run_id: str | None = None) -> RunDir:
        """A new, empty ``root/NAME.incomplete`` (OutputError if it cannot be made)."""
        root = Path(root)
        for _ in range(100):  # a name taken (two runs in one second, one id) is drawn again
            name = run_name(run_id)
            path = root / f"{name}{INCOMPLETE}"
            try:
                path.mkdir(parents=True)
            except FileExistsError:
                run_id = None
                continue
            except OSError as exc:
                raise OutputError.writing(root, exc) from None
            return cls(root, name, path)
        raise OutputError(f"cannot find a free run name in {root}")

    @classmethod
    def existing(cls, path: str | Path) -> RunDir:
        """The incomplete run directory ``path`` (a resumed run goes on writing there)."""
        path = Path(path)
        run = cls(path.parent, path.name.removesuffix(INCOMPLETE), path)
        run.resumed = True
        return run

    @property
    def final(self) -> Path:
        """The directory's name once it is published."""
        return self.root / self.name

    def publish(self, keep_runs: int = 0) -> Path:
        """Rename the finished directory to its final name and point ``latest`` at it;
        returns the final path. OutputError if either step fails (the run's files are then
        complete in :attr:`path`, and ``latest`` still names the run before). Then, with
        ``keep_runs`` (the setting), the oldest complete runs of the root beyond that many
        are removed (:func:`prune`; never this one)."""
        if self.published:
            return self.path
        (self.path / LOCK_FILE).unlink(missing_ok=True)  # the flock is on the open file
        _fsync_dir(self.path)
        try:
            os.rename(self.path, self.final)
        except OSError as exc:
            raise OutputError(f"cannot publish the run in {self.path} as {self.final}: "
                              f"{exc.strerror or exc}") from None
        self.path = self.final
        self.published = True
        try:
            self._link_latest()
        except OSError as exc:
            raise OutputError(f"the run is complete in {self.final}, but "
                              f"{published(self.root)} could not be pointed at it: "
                              f"{exc.strerror or exc}") from None
        _fsync_dir(self.root)
        if keep_runs:
            removed = prune(self.root, keep_runs, protect=[self.final])
            if removed:
                log.info("removed %d old run(s) of %s (keep_runs %d)", len(removed),
                         self.root, keep_runs)
        return self.final

    def _link_latest(self) -> None:
        latest = published(self.root)
        if latest.is_dir() and not latest.is_symlink():
            # The single directory older versions wrote their outputs to: kept as a run.
            then = run_name("earlier", latest.stat().st_mtime)
            os.rename(latest, self.root / then)
            log.info("%s was a directory of outputs: kept as %s", latest, self.root / then)
        tmp = self.root / f".{LATEST}.{uuid.uuid4().hex[:8]}.tmp"
        # Relative: the root may be mounted at another path where it is read (a volume).
        os.symlink(self.name, tmp)
        try:
            os.replace(tmp, latest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def abandon(self) -> str:
        """After a failure: remove the directory if nothing of the run was written in it,
        else leave it incomplete. Returns one sentence saying where its files are ("" if it
        was removed or is published, or was incomplete already: a resumed run's errors say
        how to go on with it)."""
        if self.published or self.resumed:
            return ""
        try:
            entries = [p.name for p in self.path.iterdir()]
        except OSError:
            return ""
        if all(name == LOCK_FILE or name.startswith(PROBE_PREFIX) for name in entries):
            with contextlib.suppress(OSError):
                for name in entries:
                    (self.path / name).unlink()
                self.path.rmdir()
            return ""
        return (f"this run's files are in {self.path}, left incomplete "
                f"({published(self.root)} still names the last complete run)")


@contextlib.contextmanager
def run_held(run: RunDir, command: str) -> Iterator[RunDir]:
    """Hold ``run``'s directory (:func:`out_dir_held`) while the block writes it. The block
    publishes it when done; if it raises instead, or returns without publishing, the
    directory is removed when empty or else left incomplete, which a HogwildError's one
    line then says."""
    with out_dir_held(run.path, command):
        try:
            yield run
        except HogwildError as exc:
            note = run.abandon()
            if note:  # the error's own one line names the leftovers (no hogwild error
                exc.args = (f"{exc}; {note}",)  # class words itself but through args)
            raise
        except BaseException:
            run.abandon()
            raise
        else:
            run.abandon()


# ---------------------------------------------------------------------- run history
#
# Only what looks like a run this package wrote is ever removed: a directory (not a link)
# whose name is a run name (TIME-ID, run_name) and that holds a run's files (metrics.json or
# model.json). Incomplete runs (NAME.incomplete: under way, failed, or waiting to be resumed)
# and the run `latest` names are never removed; a run renamed by its user is no longer a run
# name, and is kept.

RUN_NAME = re.compile(r"\d{8}-\d{6}-[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class RunEntry:
    """One run directory of a runs root."""

    path: Path
    complete: bool
    latest: bool
    size: int  # bytes of its files

    @property
    def name(self) -> str:
        return self.path.name


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _latest_target(root: Path) -> Path | None:
    link = published(root)
    if not link.is_symlink():
        return None
    try:
        return link.resolve(strict=True)
    except OSError:
        return None


def list_runs(root: str | Path, sizes: bool = True) -> list[RunEntry]:
    """The run directories of ``root``, oldest first (run names begin with their start)."""
    root = Path(root)
    latest = _latest_target(root)
    entries = []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    for path in children:
        name = path.name.removesuffix(INCOMPLETE)
        if path.is_symlink() or not path.is_dir() or not RUN_NAME.fullmatch(name):
            continue
        complete = not path.name.endswith(INCOMPLETE)
        if complete and not any((path / f).is_file() for f in (METRICS_FILE, MODEL_META_FILE)):
            continue  # named as a run, but not one this package wrote
        entries.append(RunEntry(path, complete, latest is not None and path.resolve() == latest,
                                _size(path) if sizes else 0))
    return entries


def prune(root: str | Path, keep: int, protect: Iterable[Path] = ()) -> list[Path]:
    """Remove the oldest complete runs of ``root`` beyond the newest ``keep`` (0: none
    removed), never the one ``latest`` names nor those in ``protect``; the paths removed.
    A directory that cannot be removed is logged and left."""
    if keep <= 0:
        return []
    kept = {Path(p).resolve() for p in protect}
    runs = [r for r in list_runs(root, sizes=False) if r.complete]
    removed = []
    for run in runs[:max(0, len(runs) - keep)]:
        if run.latest or run.path.resolve() in kept:
            continue
        try:
            shutil.rmtree(run.path)
        except OSError as exc:
            log.warning("cannot remove the old run %s: %s", run.path, exc.strerror or exc)
            continue
        removed.append(run.path)
    return removed
