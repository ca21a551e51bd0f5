"""Outputs: atomic writes, model round trip, metrics files, the plot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hogwild.base import atomic
from hogwild.errors import ConfigError
from hogwild.outputs import artifacts, plotter


def test_model_round_trip(tmp_path: Path) -> None:
    w = np.array([0.5, -1.25, 3.0])
    artifacts.save_model(tmp_path, w, {"loss": "hinge", "n_features": 2, "x": np.float32(1.5)})
    loaded, meta = artifacts.load_model(tmp_path)
    assert np.array_equal(loaded, w)
    assert meta == {"loss": "hinge", "n_features": 2, "x": 1.5}


def test_atomic_write_leaves_old_file_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "model.json"
    atomic.atomic_write_text(target, "old")

    class Boom:
        def __len__(self) -> int:
            raise RuntimeError("disk on fire")

    with pytest.raises(TypeError):
        atomic.atomic_write_bytes(target, Boom())  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.json"]  # no temp file left behind


def test_metrics_history_and_plot(tmp_path: Path) -> None:
    rows = [{"elapsed": 0.1 * i, "val_loss": 1.0 / (i + 1), "train_loss": 1.1 / (i + 1),
             "val_accuracy": 0.5 + 0.04 * i} for i in range(6)]
    artifacts.write_history(tmp_path, rows)
    artifacts.write_metrics(tmp_path, {"test_accuracy": np.float64(0.9), "epochs": 6})
    png = plotter.plot_loss(tmp_path, rows, title="t")
    lines = (tmp_path / artifacts.HISTORY_FILE).read_text().splitlines()
    assert [json.loads(line)["val_loss"] for line in lines] == [r["val_loss"] for r in rows]
    assert json.loads((tmp_path / artifacts.METRICS_FILE).read_text())["test_accuracy"] == 0.9
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(png) > 5000


def test_atomic_files_get_ordinary_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = atomic.atomic_write_text(tmp_path / "m.json", "{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600


def test_an_out_dir_is_held_by_one_writer_at_a_time(tmp_path: Path) -> None:
    # flock conflicts between two opens of the file, in one process as across two.
    with (artifacts.out_dir_held(tmp_path, "train"),
          pytest.raises(ConfigError, match=r"setting 'out_dir': '.*' is being written by "
                                           rf"hogwild train \(pid {os.getpid()} on "),
          artifacts.out_dir_held(tmp_path, "coordinator")):
        pass
    with artifacts.out_dir_held(tmp_path, "coordinator"):  # let go at the end: free again
        assert "hogwild coordinator" in (tmp_path / artifacts.LOCK_FILE).read_text()
