"""`hogwild experiment`: the plan it expands to, its derived columns, and a real quick run."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from hogwild.cli import main
from hogwild.errors import ConfigError
from hogwild.experiment import ExperimentOptions, build_plan
from hogwild.experiment.plan import quick_options
from hogwild.experiment.records import summary_lines
from hogwild.experiment.runner import MIN_TIMED_SECONDS, SERIAL_TOO_SHORT, TOO_SHORT, derive

PLOTS = ("speedup.png", "test_error.png", "train_error.png", "cpu_time.png",
         "batch_size.png", "regression.png")


def test_plan_has_every_study_once_with_serial_references() -> None:
    opts = ExperimentOptions(threads=(1, 2, 4), trainers=("hogwild", "locked", "syncsgd"),
                             main_rows=1000, rows=(500, 1000), batch_sizes=(2, 125),
                             sync_batch_size=125, cores=2)
    plan, skipped = build_plan(opts)
    keys = [s.key for s in plan]
    assert len(keys) == len(set(keys))
    by_key = {s.key: s for s in plan}
    main_src = "synthetic:rcv1?rows=1000&seed=0"
    # A serial reference per data set, although serial is not among the trainers.
    for src in (main_src, "synthetic:rcv1?rows=500&seed=0",
                "synthetic:regression?rows=100000&dim=1000&seed=0"):
        assert (src, "serial", 1, 1, 0) in by_key
    # The main set's hogwild 1-thread run serves the threads, size and batch studies.
    assert set(by_key[(main_src, "hogwild", 2, 1, 0)].studies) == {"threads", "size", "batch"}
    # syncsgd at batch 125 belongs to the threads and the batch study.
    assert set(by_key[(main_src, "syncsgd", 4, 125, 0)].studies) == {"threads", "batch"}
    assert (main_src, "hogwild", 4, 2, 0) in by_key
    # syncsgd with fewer rows per mini-batch than threads is left out, and said so.
    assert (main_src, "syncsgd", 4, 2, 0) not in by_key
    assert any("syncsgd" in line and "batch 2" in line for line in skipped)
    assert not any(s.workers for s in plan)


def test_plan_without_regression_and_with_workers() -> None:
    opts = ExperimentOptions(threads=(1,), trainers=("serial",), main_rows=1000, rows=(),
                             batch_sizes=(), regression=False, workers=(1, 2), cores=2)
    plan, _ = build_plan(opts)
    assert sorted(s.workers for s in plan) == [0, 1, 2]
    assert all("regression" not in s.data.source for s in plan)


@pytest.mark.parametrize("change, key", [
    ({"threads": (0,)}, "threads"), ({"trainers": ("fast",)}, "trainers"),
    ({"epochs": 0}, "epochs"), ({"loss": "squared"}, "loss"), ({"rows": (5,)}, "rows"),
    ({"batch_sizes": (0,)}, "batch_sizes"), ({"batch_lr_scaling": "x"}, "batch_lr_scaling"),
])
def test_bad_options_name_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        ExperimentOptions(**change)


def test_options_that_are_settings_follow_the_schemas_rules() -> None:
    # workers up to the schema's 1024 (not a bound of the experiment's own), each value
    # refused with the schema's reason under the option's name.
    assert ExperimentOptions(workers=(1, 100, 1024)).workers == (1, 100, 1024)
    for change, key, reason in [
            ({"workers": (2, 1025)}, "workers", "between 1 and 1024, got 1025"),
            ({"worker_threads": 257}, "worker_threads", "between 1 and 256, got 257"),
            ({"sync_batch_size": 1 << 21}, "sync_batch_size", "between 1 and 1048576"),
            ({"trainers": ("hogwild", "fast")}, "trainers", "syncsgd, got 'fast'"),
            ({"epochs": True}, "epochs", "expected an integer"),
            ({"seed": -1}, "seed", "between 0 and 2**64 - 1")]:
        with pytest.raises(ConfigError) as err:
            ExperimentOptions(**change)
        assert err.value.key == key and reason in err.value.reason, change


def test_bad_flag_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "--threads", "1,two"]) == 2
    assert "threads" in capsys.readouterr().err


def test_learning_rate_scaling() -> None:
    assert ExperimentOptions().learning_rate(0.5, 125) == 0.5
    assert ExperimentOptions(batch_lr_scaling="linear").learning_rate(0.5, 4) == 2.0
    assert ExperimentOptions(batch_lr_scaling="sqrt").learning_rate(0.5, 4) == 1.0


def _rec(trainer: str, wall: float, val_losses: list[float], elapsed: list[float]) -> dict[str, Any]:
    return {"source": "s", "loss": "hinge", "trainer": trainer, "status": "ok",
            "wall_seconds": wall, "val_loss": val_losses[-1],
            "epoch_rows": [{"epoch": i + 1, "elapsed": e, "val_loss": v}
                           for i, (v, e) in enumerate(zip(val_losses, elapsed))]}


def test_derive_speedup_and_time_to_target() -> None:
    serial = _rec("serial", 4.0, [0.5, 0.3, 0.2], [1.0, 2.0, 4.0])
    fast = _rec("hogwild", 2.0, [0.4, 0.2, 0.19], [0.5, 1.0, 2.0])
    never = _rec("syncsgd", 1.0, [0.9, 0.8, 0.7], [0.3, 0.6, 1.0])
    records = [serial, fast, never]
    derive(records, ExperimentOptions(target_slack=0.1))
    assert serial["target_loss"] == pytest.approx(0.22)
    assert serial["speedup"] == 1.0 and fast["speedup"] == 2.0 and never["speedup"] == 4.0
    assert serial["time_to_target"] == 4.0 and fast["time_to_target"] == 1.0
    assert fast["speedup_to_target"] == 4.0
    assert never["time_to_target"] is None and never["speedup_to_target"] is None
    derive(records, ExperimentOptions(target_loss=0.3))
    assert serial["time_to_target"] == 2.0 and fast["time_to_target"] == 1.0


def test_runs_too_short_to_time_get_no_speedup() -> None:
    short = MIN_TIMED_SECONDS / 5
    serial = _rec("serial", 0.4, [0.5, 0.3, 0.2], [0.1, 0.2, 0.4])
    quick = _rec("hogwild", short, [0.4, 0.2, 0.19], [short / 3, short / 2, short])
    timed = _rec("locked", 0.2, [0.4, 0.2, 0.19], [0.05, 0.1, 0.2])
    records = [serial, quick, timed]
    for rec in records:
        rec.update(data="d", batch_size=1, workers=0, threads=2, oversubscribed=False,
                   cpu_seconds=rec["wall_seconds"], test_error=0.1)
    derive(records, ExperimentOptions(target_slack=0.1))
    assert quick["timing"] == TOO_SHORT and quick["time_to_target"] is not None
    assert quick["speedup"] is None and quick["speedup_to_target"] is None
    assert timed["timing"] == "ok" and timed["speedup"] == 2.0
    lines = summary_lines(records)
    row = next(line for line in lines if line.startswith("d ") and " hogwild " in line)
    assert row.split()[7] == "-" and f"{TOO_SHORT} (under 50 ms): no speedup" in row
    assert lines[-1].startswith("1 of 3 runs trained for under 50 ms (too short to time) "
                                "and 0 more")
    # A serial run too short to time leaves every ratio against it out too.
    serial["wall_seconds"] = short
    derive(records, ExperimentOptions(target_slack=0.1))
    assert all(r["speedup"] is None for r in records)
    assert [r["timing"] for r in records] == [TOO_SHORT, TOO_SHORT, SERIAL_TOO_SHORT]
    row = next(line for line in summary_lines(records) if " locked " in line)
    assert row.endswith(f"{SERIAL_TOO_SHORT}: no speedup")


def _num(text: str) -> float | None:
    return float(text) if text else None


def test_quick_experiment_writes_tables_and_plots(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "exp"
    assert main(["experiment", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"plots (6) in {out / 'plots'}" in printed

    opts = quick_options(out_dir=str(out))
    plan, _ = build_plan(opts)
    with open(out / "runs.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(plan) * opts.repeats
    got = {(r["source"], r["trainer"], int(r["threads"]), int(r["batch_size"])) for r in rows}
    assert got == {(s.data.source, s.trainer, s.threads, s.batch_size) for s in plan}
    for r in rows:
        assert r["status"] == "ok", r
        wall, cpu = float(r["wall_seconds"]), float(r["cpu_seconds"])
        assert wall > 0 and cpu > 0
        assert int(r["epochs_done"]) == opts.epochs
        assert (r["oversubscribed"] == "true") == (int(r["threads"]) > opts.cores)
        if r["timing"] != "ok":
            # Quick runs train for milliseconds: timed, but no ratio derived from them.
            assert r["speedup"] == "" and r["speedup_to_target"] == ""
        else:
            speedup = float(r["speedup"])
            assert math.isfinite(speedup) and speedup > 0
            assert r["trainer"] != "serial" or speedup == 1.0
        if r["trainer"] == "serial":
            assert _num(r["time_to_target"]) is not None
        if r["loss"] == "squared":
            assert r["test_error"] == "" and r["train_error"] == ""
            for key in ("test_rmse", "train_rmse"):
                assert 0 < float(r[key]) < 10
        else:
            for key in ("test_error", "train_error"):
                assert 0.0 <= float(r[key]) <= 1.0
            assert r["test_rmse"] == "" and r["train_rmse"] == ""
            assert float(r["test_error"]) < 0.5 or int(r["batch_size"]) > 1

    lines = (out / "runs.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(rows)
    for line in lines:
        rec = json.loads(line)
        # Epoch 0 is the model before training, as in `train` and `run`.
        assert [e["epoch"] for e in rec["epoch_rows"]] == list(range(opts.epochs + 1))
        key = "train_rmse" if rec["loss"] == "squared" else "train_error"
        errors = [e[key] for e in rec["epoch_rows"]]
        assert all(e is not None and 0.0 <= e <= (10.0 if key == "train_rmse" else 1.0)
                   for e in errors)
    # Per-example SGD learns: the serial run's training error falls below chance.
    serial = [json.loads(line) for line in lines if json.loads(line)["trainer"] == "serial"]
    assert all(rec["epoch_rows"][-1]["train_error"] < 0.4 for rec in serial
               if rec["loss"] != "squared")

    for name in PLOTS:
        data = (out / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    assert not (out / "plots" / "workers.png").exists()
    assert (out / "summary.txt").read_text(encoding="utf-8").count("serial") >= 3


def test_train_command_takes_syncsgd_and_batch_size(tmp_path: Path) -> None:
    out = tmp_path / "train"
    assert main(["train", "--trainer", "syncsgd", "--batch-size", "8", "--threads", "2",
                 "--epochs", "3", "--patience", "0", "--out", str(out)]) == 0
    metrics = json.loads((out / "latest" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["trainer"] == "syncsgd" and metrics["batch_size"] == 8
    assert metrics["test_accuracy"] > 0.9
