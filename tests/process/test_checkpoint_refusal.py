"""A `hogwild coordinator` resuming from a damaged checkpoint: one line, exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint, WorkerEntry
from hogwild.outputs import artifacts


def _saved(directory: Path) -> bytes:
    """The bytes of a small checkpoint saved in ``directory``."""
    checkpoint_file.save(directory, Checkpoint(
        run_id="r1", w=np.linspace(-1.0, 1.0, 40), round=7, elapsed=3.5, deltas_received=12,
        bytes_received=4096, duplicates=1,
        workers=[WorkerEntry(0, "127.0.0.1:5000", 2, examples=100, round=7)],
        early={"best_loss": 0.25, "best_index": 3, "evaluations": 6, "since_best": 2},
        best_w=np.linspace(0.0, 2.0, 40)))
    return (directory / checkpoint_file.CHECKPOINT_FILE).read_bytes()


def test_the_coordinator_refuses_a_damaged_checkpoint_in_one_line(tmp_path: Path) -> None:
    # The run's directory under the runs root, as a coordinator killed mid-run leaves it.
    run = tmp_path / "runs" / "20250101-000000-r1.incomplete"
    run.mkdir(parents=True)
    good = _saved(run)
    (run / checkpoint_file.CHECKPOINT_FILE).write_bytes(good[: len(good) // 2])
    proc = subprocess.run(
        [sys.executable, "-m", "hogwild.cli", "coordinator", "--insecure", "--workers", "1",
         "--port", "0", "--resume", str(tmp_path / "runs"), "--out", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("hogwild coordinator: error: setting 'resume': the checkpoint "
                               f"{run / checkpoint_file.CHECKPOINT_FILE} is damaged"), lines
    # Still there to be repaired or copied over; nothing was published.
    # Nothing written beside the checkpoint (the lock file is the process's flock, empty).
    assert sorted(p.name for p in run.iterdir()
                  if p.name != artifacts.LOCK_FILE) == [checkpoint_file.CHECKPOINT_FILE]
    assert not (tmp_path / "runs" / "latest").exists()
