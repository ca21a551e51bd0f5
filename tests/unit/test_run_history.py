"""Bounded disk: compact final states, and the run history pruned (keep_runs, `hogwild runs`)
without ever touching the run just written, the one `latest` names, an incomplete run or a
directory that is not a run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.config import Settings
from hogwild.errors import ConfigError
from hogwild.outputs import artifacts
from hogwild.outputs.artifacts import list_runs, prune


def _run(root: Path, name: str, *, complete: bool = True, payload: int = 10) -> Path:
    path = root / (name if complete else name + artifacts.INCOMPLETE)
    path.mkdir(parents=True)
    (path / artifacts.METRICS_FILE).write_text(json.dumps({"run": name}))
    (path / "model.npz").write_bytes(b"x" * payload)
    return path


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_compact_weights_are_the_nonzeros_in_float32(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    w = np.zeros(100_000)
    hot = rng.choice(w.size, 500, replace=False)
    w[hot] = rng.normal(size=500)
    artifacts.save_compact_weights(tmp_path / "c.npz", w)
    artifacts.save_weights(tmp_path / "d.npz", w)
    back = artifacts.load_compact_weights(tmp_path / "c.npz")
    assert back.dtype == np.float64 and back.shape == w.shape
    np.testing.assert_array_equal(back, w.astype(np.float32))
    assert (tmp_path / "c.npz").stat().st_size * 50 < (tmp_path / "d.npz").stat().st_size


def test_final_states_setting_is_off_by_default_and_checked() -> None:
    assert Settings().final_states == "none"
    assert Settings().replace(final_states="compact").final_states == "compact"
    with pytest.raises(ConfigError, match="final_states"):
        Settings().replace(final_states="dense")
    with pytest.raises(ConfigError, match="keep_runs"):
        Settings().replace(keep_runs=-1)


def test_prune_keeps_the_newest_and_never_latest_incomplete_or_strangers(
        tmp_path: Path) -> None:
    root = tmp_path / "runs"
    names = [f"20260101-00000{i}-{i:012x}" for i in range(6)]
    for name in names:
        _run(root, name)
    os.symlink(names[1], root / artifacts.LATEST)  # an old run is the published one
    _run(root, "20250101-000000-aaaaaaaaaaaa", complete=False)  # under way, or resumable
    (root / "20250101-000000-notarun").mkdir()  # a run's name, but none of its files
    _run(root, "my-best-run")  # a run its user renamed to keep
    (root / "notes.txt").write_text("mine")
    removed = prune(root, keep=2, protect=[root / names[2]])
    assert sorted(p.name for p in removed) == [names[0], names[3]]
    assert _names(root) == sorted(["20250101-000000-aaaaaaaaaaaa.incomplete",
                                   "20250101-000000-notarun", "my-best-run", "notes.txt",
                                   artifacts.LATEST, names[1], names[2], names[4], names[5]])
    assert prune(root, keep=0) == []  # 0: keep every run


def test_publishing_prunes_to_keep_runs_and_keeps_itself(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for i in range(4):
        _run(root, f"20200101-00000{i}-{i:012x}")
    run = artifacts.RunDir.create(root)
    (run.path / artifacts.METRICS_FILE).write_text("{}")
    final = run.publish(keep_runs=2)
    runs = [r.name for r in list_runs(root)]
    assert runs == ["20200101-000003-000000000003", final.name]
    assert (root / artifacts.LATEST).resolve() == final.resolve()


def test_runs_command_lists_and_prunes(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    names = [f"20260101-00000{i}-{i:012x}" for i in range(3)]
    for name in names:
        _run(root, name, payload=2_000_000)
    os.symlink(names[2], root / artifacts.LATEST)
    assert main(["runs", "list", "--out", str(root)], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:3]] == names
    assert lines[2].endswith("latest") and "2.0 MB" in lines[0]
    assert lines[3].startswith("3 run(s), 6.0 MB")
    assert main(["runs", "prune", "--keep", "1", "--out", str(root)], environ={}) == 0
    assert "removed 2 run(s)" in capsys.readouterr().out
    assert [r.name for r in list_runs(root)] == [names[2]]
    assert main(["runs", "prune", "--keep", "0", "--out", str(root)], environ={}) == 2


def test_runs_command_defaults_to_the_settings_out_dir(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "elsewhere"
    _run(root, "20260101-000000-000000000000")
    env = {"HOGWILD_OUT_DIR": str(root)}
    assert main(["runs", "list"], environ=env) == 0
    assert "20260101-000000-000000000000" in capsys.readouterr().out
