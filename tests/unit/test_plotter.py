"""The loss plot's helper process: drawn on request while the job goes on, or in-process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hogwild.plotter import BackgroundPlot

ROWS = [{"epoch": i + 1, "elapsed": 0.1 * i, "train_loss": 1.0 / (i + 1), "val_loss": None,
         "val_accuracy": None} for i in range(4)]


def test_started_early_then_finished(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plot = BackgroundPlot()
    helper = plot._proc
    assert helper is not None
    plot.start(tmp_path, ROWS, "t")
    with caplog.at_level(logging.WARNING):
        assert plot.finish(str(tmp_path) + "/", ROWS, "t") == tmp_path / "loss.png"
    assert helper.returncode == 0  # drawn by the helper, which has ended
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not caplog.records
    plot.close()


def test_a_history_changed_after_start_is_drawn_again(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from hogwild import artifacts

    drawn: list[int] = []
    real = artifacts.plot_loss

    def in_process(out_dir: Path, rows: list[dict[str, object]], title: str = "") -> Path:
        drawn.append(len(rows))
        return real(out_dir, rows, title=title)

    monkeypatch.setattr(artifacts, "plot_loss", in_process)
    plot = BackgroundPlot()
    plot.start(tmp_path, ROWS[:2], "t")
    assert plot.finish(tmp_path, ROWS, "t").is_file()
    assert drawn == [4]  # the helper drew two rows; the four are drawn here, over them


def test_close_after_start_stops_the_helper(tmp_path: Path) -> None:
    plot = BackgroundPlot()
    helper = plot._proc
    assert helper is not None
    plot.start(tmp_path, ROWS, "t")
    plot.close()
    assert helper.returncode is not None
