"""`hogwild experiment --workers`: cluster runs through the real `hogwild run` launcher."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hogwild.cli import main

pytestmark = pytest.mark.cluster


def test_worker_sweep_runs_real_processes_and_plots(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "exp"
    code = main(["experiment", "--quick", "--out", str(out), "--workers", "1,2",
                 "--trainers", "serial", "--threads", "1", "--rows", "", "--batch-sizes", "",
                 "--no-regression", "--main-rows", "6000", "--epochs", "2"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    with open(out / "runs.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    cluster = {int(r["workers"]): r for r in rows if r["trainer"] == "cluster"}
    assert sorted(cluster) == [1, 2]
    serial = [r for r in rows if r["trainer"] == "serial"]
    assert len(serial) == 1 and serial[0]["source"] == cluster[1]["source"]
    for w, r in cluster.items():
        assert r["status"] == "ok", r
        assert 0.0 <= float(r["test_error"]) < 0.5
        assert float(r["wall_seconds"]) > 0 and float(r["cpu_seconds"]) > 0
        # A speedup only where both runs lasted long enough to time (2 epochs of 6,000 rows
        # in one thread may not: then the row says so instead).
        if r["timing"] == "ok":
            assert float(r["speedup"]) > 0
        else:
            assert r["speedup"] == "" and "too short to time" in r["timing"], r
        run_dir = out / "cluster" / f"w{w}-t1-r0"
        metrics = json.loads((run_dir / "latest" / "metrics.json").read_text(encoding="utf-8"))
        assert metrics["workers"] == w and metrics["epochs"] >= 2
        assert (run_dir / "run.log").read_text(encoding="utf-8").count("[worker-") > 0
    png = (out / "plots" / "workers.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
