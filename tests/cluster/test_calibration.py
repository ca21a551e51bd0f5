"""The simulator, calibrated on this machine, predicts a real 2-worker run's training time.

`hogwild simulate --calibrate` measures one thread's kernel speed and the cost of a delta
message here, then simulates the run; `hogwild run` trains the same settings as real
processes over loopback. Their training times must agree within 30 % (the same rounds, the
same rows: the simulated run is the real one's arithmetic on a simulated clock).
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
    proc = subprocess.run(
        [sys.executable, "-m", "hogwild.cli", command, *SETTINGS, "--out", str(out), *extra],
        check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads((out / "latest" / "metrics.json").read_text()))


def test_calibrated_simulation_agrees_with_real_processes(tmp_path: Path) -> None:
    # The faster of two real runs, as the calibration takes the fastest of its passes: what
    # the machine does undisturbed by whatever else runs on it.
    real = min((_metrics("run", tmp_path / f"real{i}") for i in range(2)),
               key=lambda m: float(m["seconds"]))  # type: ignore[arg-type]
    simulated = _metrics("simulate", tmp_path / "sim", "--calibrate")
    assert real["rounds"] == simulated["rounds"]
    real_s, sim_s = float(real["seconds"]), float(simulated["simulated_seconds"])  # type: ignore[arg-type]
    assert 0.7 <= sim_s / real_s <= 1.3, (sim_s, real_s)
    # The same arithmetic: the simulated run ends on the real one's accuracy.
    assert abs(float(simulated["test_accuracy"]) - float(real["test_accuracy"])) < 0.005  # type: ignore[arg-type]
