"""The coordinator's checkpoint: global model, counters, workers and evaluations in one file.

Written atomically (temp file + rename) every ``checkpoint_interval`` seconds, so a killed
coordinator leaves the last complete one; ``resume`` reads it back. One ``.npz`` holds the
weights and, as a JSON string, everything else, so the two can never disagree. The evaluations
are the exception: the checkpoint counts them, and they are read back from ``metrics.jsonl``
beside it, where each was appended as it happened. Held inline, they made every checkpoint
cost time in proportion to the run's length (measured: 0.42 s per checkpoint after an hour of
evaluations every 0.25 s, 4.7 s and a 137 MB file after ten hours, every 10 s).
"""

from __future__ import annotations

import json
import logging
import math
import struct
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
from numpy.lib.npyio import NpzFile

from hogwild.base import atomic
from hogwild.cluster.wire.codec import MAX_EXAMPLES, MAX_ROUND
from hogwild.config import MAX_THREADS, Settings
from hogwild.errors import ConfigError
from hogwild.outputs import artifacts
from hogwild.outputs.history import ReadBack, read_back

CHECKPOINT_FILE = "checkpoint.npz"
FORMAT_VERSION = 2
# Version 1 held the evaluations inline; it is still read.
READS_VERSIONS = (1, 2)

log = logging.getLogger("hogwild.coordinator")


@dataclass
class WorkerEntry:
    """A worker as the checkpoint remembers it: who it was and how far it got."""

    worker_id: int
    address: str
    threads: int
    hostname: str = ""
    pid: int = 0
    examples: int = 0
    round: int = 0
    deltas_applied: int = 0
    bytes_received: int = 0
    # SHA-256 of the process's registration secret (hex): the same process registers again
    # after a resume, another one claiming its address must prove it serves it.
    secret_digest: str = ""


@dataclass
class Checkpoint:
    """Everything a resumed coordinator needs to go on with the run."""

    run_id: str
    w: npt.NDArray[np.float64]
    round: int                      # highest round any worker reached
    elapsed: float                  # training seconds so far (the time budget goes on)
    deltas_received: int
    bytes_received: int
    duplicates: int
    workers: list[WorkerEntry] = field(default_factory=list)
    # The evaluations so far: saved as their count (they are in metrics.jsonl already), and
    # once loaded, read back from there (thinned, see hogwild.outputs.history).
    history_rows: int = 0
    history: ReadBack = field(default_factory=ReadBack)
    # Early stopping's counters and the best model so far: a resumed run keeps counting
    # (`patience`) and still saves the best model when it was evaluated before the crash.
    early: dict[str, Any] = field(default_factory=dict)
    best_w: npt.NDArray[np.float64] | None = None
    # The data it was taken on (coordinator.fingerprint); "" when unknown (version 1).
    data: str = ""
    # The settings that say what the weights mean (MODEL_SETTINGS); empty when unknown.
    model: dict[str, Any] = field(default_factory=dict)


# Saved as they are; the weights go in arrays of their own, the evaluations as their count.
_SAVED = ("run_id", "round", "elapsed", "deltas_received", "bytes_received", "duplicates",
          "early", "data", "model")
# The arrays a checkpoint holds (best_w only once early stopping has a best model).
_ARRAYS = frozenset({"w", "best_w", "meta"})
# What the weights mean: a resume under other values would go on training them as another
# model (hinge weights read as log-loss probabilities, say) and exit 0.
MODEL_SETTINGS = ("model", "hidden", "binary_features", "loss", "fit_bias")


def save(out_dir: str | Path, ckpt: Checkpoint) -> Path:
    """Write ``out_dir/checkpoint.npz`` atomically."""
    meta = {key: getattr(ckpt, key) for key in _SAVED}
    meta["workers"] = [asdict(entry) for entry in ckpt.workers]
    meta["history_rows"] = ckpt.history_rows
    meta["format_version"] = FORMAT_VERSION
    arrays: dict[str, Any] = {"w": np.asarray(ckpt.w, dtype=np.float64)}
    if ckpt.best_w is not None:
        arrays["best_w"] = np.asarray(ckpt.best_w, dtype=np.float64)
    # Which arrays there are, where a damaged zip directory cannot drop one unseen: the zip
    # reader takes the entries it finds and does not check their count.
    meta["arrays"] = sorted(arrays)
    arrays["meta"] = np.array(atomic.dumps(meta))
    # Straight into the file, as the model is (no in-memory archive of the weights).
    path = Path(out_dir) / CHECKPOINT_FILE
    with atomic.atomic_open(path) as handle:
        np.savez(handle, **arrays)
    return path


def remove(out_dir: str | Path) -> None:
    """Delete the checkpoint of a finished run (if any)."""
    (Path(out_dir) / CHECKPOINT_FILE).unlink(missing_ok=True)


def locate(path: str | Path) -> Path | None:
    """The run directory a ``resume`` of ``path`` goes on in: ``path`` itself when it holds a
    checkpoint, else (``path`` a runs root) its newest incomplete run that holds one; None
    when there is none (a new run starts)."""
    path = Path(path)
    if (path / CHECKPOINT_FILE).exists():
        return path
    try:
        runs = sorted((p for p in path.iterdir() if p.name.endswith(artifacts.INCOMPLETE)),
                      key=lambda p: p.name, reverse=True)  # names begin with their time
    except OSError:  # no such directory (yet): nothing to resume
        return None
    return next((p for p in runs if (p / CHECKPOINT_FILE).exists()), None)


def load(directory: str | Path) -> Checkpoint | None:
    """The checkpoint in ``directory``, None if it has none; ConfigError (key ``resume``) if
    the file cannot be read, is damaged or is of another format version."""
    path = Path(directory) / CHECKPOINT_FILE
    if not path.exists():
        return None
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ConfigError("resume", f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        w, best_w, meta = _read_archive(path, handle)
    if meta.get("format_version") not in READS_VERSIONS:
        raise ConfigError("resume", f"{path} has format version {meta.get('format_version')}, "
                                    f"this hogwild reads {', '.join(map(str, READS_VERSIONS))}")
    try:
        _check_fields(meta, w, best_w)
        elapsed = float(meta["elapsed"])
        if "history" in meta:  # version 1
            history = ReadBack.of_rows(meta["history"])
        else:
            history = _read_history(Path(directory), int(meta["history_rows"]), elapsed)
        return Checkpoint(
            run_id=str(meta["run_id"]), w=w, round=int(meta["round"]), elapsed=elapsed,
            deltas_received=int(meta["deltas_received"]),
            bytes_received=int(meta["bytes_received"]), duplicates=int(meta["duplicates"]),
            workers=[WorkerEntry(**entry) for entry in meta["workers"]],
            history_rows=history.count, history=history,
            early=dict(meta.get("early") or {}), best_w=best_w,
            data=str(meta.get("data") or ""), model=dict(meta.get("model") or {}))
    except KeyError as exc:
        raise _damaged(path, f"it lacks {exc}") from None
    except _Bad as exc:
        raise _damaged(path, f"its {exc}") from None
    except (TypeError, ValueError) as exc:
        raise _damaged(path, str(exc)) from None


# What each saved field may hold. The file's checksums say it is the file that was written,
# not that its values are sane: one edited (or written by a buggy build) with a valid CRC
# would otherwise fail deep in the resume (a negative round in the run config) or after the
# shards have shipped, or run on with a NaN clock that no time budget ever reaches. The
# counters' bounds are those a worker's own reports are held to (protocol.codec); a byte
# count or a delta count far above anything a run reaches (2^62) is no count.
MAX_COUNT = 1 << 62
MAX_ELAPSED = 1e9           # seconds of training: 31 years
MAX_TEXT = 300              # run id, address, host name (the registration's own bound)
MAX_WORKERS_SAVED = 4096    # far above the settings' 1024
_EARLY_KEYS = frozenset({"best_loss", "best_index", "evaluations", "since_best", "kept_loss",
                         "kept_accuracy"})
_WORKER_KEYS = frozenset(WorkerEntry.__dataclass_fields__)


class _Bad(ValueError):
    """A field out of range (its message says which, as the user reads the file)."""


def _int(where: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{where} is {_shown(value)}, not a whole number")
    if not low <= value <= high:
        raise _Bad(f"{where} is {value}, outside {low}..{high}")


def _float(where: str, value: Any, low: float, high: float, none: bool = False) -> None:
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{where} is {_shown(value)}, not a number")
    if not math.isfinite(value) or not low <= value <= high:
        raise _Bad(f"{where} is {value!r}, not a finite number in {low:g}..{high:g}")


def _text(where: str, value: Any, limit: int = MAX_TEXT) -> None:
    if not isinstance(value, str):
        raise _Bad(f"{where} is {_shown(value)}, not text")
    if len(value) > limit or not value.isprintable():
        raise _Bad(f"{where} is {_shown(value)}: more than {limit} characters or not "
                   "printable")


def _shown(value: Any) -> str:
    """A field's value for the error line: short, and escaped (it comes from the file)."""
    text = repr(value).encode("unicode_escape").decode("ascii")
    return text if len(text) <= 40 else text[:37] + "..."


def _weights(where: str, w: npt.NDArray[np.float64], dim: int | None) -> None:
    if w.ndim != 1 or w.size == 0 or (dim is not None and w.size != dim):
        raise _Bad(f"{where} has shape {w.shape}, not a vector"
                   + ("" if dim is None else f" of {dim} weights (as 'w')"))
    if not np.isfinite(w).all():
        raise _Bad(f"{where} holds a weight that is not finite")


def _check_fields(meta: dict[str, Any], w: npt.NDArray[np.float64],
                  best_w: npt.NDArray[np.float64] | None) -> None:
    """_Bad naming the first field of the checkpoint that is not what save() writes."""
    _weights("the array 'w'", w, None)
    if best_w is not None:
        _weights("the array 'best_w'", best_w, w.size)
    _text("run_id", meta["run_id"])
    if not meta["run_id"]:
        raise _Bad("run_id is empty")
    _int("round", meta["round"], 0, MAX_ROUND)
    _float("elapsed", meta["elapsed"], 0.0, MAX_ELAPSED)
    for key in ("deltas_received", "bytes_received", "duplicates"):
        _int(key, meta[key], 0, MAX_COUNT)
    if "history_rows" in meta:
        _int("history_rows", meta["history_rows"], 0, MAX_COUNT)
    for key in ("data",):
        if meta.get(key) is not None:
            _text(key, meta[key], 200)
    _check_workers(meta["workers"])
    _check_early(meta.get("early") or {})
    model = meta.get("model") or {}
    if not isinstance(model, dict) or not set(model) <= set(MODEL_SETTINGS):
        raise _Bad(f"model is {_shown(model)}, not the model settings")


def _check_workers(workers: Any) -> None:
    if not isinstance(workers, list) or len(workers) > MAX_WORKERS_SAVED:
        raise _Bad(f"workers is {_shown(workers)}, not a list of at most "
                   f"{MAX_WORKERS_SAVED} workers")
    seen: set[int] = set()
    for i, entry in enumerate(workers):
        where = f"workers[{i}]"
        if not isinstance(entry, dict) or not {"worker_id", "address", "threads"} <= set(entry):
            raise _Bad(f"{where} is {_shown(entry)}, not a worker")
        if not set(entry) <= _WORKER_KEYS:
            raise _Bad(f"{where} has a field {_shown(min(set(entry) - _WORKER_KEYS))}")
        _int(f"{where}.worker_id", entry["worker_id"], 0, MAX_WORKERS_SAVED - 1)
        if entry["worker_id"] in seen:
            raise _Bad(f"{where}.worker_id {entry['worker_id']} appears twice")
        seen.add(entry["worker_id"])
        _text(f"{where}.address", entry["address"])
        _int(f"{where}.threads", entry["threads"], 1, MAX_THREADS)
        _text(f"{where}.hostname", entry.get("hostname", ""))
        _int(f"{where}.pid", entry.get("pid", 0), 0, 1 << 32)
        _int(f"{where}.examples", entry.get("examples", 0), 0, MAX_EXAMPLES)
        _int(f"{where}.round", entry.get("round", 0), 0, MAX_ROUND)
        for key in ("deltas_applied", "bytes_received"):
            _int(f"{where}.{key}", entry.get(key, 0), 0, MAX_COUNT)
        digest = entry.get("secret_digest", "")
        _text(f"{where}.secret_digest", digest, 64)
        if digest and (len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest)):
            raise _Bad(f"{where}.secret_digest is {_shown(digest)}, not a SHA-256 in hex")


def _check_early(early: Any) -> None:
    if not isinstance(early, dict) or not set(early) <= _EARLY_KEYS:
        raise _Bad(f"early is {_shown(early)}, not early stopping's counters")
    evaluations = early.get("evaluations") or 0
    _int("early.evaluations", evaluations, 0, MAX_COUNT)
    _int("early.since_best", early.get("since_best") or 0, 0, evaluations)
    if early.get("best_index") is not None:
        _int("early.best_index", early["best_index"], 0, max(evaluations - 1, 0))
    for key in ("best_loss", "kept_loss"):
        _float(f"early.{key}", early.get(key), -math.inf, math.inf, none=True)
    _float("early.kept_accuracy", early.get("kept_accuracy"), 0.0, 1.0, none=True)


# What reading a damaged archive raises, from the zip layer (a cut file: BadZipFile, EOFError;
# a flipped byte: "Bad CRC-32", a bad header, an unknown compression method, a member marked
# encrypted: RuntimeError) and from numpy's array headers (ValueError, TypeError for a dtype it
# does not know, pickled data it refuses). Each member's CRC-32 is checked as it is read to its
# end, so an archive read without one of these holds exactly the bytes that were written.
_ZIP_MAGIC = b"PK\x03\x04"  # how a .npz (a zip file) with at least one member begins
_DAMAGE = (zipfile.BadZipFile, EOFError, OSError, ValueError, TypeError, KeyError,
           NotImplementedError, RuntimeError, OverflowError, zlib.error, struct.error)


def _read_archive(path: Path, handle: BinaryIO) -> tuple[npt.NDArray[np.float64],
                                                         npt.NDArray[np.float64] | None,
                                                         dict[str, Any]]:
    """The weights, the best weights (if kept) and the metadata of the open checkpoint
    ``path``; ConfigError saying it is damaged if it cannot be read as one."""
    try:
        start = handle.read(4)
        if not start:
            raise ValueError("it is empty")
        if start != _ZIP_MAGIC:  # else numpy would take it for a lone array or a pickle
            raise ValueError("it is not a .npz archive")
        handle.seek(0)
        archive = np.load(handle, allow_pickle=False)
        if not isinstance(archive, NpzFile):
            raise TypeError("it is not a .npz archive")
        with archive:
            # A name damaged in the archive's directory would otherwise drop that array
            # silently (a resume without the best model so far).
            unknown = sorted(set(archive.files) - _ARRAYS)
            if unknown:
                raise ValueError(f"it holds an array named {unknown[0]!r}")
            w = np.array(archive["w"], dtype=np.float64)
            best_w = (np.array(archive["best_w"], dtype=np.float64)
                      if "best_w" in archive.files else None)
            meta = json.loads(str(archive["meta"]))
    except _DAMAGE as exc:
        raise _damaged(path, _why(exc)) from None
    if not isinstance(meta, dict):
        raise _damaged(path, "its metadata is not a JSON object")
    # Written since the list was kept (older checkpoints: the names checked above only).
    listed = meta.get("arrays")
    if isinstance(listed, list) and (best_w is not None) != ("best_w" in listed):
        raise _damaged(path, "it lacks the array 'best_w'" if best_w is None
                       else "it holds an array named 'best_w' its metadata does not list")
    return w, best_w, meta


def _why(exc: BaseException) -> str:
    """What is wrong with the archive, in words a user can act on."""
    text = str(exc).rstrip(".")
    if "pickled" in text:  # numpy's advice (allow_pickle=True) is not for a checkpoint
        return "an array in it is not one of numbers"
    if isinstance(exc, zipfile.BadZipFile) and text == "File is not a zip file":
        return "the zip directory at its end is missing (the file is cut short)"
    if isinstance(exc, OSError) and exc.strerror:  # a seek outside the file: an offset damaged
        return f"{exc.strerror.lower()} ({type(exc).__name__})"
    if isinstance(exc, KeyError):  # numpy's own words: "w is not a file in the archive"
        return str(exc.args[0]) if exc.args else "it lacks an array"
    return text or f"{type(exc).__name__}: the file ends early"


def _damaged(path: Path, why: str) -> ConfigError:
    """The error of a checkpoint that cannot be resumed from (and how to go on)."""
    return ConfigError("resume", f"the checkpoint {path} is damaged: {why}; it cannot be "
                                 "resumed: start the run anew without resume, or resume from "
                                 "an intact copy of the file")


def _read_history(directory: Path, rows: int, elapsed: float) -> ReadBack:
    """The first ``rows`` evaluations of ``metrics.jsonl`` in ``directory``, none of them
    later than ``elapsed`` (the checkpoint's training clock). Fewer (a file lost or cut short
    with the machine, or written since by another command) only thin the loss curve before
    the resume: the model and counters are in the checkpoint. The run goes on with what is
    there, and says so."""
    path = directory / artifacts.HISTORY_FILE
    history, problem = read_back(path, rows, lambda row: _is_evaluation(row, elapsed))
    if history.count < rows:
        log.warning("%s holds %d of the checkpoint's %d evaluations (%s): the resumed run's "
                    "loss curve and metrics.jsonl lack the rest; the model is unaffected",
                    path, history.count, rows, problem)
    return history


def _is_evaluation(row: Any, elapsed: float) -> bool:
    """A row as the coordinator writes it, taken no later than ``elapsed`` seconds in."""
    if not isinstance(row, dict) or not _ROW_KEYS <= row.keys():
        return False
    numbers = [row[key] for key in _ROW_KEYS]
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
               for v in numbers):
        return False
    return isinstance(row["elapsed"], (int, float)) and row["elapsed"] <= elapsed


# What every evaluation row of a coordinator holds (driver._evaluate), and the end of run uses.
_ROW_KEYS = frozenset({"elapsed", "round", "examples", "val_loss", "train_loss",
                       "deltas_received"})


def model_settings(settings: Settings) -> dict[str, Any]:
    """The MODEL_SETTINGS of ``settings`` that apply to its model, as the checkpoint keeps
    them (JSON values; ``hidden`` and ``binary_features`` are the MLP's only)."""
    keys = MODEL_SETTINGS if settings.model == "mlp" else ("model", "loss", "fit_bias")
    return {key: (list(value) if isinstance(value, tuple) else value)
            for key in keys for value in [getattr(settings, key)]}


def check_model_settings(ckpt: Checkpoint, settings: Settings) -> None:
    """ConfigError naming the first model setting that differs from the checkpoint's."""
    now = model_settings(settings)
    for key in (k for k in MODEL_SETTINGS if k in ckpt.model):
        then = ckpt.model[key]
        if now.get(key) != then:
            raise ConfigError(key, f"the checkpoint in {settings.resume} was taken with "
                                   f"{key}={then!r}, these settings say {now.get(key)!r}: a resumed "
                                   "run goes on training the same model")
