"""The simulator, calibrated on this machine, predicts a real 2-worker run's training time.

`hogwild simulate --calibrate` measures one thread's kernel speed and the cost of a delta
message here, then simulates the run; `hogwild run` trains the same settings as real
processes over loopback. Their training times must agree within 30 % (the same rounds, the
same rows: the simulated run is the real one's arithmetic on a simulated clock), and so must
the models both end on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

DATA = "synthetic:rcv1?rows=200000&seed=3"
SETTINGS = ["--data", DATA, "--workers", "2", "--threads", "1", "--epochs", "4",
            "--mode", "sync", "--insecure", "-q"]


def _metrics(command: str, out: Path, *extra: str) -> dict[str, object]:
    """The run's metrics.json, with its last evaluation (metrics.jsonl) as ``last_row``."""
    proc = subprocess.run(
        [sys.executable, "-m", "hogwild.cli", command, *SETTINGS, "--out", str(out), *extra],
        check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = dict(json.loads((out / "latest" / "metrics.json").read_text()))
    rows = (out / "latest" / "metrics.jsonl").read_text().splitlines()
    metrics["last_row"] = json.loads(rows[-1])
    return metrics


def test_calibrated_simulation_agrees_with_real_processes(tmp_path: Path) -> None:
    # The faster of two real runs, as the calibration takes the fastest of its passes: what
    # the machine does undisturbed by whatever else runs on it.
    real = min((_metrics("run", tmp_path / f"real{i}") for i in range(2)),
               key=lambda m: float(m["seconds"]))  # type: ignore[arg-type]
    simulated = _metrics("simulate", tmp_path / "sim", "--calibrate")
    assert real["rounds"] == simulated["rounds"]
    real_s, sim_s = float(real["seconds"]), float(simulated["simulated_seconds"])  # type: ignore[arg-type]
    assert 0.7 <= sim_s / real_s <= 1.3, (sim_s, real_s)
    # The same arithmetic: the simulated run ends on the real one's model. Compared on the
    # last evaluation, not on the model saved: which one that is depends on when each run
    # evaluated (the real one every eval_interval seconds of wall time, the simulated one
    # every round), so the saved model can differ while the training is the same.
    last_real, last_sim = real["last_row"], simulated["last_row"]
    assert isinstance(last_real, dict) and isinstance(last_sim, dict)
    assert last_real["round"] == last_sim["round"] == real["rounds"]
    assert abs(last_sim["val_loss"] - last_real["val_loss"]) < 1e-4 * last_real["val_loss"], (
        last_sim, last_real)
    assert abs(last_sim["val_accuracy"] - last_real["val_accuracy"]) <= 0.0005, (
        last_sim, last_real)
