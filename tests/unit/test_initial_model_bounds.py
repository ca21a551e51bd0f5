"""An initial model no training makes (weights of 1e300) is refused in one line naming it,
and every number in the progress rows and result lines prints compactly."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from hogwild.base.text import number
from hogwild.cli import main

_BASE = ("--data-cache", "false", "--trainer", "serial", "--threads", "1", "--patience", "0")


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
           *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["train", "--out", str(tmp_path / name), *_BASE, *extra], environ={})
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _edited(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
            bias: float) -> Path:
    """A model trained one epoch, its bias then set to ``bias`` (a hand-edited file)."""
    code, _, err = _train(tmp_path, capsys, "trained", "--epochs", "1")
    assert code == 0, err
    model = tmp_path / name
    model.mkdir()
    for part in (tmp_path / "trained" / "latest").iterdir():
        (model / part.name).write_bytes(part.read_bytes())
    w = np.load(model / "model.npz")["w"]
    w[-1] = bias
    np.savez(model / "model.npz", w=w)
    return model


def test_an_initial_model_with_a_weight_of_1e300_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _edited(tmp_path, capsys, "huge", 1e300)
    code, out, err = _train(tmp_path, capsys, "warm", "--epochs", "1",
                            "--initial-model", str(model))
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"hogwild train: error: setting 'initial_model': {model} has "
                               "a weight of 1.000e+300, beyond 1e+06")
    assert "train_loss" not in out  # no training (no progress rows)


@pytest.mark.parametrize("loss", ["hinge", "squared"])
def test_margins_beyond_the_bound_are_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              loss: str) -> None:
    """Weights each under the bound that add up to margins beyond it (the squared loss's
    bound scales with the largest |target|: 1 here)."""
    code, _, err = _train(tmp_path, capsys, "trained", "--epochs", "1", "--loss", loss)
    assert code == 0, err
    model = tmp_path / "many"
    model.mkdir()
    for part in (tmp_path / "trained" / "latest").iterdir():
        (model / part.name).write_bytes(part.read_bytes())
    w = np.load(model / "model.npz")["w"]
    w[:-1] = 9e5
    np.savez(model / "model.npz", w=w)
    code, _, err = _train(tmp_path, capsys, "warm", "--epochs", "1", "--loss", loss,
                          "--initial-model", str(model))
    assert code == 2, err
    assert re.search(r"setting 'initial_model': .* predicts \d\.\d{3}e\+\d\d on a training "
                     r"row, beyond 1e\+06", err), err


def test_a_large_but_allowed_start_prints_compact_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bias of 9e5 (under the bound): losses of ~1e5 in every row and the result line
    print as 2.345e+05, not as long fixed-point numbers."""
    model = _edited(tmp_path, capsys, "large", 9e5)
    code, out, err = _train(tmp_path, capsys, "warm", "--epochs", "2", "-v",
                            "--initial-model", str(model))
    assert code == 0, err
    rows = [line for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert len(rows) == 3, out  # the warm start's epoch 0, then epochs 1 and 2
    assert all(re.search(r"\d\.\d{3}e\+05", row) for row in rows), rows
    assert "test loss " in out and re.search(r"test loss \d\.\d{3}e\+05", out), out
    assert max(len(token) for line in out.splitlines() for token in line.split()
               if re.fullmatch(r"[-\d.e+]+s?", token)) <= 12, out


@pytest.mark.parametrize("value, text", [
    (None, "-"), (0.03125, "0.0312"), (12345.67891, "12345.6789"), (1e300, "1.000e+300"),
    (-2.5e5, "-2.500e+05"), (math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan"),
    (np.float64(1e300), "1.000e+300"),
])
def test_numbers_for_humans(value: float | None, text: str) -> None:
    assert number(value) == text


def test_seconds_and_epochs_use_two_decimals_then_scientific() -> None:
    assert number(0.256, 2) == "0.26" and number(1e9, 2) == "1.0e+09"
