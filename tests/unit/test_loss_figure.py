"""The loss plot: against epochs from epoch 0, readable axis ranges, nothing cut at the edges."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from hogwild.cli import main
from hogwild.outputs import artifacts
from hogwild.outputs.plotter import MIN_ACCURACY_SPAN, TITLE_WIDTH, accuracy_limits, loss_figure

LONG_TITLE = ("hogwild run: /work/shared/data/reuters21578_modapte_earn.train.libsvm.gz, hinge, "
              "4 workers async, staleness 2, combine sum, topology tree, lr 0.5 inverse")


def _train(out: Path, *extra: str) -> list[dict[str, Any]]:
    code = main(["train", "--data", "bundled:spamassassin", "--out", str(out), "--threads", "1",
                 "--epochs", "3", "--patience", "0", *extra], environ={})
    assert code == 0
    text = (artifacts.published(out) / artifacts.HISTORY_FILE).read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_train_evaluates_the_model_before_training_as_epoch_0(tmp_path: Path) -> None:
    rows = _train(tmp_path / "out")
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3]
    first = rows[0]
    assert first["examples"] == 0 and first["train_loss"] is None
    # The untrained (all-zero) hinge model: loss 1 on every row, and worse than training's.
    assert first["val_loss"] == pytest.approx(1.0)
    assert first["val_accuracy"] < rows[-1]["val_accuracy"]
    metrics = json.loads((tmp_path / "out" / "latest" / artifacts.METRICS_FILE).read_text())
    assert metrics["epochs"] == 3  # epoch 0 is no epoch trained


def _lines(rows: list[dict[str, Any]], title: str = "t") -> tuple[Any, Any, Any]:
    fig = loss_figure(rows, title)
    loss_ax, acc_ax = fig.axes
    return fig, loss_ax, acc_ax


def test_the_plot_of_a_train_starts_at_epoch_0_on_an_epochs_axis(tmp_path: Path) -> None:
    rows = _train(tmp_path / "out")
    _, ax, acc = _lines(rows)
    assert ax.get_xlabel() == "epochs"
    # (the lines drawn with a legend entry: not epoch 0's marker at the axis's edge)
    val_line, train_line = [line for line in ax.get_lines()
                            if not str(line.get_label()).startswith("_")]
    (acc_line,) = acc.get_lines()
    assert list(val_line.get_xdata()) == [0.0, 1.0, 2.0, 3.0]
    assert next(iter(acc_line.get_xdata())) == 0.0
    assert list(train_line.get_xdata()) == [1.0, 2.0, 3.0]  # no training loss before training
    left, right = ax.get_xlim()
    assert left <= 0.0 and 3.0 <= right < 3.5
    assert ax.get_ylim()[0] == 0.0


def test_run_rows_are_placed_by_their_fractional_epochs() -> None:
    rows = [{"elapsed": 0.0, "epochs": 0.0, "val_loss": 1.0, "val_accuracy": 0.3},
            {"elapsed": 0.4, "epochs": 0.25, "val_loss": 0.2, "val_accuracy": 0.95},
            {"elapsed": 0.9, "epochs": 0.5, "val_loss": 0.1, "val_accuracy": 0.97}]
    _, ax, acc = _lines(rows)
    assert list(ax.get_lines()[0].get_xdata()) == [0.0, 0.25, 0.5]
    low, high = acc.get_ylim()
    assert low <= 0.3 and 0.97 <= high <= 1.0


def test_close_accuracies_are_not_blown_up_into_a_cliff() -> None:
    rows = [{"epoch": e, "val_loss": 0.05, "val_accuracy": a}
            for e, a in ((1, 0.9876), (2, 0.9901), (3, 0.9917))]
    _, _, acc = _lines(rows)
    low, high = acc.get_ylim()
    assert high - low >= MIN_ACCURACY_SPAN
    assert low < 0.9876 and 0.9917 < high <= 1.0
    assert accuracy_limits([0.0, 0.01]) == pytest.approx((0.0, 0.055))


def test_rows_without_epochs_fall_back_to_seconds() -> None:
    _, ax, _ = _lines([{"elapsed": 1.5, "val_loss": 0.3, "val_accuracy": 0.9}])
    assert ax.get_xlabel() == "elapsed seconds"


def test_a_long_title_is_wrapped_and_nothing_leaves_the_figure() -> None:
    rows = [{"epochs": e / 4, "val_loss": 1 / (e + 1), "train_loss": 1 / (e + 2),
             "val_accuracy": 0.9 + e / 100} for e in range(9)]
    fig, ax, acc = _lines(rows, LONG_TITLE)
    title = ax.get_title()
    assert "\n" in title and all(len(line) <= TITLE_WIDTH for line in title.splitlines())
    canvas = fig.canvas
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    for artist in (ax.title, acc.yaxis.label, ax.yaxis.label, ax.xaxis.label):
        extent = artist.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1, artist
        assert box.y0 <= extent.y0 and extent.y1 <= box.y1, artist


def _events(path: Path) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in a TensorBoard event file, read record by record
    (length, its CRC, the Event message, its CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    out = []
    data = path.read_bytes()
    at = 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = Event.FromString(data[at + 12:at + 12 + length])
        at += 12 + length + 4
        for value in event.summary.value:
            out.append((value.tag, event.step, value.simple_value))
    return out


def test_tensorboard_scalars_of_every_evaluation(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX")
    rows = _train(tmp_path / "out", "--tensorboard", str(tmp_path / "tb"))
    run_name = artifacts.published(tmp_path / "out").resolve().name
    (events,) = (tmp_path / "tb" / run_name).glob("events.out.tfevents.*")
    scalars = _events(events)
    losses = [(step, value) for tag, step, value in scalars if tag == "validation/loss"]
    # At the examples trained on: epoch e of the 4,352 training rows is step 4,352 e.
    metrics = json.loads((tmp_path / "out" / "latest" / artifacts.METRICS_FILE).read_text())
    assert losses == [(r["epoch"] * metrics["train_rows"], pytest.approx(r["val_loss"]))
                      for r in rows]
    assert [step for step, _ in losses] == [0, 4352, 8704, 13056]
    accuracy = [value for tag, _, value in scalars if tag == "validation/accuracy"]
    assert accuracy == [pytest.approx(r["val_accuracy"]) for r in rows]


def test_tensorboard_without_tensorboardx_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed
    code = main(["train", "--data", "bundled:spamassassin", "--out", str(tmp_path / "out"),
                 "--epochs", "1", "--tensorboard", str(tmp_path / "tb")], environ={})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "tensorboard_dir" in err[0] and "tensorboardX" in err[0], err


def test_experiment_panels_wrap_their_titles_and_start_at_epoch_0() -> None:
    from hogwild.experiment import plots

    fig = plots.new_figure(1)
    ax = fig.add_subplot()
    ax.plot([1.0, 2.0, 3.0], [0.3, 0.2, 0.1])  # the experiment's rows start at epoch 1
    plots.epoch_axis(ax)
    plots.panel_title(ax, LONG_TITLE)
    fig.canvas.draw()
    assert ax.get_xlabel() == "epochs" and ax.get_xlim()[0] == 0.0
    assert ax.get_xlim()[1] >= 3.0
    extent = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert fig.bbox.x0 <= extent.x0 and extent.x1 <= fig.bbox.x1


def test_the_png_holds_the_pixels_savefig_would_write(tmp_path: Path) -> None:
    """plot_loss encodes the canvas it drew itself (no second draw by savefig): the same
    pixels, size and resolution as matplotlib's own PNG of the same figure."""
    import io

    import numpy as np
    from PIL import Image

    from hogwild.outputs.plotter import plot_loss

    rows = [{"epoch": 0, "examples": 0, "val_loss": 1.0, "val_accuracy": 0.5},
            {"epoch": 1, "examples": 10, "train_loss": 0.4, "val_loss": 0.3,
             "val_accuracy": 0.9},
            {"epoch": 2, "examples": 20, "train_loss": 0.2, "val_loss": 0.25,
             "val_accuracy": 0.93}]
    written = Image.open(plot_loss(tmp_path, rows, title=LONG_TITLE, saved=1))
    reference = io.BytesIO()
    loss_figure(rows, LONG_TITLE, 1).savefig(reference, format="png")
    expected = Image.open(reference)
    assert written.size == expected.size and written.mode == expected.mode
    assert written.info["dpi"] == pytest.approx(expected.info["dpi"])
    assert np.array_equal(np.asarray(written), np.asarray(expected))
