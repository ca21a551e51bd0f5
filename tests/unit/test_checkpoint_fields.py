"""A checkpoint whose checksums hold but whose values do not: each field is checked at load,
and one out of range is refused with one line naming the file and the field."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint, WorkerEntry
from hogwild.errors import ConfigError


def _saved(directory: Path) -> Checkpoint:
    ckpt = Checkpoint(run_id="r1", w=np.linspace(-1.0, 1.0, 40), round=7, elapsed=3.5,
                      deltas_received=12, bytes_received=4096, duplicates=1,
                      workers=[WorkerEntry(0, "127.0.0.1:5000", 2, examples=100, round=7,
                                           secret_digest="ab" * 32),
                               WorkerEntry(1, "127.0.0.1:5001", 2, examples=90, round=6)],
                      early={"best_loss": 0.25, "best_index": 3, "evaluations": 6,
                             "since_best": 2, "kept_loss": 0.25, "kept_accuracy": 0.9},
                      best_w=np.linspace(0.0, 2.0, 40))
    checkpoint_file.save(directory, ckpt)
    return ckpt


def _rewrite(directory: Path, edit: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
    """Change the saved checkpoint's metadata or arrays and write it again, as a valid archive
    (every CRC right): only its values are wrong."""
    path = directory / checkpoint_file.CHECKPOINT_FILE
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(str(arrays.pop("meta")))
    edit(meta, arrays)
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array(json.dumps(meta, allow_nan=True)), **arrays)
    path.write_bytes(buffer.getvalue())


def _set(key: str, value: Any) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def edit(meta: dict[str, Any], arrays: dict[str, Any]) -> None:
        target = meta
        *parents, last = key.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
    return edit


def _array(name: str, value: Any) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def edit(meta: dict[str, Any], arrays: dict[str, Any]) -> None:
        arrays[name] = np.asarray(value, dtype=np.float64)
    return edit


HOSTILE: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], None], str]] = [
    ("negative round", _set("round", -5), "round is -5"),
    ("round 2^63", _set("round", 1 << 63), "round is 9223372036854775808"),
    ("fractional round", _set("round", 1.5), "round is 1.5"),
    ("boolean round", _set("round", True), "round is True"),
    ("round as text", _set("round", "7"), "round is '7'"),
    ("NaN elapsed", _set("elapsed", float("nan")), "elapsed is nan"),
    ("infinite elapsed", _set("elapsed", float("inf")), "elapsed is inf"),
    ("negative elapsed", _set("elapsed", -1.0), "elapsed is -1.0"),
    ("elapsed of centuries", _set("elapsed", 1e300), "elapsed is 1e+300"),
    ("negative delta count", _set("deltas_received", -1), "deltas_received is -1"),
    ("huge byte count", _set("bytes_received", 1 << 70), "bytes_received is"),
    ("empty run id", _set("run_id", ""), "run_id is empty"),
    ("control bytes in run id", _set("run_id", "r\x1b[2J"), "run_id is"),
    ("run id of a megabyte", _set("run_id", "r" * 1_000_000), "run_id is"),
    ("workers not a list", _set("workers", {"0": 1}), "workers is"),
    ("a worker of no threads", _set("workers.0.threads", 0), "workers[0].threads is 0"),
    ("a worker twice", _set("workers.1.worker_id", 0), "workers[1].worker_id 0 appears twice"),
    ("a worker's round", _set("workers.1.round", -1), "workers[1].round is -1"),
    ("a worker's examples", _set("workers.0.examples", 1 << 60), "workers[0].examples is"),
    ("a worker's digest", _set("workers.0.secret_digest", "zz" * 32), "secret_digest is"),
    ("a worker's unknown field", _set("workers.0.admin", True), "workers[0] has a field"),
    ("history rows", _set("history_rows", -3), "history_rows is -3"),
    ("since_best", _set("early.since_best", -1), "early.since_best is -1"),
    ("best_index past the evaluations", _set("early.best_index", 6), "early.best_index is 6"),
    ("NaN best loss", _set("early.best_loss", float("nan")), "early.best_loss is nan"),
    ("accuracy above 1", _set("early.kept_accuracy", 2.0), "early.kept_accuracy is 2.0"),
    ("unknown early key", _set("early.patience", 5), "early is"),
    ("unknown model key", _set("model", {"learning_rate": 1}), "model is"),
    ("NaN weight", _array("w", [0.0, float("nan")] * 20), "the array 'w' holds a weight"),
    ("weights of two dimensions", _array("w", np.zeros((4, 10))), "the array 'w' has shape"),
    ("best weights of another size", _array("best_w", np.zeros(39)),
     "the array 'best_w' has shape (39,)"),
]


@pytest.mark.parametrize("what, edit, named", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_field_out_of_range_is_one_line_naming_the_file_and_field(
        tmp_path: Path, what: str, edit: Callable[[dict[str, Any], dict[str, Any]], None],
        named: str) -> None:
    _saved(tmp_path)
    _rewrite(tmp_path, edit)
    with pytest.raises(ConfigError) as info:
        checkpoint_file.load(tmp_path)
    text = str(info.value)
    assert "\n" not in text and "\x1b" not in text, what
    assert text.startswith("setting 'resume': the checkpoint "
                           f"{tmp_path / checkpoint_file.CHECKPOINT_FILE} is damaged: its "), text
    assert named in text, (what, text)
    assert len(text) < 600, what


def test_the_fields_as_saved_load_unchanged(tmp_path: Path) -> None:
    saved = _saved(tmp_path)
    _rewrite(tmp_path, lambda meta, arrays: None)
    got = checkpoint_file.load(tmp_path)
    assert got is not None
    assert (got.run_id, got.round, got.elapsed, got.workers, got.early) == (
        saved.run_id, saved.round, saved.elapsed, saved.workers, saved.early)


def test_a_fresh_run_checkpoint_loads(tmp_path: Path) -> None:
    """Round 0, no time yet, no early stopping, no best model, a worker not heard from."""
    checkpoint_file.save(tmp_path, Checkpoint(run_id="r0", w=np.zeros(3), round=0, elapsed=0.0,
                                         deltas_received=0, bytes_received=0, duplicates=0,
                                         workers=[WorkerEntry(0, "h:1", 1)]))
    got = checkpoint_file.load(tmp_path)
    assert got is not None and got.round == 0 and got.early == {}
