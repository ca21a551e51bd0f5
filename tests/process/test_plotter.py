"""The loss plot's helper process: drawn on request while the job goes on, or in-process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hogwild.outputs.plotter import BackgroundPlot

ROWS = [{"epoch": i + 1, "elapsed": 0.1 * i, "train_loss": 1.0 / (i + 1), "val_loss": None,
         "val_accuracy": None} for i in range(4)]


def test_started_early_then_finished(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plot = BackgroundPlot()
    helper = plot.helper
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
    from hogwild.outputs import plotter

    drawn: list[int] = []
    real = plotter.plot_loss

    def in_process(out_dir: Path, rows: list[dict[str, object]], title: str = "",
                   saved: float | None = None) -> Path:
        drawn.append(len(rows))
        return real(out_dir, rows, title=title, saved=saved)

    monkeypatch.setattr(plotter, "plot_loss", in_process)
    plot = BackgroundPlot()
    plot.start(tmp_path, ROWS[:2], "t")
    assert plot.finish(tmp_path, ROWS, "t").is_file()
    assert drawn == [4]  # the helper drew two rows; the four are drawn here, over them


def test_close_after_start_stops_the_helper(tmp_path: Path) -> None:
    plot = BackgroundPlot()
    helper = plot.helper
    assert helper is not None
    plot.start(tmp_path, ROWS, "t")
    plot.close()
    assert helper.returncode is not None


def test_a_helper_that_does_not_say_drawn_is_replaced_in_process(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A helper that ends with 0 but never said "drawn" (as one handed to a forked child may
    # look: its exit status is not the child's to read) does not count as a plot.
    plot = BackgroundPlot()
    assert plot.helper is not None
    plot.helper.kill()
    plot.helper.wait()
    with caplog.at_level(logging.WARNING):
        assert plot.finish(tmp_path, ROWS, "t") == tmp_path / "loss.png"
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot helper failed" in caplog.text


HANDOVER = """
import os, sys
from pathlib import Path
from hogwild.outputs.plotter import BackgroundPlot
out, action = Path(sys.argv[1]), sys.argv[2]
rows = [{"epoch": 1, "elapsed": 0.0, "train_loss": 1.0, "val_loss": None,
         "val_accuracy": None}]
plot = BackgroundPlot()
helper = plot.helper
pid = os.fork()
if pid == 0:  # the child takes the helper over
    code = 3
    try:
        if action == "draw":
            code = 0 if plot.finish(out, rows, "t") == out / "loss.png" else 4
        else:
            plot.close()
            code = 0
    finally:
        os._exit(code)
plot.handed_over()
_, status = os.waitpid(pid, 0)
plot.reap(grace=30)
print(os.waitstatus_to_exitcode(status), helper.returncode)
"""


@pytest.mark.parametrize("action", ["draw", "close"])
def test_a_helper_handed_to_a_forked_child_draws_or_ends_and_is_reaped(
        tmp_path: Path, action: str) -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-c", HANDOVER, str(tmp_path), action],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    # The child drew through the helper (or closed it); the helper ended on its own with 0
    # (an unused helper sees its stdin end) and the starting process reaped it.
    assert proc.stdout.split() == ["0", "0"], proc.stdout + proc.stderr
    assert "plot helper failed" not in proc.stderr  # not redrawn in-process
    assert (tmp_path / "loss.png").is_file() == (action == "draw")


def test_the_trained_points_fill_the_loss_axis_and_the_saved_epoch_is_marked() -> None:
    """Epoch 0's loss (the untrained model's, 1.0) is drawn at the top edge of an axis fitted
    to the trained points, not as the top of an axis that squashes them; a row without a
    training loss breaks its line; the saved model's epoch is a vertical line."""
    import math

    from hogwild.outputs.plotter import loss_figure

    rows = [{"epochs": 0.0, "val_loss": 1.0, "train_loss": None, "val_accuracy": 0.5}]
    rows += [{"epochs": e, "val_loss": 0.05 - 0.002 * e,
              "train_loss": 0.04 if e in (1.0, 1.5, 4.0) else None, "val_accuracy": 0.97}
             for e in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)]
    fig = loss_figure(rows, "t", saved=2.0)
    ax = fig.axes[0]
    bottom, top = ax.get_ylim()
    assert bottom == 0.0 and 0.049 < top < 0.1
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["epoch 0: 1"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    train = [float(y) for y in lines["training loss"].get_ydata()]
    # Measured at 1.0, 1.5 and 4.0 only: NaN between 1.5 and 4.0, so no line joins them.
    assert [math.isnan(y) for y in train] == [False, False, True, True, False]
    saved = lines["model saved (epoch 2)"]
    assert list(saved.get_xdata()) == [2.0, 2.0]


def test_a_curve_without_a_far_higher_start_keeps_every_point_in_view() -> None:
    from hogwild.outputs.plotter import loss_figure

    rows = [{"epoch": e, "val_loss": 0.5 - 0.05 * e, "train_loss": None, "val_accuracy": None}
            for e in range(4)]
    ax = loss_figure(rows).axes[0]
    assert ax.get_ylim()[1] >= 0.5 and not ax.texts
