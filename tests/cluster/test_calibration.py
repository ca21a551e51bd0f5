"""The simulator, calibrated on this machine, runs a real 2-worker run's arithmetic.

`hogwild simulate --calibrate` measures this machine (a thread's kernel speed, what a delta
message costs alone and in a sync round's burst, a worker's own arithmetic a round), then
simulates the run; `hogwild run` trains the same settings as real processes over loopback.
Both train the same rounds on the same rows and end on the same model. How close the
simulated training time comes to the real one is a measurement, not a test:
bench/bench_calibration.py prints the ratio (wall-clock figures of a shared 2-core machine
would make a flaky assertion).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

DATA = "synthetic:rcv1?rows=200000&seed=3"
# The swing guard off: it acts on evaluations, which the two runs take at different points
# (the real coordinator by its wall clock), and this compares their arithmetic.
SETTINGS = ["--data", DATA, "--workers", "2", "--threads", "1", "--epochs", "4",
            "--mode", "sync", "--swing-tolerance", "null", "--insecure", "-q"]


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


def test_a_calibrated_simulation_trains_what_real_processes_train(tmp_path: Path) -> None:
    real = _metrics("run", tmp_path / "real")
    simulated = _metrics("simulate", tmp_path / "sim", "--calibrate")
    assert real["rounds"] == simulated["rounds"]
    assert simulated["simulated_seconds"] > 0 and real["seconds"] > 0
    # The same arithmetic: the simulated run ends on the real one's model. Compared on the
    # last evaluation, not on the model saved: which one that is depends on when each run
    # evaluated (each on its own clock), so the saved model can differ while the training is
    # the same.
    last_real, last_sim = real["last_row"], simulated["last_row"]
    assert isinstance(last_real, dict) and isinstance(last_sim, dict)
    assert last_real["round"] == last_sim["round"] == real["rounds"]
    assert last_real["examples"] == last_sim["examples"]
    # Up to the order of float additions: a peer's delta that lands before a worker's round
    # ends is applied before its own delta is built, else after, which rounds differently,
    # and hinge-loss training carries such differences on. Measured: about 1 real run in 7
    # ended 0.2-0.5 % off in validation loss (accuracy within 0.1 point); the rest matched
    # the simulated run to 1e-14.
    assert abs(last_sim["val_loss"] - last_real["val_loss"]) < 0.01 * last_real["val_loss"], (
        last_sim, last_real)
    assert abs(last_sim["val_accuracy"] - last_real["val_accuracy"]) <= 0.002, (
        last_sim, last_real)
