"""`hogwild simulate` as a user runs it: the run's outputs, one line for a bad flag."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from hogwild import cli
from hogwild.commands.simulate import slower_than_one


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(argv), environ={})
    return code, out.getvalue(), err.getvalue()


def test_simulate_writes_what_run_writes(tmp_path: Path) -> None:
    code, out, err = _run("simulate", "--workers", "4", "--threads", "1", "--mode", "async",
                          "--engage", "all", "--epochs", "3", "--log-level", "warning",
                          "--out", str(tmp_path))
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


def test_workers_the_data_cannot_keep_busy_are_released(tmp_path: Path) -> None:
    """engage auto: 8 workers started on the bundled set (a few hundred thousand non-zeros)
    train as 2, which the output says with the way to train on all; 2 speeds of the 8 given
    are those of the 2 engaged."""
    code, out, err = _run("simulate", "--workers", "8", "--threads", "1", "--epochs", "1",
                          "--speeds", "1e8,2e8,3e8,4e8,5e8,6e8,7e8,8e8",
                          "--log-level", "warning", "--out", str(tmp_path))
    assert code == 0, err
    note = next(line for line in out.splitlines() if line.startswith("note: engaging"))
    assert note.startswith("note: engaging 2 of 8 workers:") and "`engage: all`" in note
    assert "simulating 2 worker(s)" in out
    metrics = json.loads((tmp_path / "latest" / "metrics.json").read_text())
    assert metrics["workers"] == 2 and metrics["workers_started"] == 8
    code, out, err = _run("simulate", "--workers", "8", "--threads", "1", "--epochs", "1",
                          "--engage", "all", "--log-level", "warning", "--out", str(tmp_path))
    assert code == 0, err
    assert "note: engaging" not in out and "simulating 8 worker(s)" in out


def test_workers_slower_than_one_are_said_to_be(tmp_path: Path) -> None:
    """2 workers on the bundled set (a few thousand rows) take many times one worker's time,
    which a note before the done line says, with what to do instead; one worker's run and a
    run faster than one worker print no such note."""
    code, out, err = _run("simulate", "--workers", "2", "--epochs", "2", "--log-level",
                          "warning", "--out", str(tmp_path))
    assert code == 0, err
    metrics = json.loads((tmp_path / "latest" / "metrics.json").read_text())
    assert metrics["speedup"] < 1.0
    lines = out.splitlines()
    note = next(line for line in lines if line.startswith("note: these 2 workers took "))
    assert lines.index(note) < len(lines) - 1 and lines[-1].startswith("done:")
    slower = 1.0 / metrics["speedup"]
    assert f"took {slower:.3g}x one worker's time" in note and "`hogwild train`" in note
    code, out, err = _run("simulate", "--workers", "1", "--epochs", "2", "--log-level",
                          "warning", "--out", str(tmp_path))
    assert code == 0, err
    assert "note: these" not in out


def test_the_slower_note_names_what_the_workers_did() -> None:
    waited = slower_than_one(4, 0.5, {"training": 0.2, "waiting": 0.7, "sending": 0.9})
    assert waited is not None and not waited.startswith("note")
    assert "took 2x one worker's time" in waited and "waiting for messages" in waited
    busy = slower_than_one(4, 0.8, {"training": 0.6, "waiting": 0.3, "sending": 0.9})
    assert busy is not None and "took 1.25x" in busy and "exchange between them" in busy
    assert slower_than_one(4, 1.0, {"training": 1.0, "waiting": 0.0, "sending": 0.1}) is None
    assert slower_than_one(1, 0.5, {"training": 0.5, "waiting": 0.0, "sending": 0.5}) is None


def test_a_bad_simulation_flag_is_one_line(tmp_path: Path) -> None:
    code, _out, err = _run("simulate", "--workers", "3", "--speeds", "1e8,2e8",
                          "--out", str(tmp_path))
    assert code == 2
    assert err.strip().splitlines() == [
        ("hogwild simulate: error: --speeds: 2 values for 3 workers (give one, or one per "
        "worker)")]
    code, _, err = _run("simulate", "--bandwidth", "0", "--out", str(tmp_path))
    assert code == 2 and "--bandwidth 0.0: must be between 1 and 1e13" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag, value, named", [
    ("--speed-spread", "1e300", "--speed-spread 1e+300: must be between 0 and 3"),
    ("--speed-spread", "nan", "--speed-spread nan: must be between 0 and 3"),
    ("--slices", "1000000000", "--slices 1000000000: must be between 1 and 1024"),
    ("--slices", "2.5", "--slices: '2.5' is not a whole number"),
    ("--evals-per-epoch", "1000000000", "--evals-per-epoch 1000000000.0: must be above 0"),
    ("--evals-per-epoch", "0", "--evals-per-epoch 0.0: must be above 0"),
    ("--speeds", "1,abc,3", "--speeds: value 2 ('abc') is not a number"),
    ("--speeds", "4e8,inf", "--speeds: value 2 (inf) must be between 1 and 1e13"),
    ("--speed", "-1", "--speed -1.0: must be between 1 and 1e13"),
    ("--latency", "1e300", "--latency 1e+300: must be between 0 and 3600"),
    ("--overhead", "x", "--overhead: 'x' is not a number"),
    ("--max-events", "0", "--max-events 0.0: must be between 1 and 1e12"),
])
def test_a_hostile_simulation_flag_is_one_line_naming_it(tmp_path: Path, flag: str,
                                                          value: str, named: str) -> None:
    """Refused before any data is read, with the flag named: no traceback, no long run."""
    code, out, err = _run("simulate", flag, value, "--out", str(tmp_path))
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hogwild simulate: error: {named}"), err
    assert "rows" not in out  # no data loaded


def test_a_simulation_too_large_is_refused_before_it_runs(tmp_path: Path) -> None:
    """1024 workers in a mesh: R x W x W deliveries, refused with the estimate and the
    setting that makes it, before the shards are cut; --max-events lets it through."""
    code, out, err = _run("simulate", "--workers", "1024", "--threads", "1", "--engage", "all",
                          "--out", str(tmp_path))
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("hogwild simulate: error: this simulation would take about ")
    assert "--workers 1024" in line and "x 1024 x 1024" in line and "--max-events" in line
    assert "simulating" not in out


def test_the_estimate_is_the_simulation_s_own_count(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A sync mesh: the deliveries estimated (R x W x W) are the messages it sends, within
    10 %; a run above WARN_EVENTS says so before it starts (lowered here to show it)."""
    import hogwild.commands.simulate as job

    monkeypatch.setattr(job, "WARN_EVENTS", 100)
    code, _out, err = _run("simulate", "--workers", "4", "--threads", "1", "--epochs", "2",
                           "--engage", "all", "--log-level", "warning", "--out", str(tmp_path))
    assert code == 0, err
    metrics = json.loads((tmp_path / "latest" / "metrics.json").read_text())
    estimate = metrics["rounds"] * 4 * 4
    assert abs(metrics["messages"] - estimate) <= 0.1 * estimate, (metrics["messages"],
                                                                   estimate)
    assert any("this simulation takes about" in r.getMessage() for r in caplog.records)
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
