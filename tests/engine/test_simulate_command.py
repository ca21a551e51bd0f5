"""`hogwild simulate` as a user runs it: the run's outputs, one line for a bad flag."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from hogwild import cli


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(argv), environ={})
    return code, out.getvalue(), err.getvalue()


def test_simulate_writes_what_run_writes(tmp_path: Path) -> None:
    code, out, err = _run("simulate", "--workers", "4", "--threads", "1", "--mode", "async",
                          "--epochs", "3", "--log-level", "warning", "--out", str(tmp_path))
    assert code == 0, err
    run = tmp_path / "latest"  # the run's own directory, published whole
    for name in ("model.npz", "model.json", "metrics.json", "metrics.jsonl", "loss.png"):
        assert (run / name).stat().st_size > 0, name
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["command"] == "simulate" and metrics["workers"] == 4
    assert metrics["staleness"] == 2 and metrics["max_staleness"] <= 2
    assert metrics["test_accuracy"] > 0.95  # SpamAssassin, bundled
    assert metrics["combine"] == "sum" and "combine sum, staleness" in out
    rows = [json.loads(line) for line in
            (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) >= 4 and rows[0]["examples"] == 0  # the model before training
    assert rows[-1]["epoch"] >= 2.9
    assert "test accuracy" in out.splitlines()[-1]
    assert out.splitlines()[-1].endswith(f"outputs in {run.resolve()}")


def test_a_bad_simulation_flag_is_one_line(tmp_path: Path) -> None:
    code, _out, err = _run("simulate", "--workers", "3", "--speeds", "1e8,2e8",
                          "--out", str(tmp_path))
    assert code == 2
    assert err.strip().splitlines() == [
        ("hogwild simulate: error: --speeds: 2 values for 3 workers (give one, or one per "
        "worker)")]
    code, _, err = _run("simulate", "--bandwidth", "0", "--out", str(tmp_path))
    assert code == 2 and "bandwidth must be finite and > 0" in err
    assert len(err.strip().splitlines()) == 1


def test_the_header_shows_a_staleness_bound_for_async_runs_only(tmp_path: Path) -> None:
    code, out, err = _run("simulate", "--workers", "2", "--threads", "1", "--mode", "sync",
                          "--epochs", "1", "--out", str(tmp_path))
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("simulating "))
    assert "sync, mesh, combine sum;" in header and "staleness" not in header, header


def test_a_last_row_over_a_short_stretch_is_marked() -> None:
    """The last row's training loss may average the few examples trained after the last
    evaluation due: shown in parentheses, with a note saying how few."""
    from types import SimpleNamespace

    from hogwild.commands.simulate import _print_rows

    def row(epoch: float, examples: int, loss: float | None) -> dict[str, object]:
        return {"epoch": epoch, "elapsed": epoch / 100, "examples": examples,
                "train_loss": loss, "val_loss": 0.03, "val_accuracy": 0.99}

    history = [row(0, 0, None), row(1, 1000, 0.05), row(2, 2000, 0.023),
               row(2.05, 2050, 0.002)]
    out = io.StringIO()
    _print_rows(SimpleNamespace(history=history), out)  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert "(0.0020)" in lines[4] and "0.0230" in lines[3] and "(" not in lines[3]
    assert lines[5] == ("(training loss over the last 50 examples only, against about "
                        "1,000 per row: too few to compare)")
    out = io.StringIO()
    _print_rows(SimpleNamespace(history=history[:3]), out)  # type: ignore[arg-type]
    assert "(" not in out.getvalue().split("\n", 1)[1]
