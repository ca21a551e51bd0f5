"""What `train`, `predict` and `eval` print: thinned rows, -q, -v, --json, no idle warnings."""

from __future__ import annotations

import io
import itertools
import json
import logging
import re
from pathlib import Path

import pytest

from hogwild.cli import main
from hogwild.outputs import artifacts
from hogwild.outputs.console import (
    CLEAR_LINE,
    NORMAL,
    QUIET,
    VERBOSE,
    Console,
    RowThrottle,
    Verbosity,
    eta_text,
)

ROW = re.compile(r"^\s*(\d+)\s+[\d.]+m?s\s")


def _train(out: Path, *extra: str) -> int:
    return main(["train", "--data", "bundled:spamassassin", "--out", str(out), "--threads", "1",
                 "--patience", "0", *extra], environ={})


def _rows(text: str) -> list[int]:
    return [int(m[1]) for m in map(ROW.match, text.splitlines()) if m]


def test_a_long_train_prints_few_rows_and_keeps_every_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _train(tmp_path / "out", "--epochs", "200") == 0
    printed = _rows(capsys.readouterr().out)
    history = (artifacts.published(tmp_path / "out") / artifacts.HISTORY_FILE).read_text()
    assert len(history.splitlines()) == 201  # epoch 0 (the model before training) and 200
    metrics = json.loads((tmp_path / "out" / "latest" / artifacts.METRICS_FILE).read_text())
    # 1, 2, 4, ..., 128, at most one a second in between, and the last; before any of
    # them the best row held back since the last one printed (the model saved is shown).
    assert printed[:4] == [1, 2, 4, 8] and printed[-1] == 200, printed
    assert len(printed) <= 2 * (9 + int(metrics["seconds"]) + 1), printed
    assert printed == sorted(printed) and metrics["saved_epoch"] in printed, printed


def test_verbose_prints_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _train(tmp_path / "out", "--epochs", "40", "-v") == 0
    assert _rows(capsys.readouterr().out) == list(range(1, 41))


def test_quiet_train_prints_only_the_result(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert _train(tmp_path / "out", "--epochs", "3", "-q") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("done (max epochs): 3 epochs"), lines


def test_train_json_is_one_object_equal_to_metrics_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _train(tmp_path / "out", "--epochs", "3", "--json") == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1, captured.out
    printed = json.loads(captured.out)
    written = json.loads((tmp_path / "out" / "latest" / artifacts.METRICS_FILE).read_text())
    assert printed == written and printed["command"] == "train"
    # The human lines went to standard error.
    assert "done (max epochs)" in captured.err and _rows(captured.err) == [1, 2, 3]


def test_train_does_not_warn_about_conflicts(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             caplog: pytest.LogCaptureFixture) -> None:
    # SpamAssassin's rows conflict densely (n/(2Δ) < 1): nothing in train's settings acts on
    # that, so it is in metrics.json and an info log, not a warning on every run.
    with caplog.at_level(logging.INFO):
        assert _train(tmp_path / "out", "--epochs", "1") == 0
    out = capsys.readouterr().out
    assert "conflict" not in out, out
    assert not [r for r in caplog.records if "conflict" in r.getMessage()
                and r.levelno >= logging.WARNING]
    assert any("conflicts (" in r.getMessage() for r in caplog.records)
    metrics = json.loads((tmp_path / "out" / "latest" / artifacts.METRICS_FILE).read_text())
    assert metrics["conflicts"]["tau_bound"] < 1


def _model(tmp_path: Path) -> Path:
    assert _train(tmp_path / "model", "--epochs", "2", "-q") == 0
    return tmp_path / "model" / "latest"


def test_predict_and_eval_quiet_and_json(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path)
    capsys.readouterr()
    data = "bundled:spamassassin/test"
    preds = tmp_path / "preds.txt"
    assert main(["predict", "--model", str(model), "--data", data, "--out", str(preds),
                 "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("accuracy "), lines

    assert main(["predict", "--model", str(model), "--data", data, "--out", str(preds),
                 "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert len(out.splitlines()) == 1
    assert doc["rows"] == 1210 == len(preds.read_text().splitlines())
    assert doc["predictions"] == str(preds) and 0.9 < doc["accuracy"] <= 1.0

    assert main(["eval", "--model", str(model), "--data", data, "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("accuracy "), lines
    # eval --json as before: one object, the metrics at its top level.
    assert main(["eval", "--model", str(model), "--data", data, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == doc["accuracy"]


def test_predict_json_needs_a_file_for_the_predictions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path)
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", "bundled:spamassassin/test",
                 "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "--out" in captured.err


def test_row_throttle_doubles_then_keeps_one_a_second() -> None:
    now = [0.0]
    rows = RowThrottle(NORMAL, gap=1.0, clock=lambda: now[0])
    printed = []
    for i in range(1, 101):  # a row every 0.05 s: 5 s in all
        now[0] = i * 0.05
        if rows.due():
            printed.append(i)
    # 1, 2, 4, ..., 64 by count; in between, the first row a second (20 rows) after the last.
    assert printed[:4] == [1, 2, 4, 8] and 64 in printed
    assert all(b - a <= 20 for a, b in itertools.pairwise(printed))
    assert len(printed) <= 7 + 5
    assert [RowThrottle(VERBOSE).due() for _ in range(3)] == [True] * 3
    assert not any(RowThrottle(QUIET).due() for _ in range(3))


class _Terminal(io.StringIO):
    """A stream that says it is a terminal (as sys.stdout is in an interactive shell)."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_held_rows_show_as_one_live_line_with_an_eta() -> None:
    clock = itertools.count(0.0, 0.5)  # every call half a second later
    rows = RowThrottle(NORMAL, gap=100.0, clock=lambda: next(clock), live=True)
    out = _Terminal()
    rows.offer("row 1", out, done=0.1)   # 1st: printed
    rows.offer("row 2", out, done=0.2)   # 2nd: printed
    rows.offer("row 3", out, done=0.3)   # held: drawn live, with its ETA
    text = out.getvalue()
    assert text.startswith("row 1\nrow 2\n")
    live = text[len("row 1\nrow 2\n"):]
    assert live.startswith(CLEAR_LINE) and "\n" not in live
    assert "row 3  [30% ETA" in live
    console = Console(out)
    console.follow(rows)
    console.say("a warning")               # erases the live line first
    assert out.getvalue().endswith(CLEAR_LINE + "a warning\n")
    rows.offer("row 4", out, done=1.0)     # the 4th row is printed (doubling)
    rows.offer("row 5", out, done=1.0)
    rows.flush(out)                        # the held last row, on a line of its own
    assert out.getvalue().endswith(CLEAR_LINE + "row 5\n")


def test_no_live_line_where_the_output_is_not_a_terminal() -> None:
    out = io.StringIO()
    rows = Console(out).rows()
    assert not rows.live
    for i in range(6):
        rows.offer(f"row {i}", out, done=i / 6)
    assert "\r" not in out.getvalue()
    assert not Console(_Terminal(), Verbosity(level=VERBOSE)).rows().live


def test_eta_text() -> None:
    assert eta_text(0.5, 10.0) == "ETA 10s"
    assert eta_text(0.25, 60.0) == "ETA 3m00s"
    assert eta_text(0.1, 3600.0) == "ETA 9.0h"
    assert eta_text(0.0, 5.0) == "" and eta_text(1.0, 5.0) == ""
