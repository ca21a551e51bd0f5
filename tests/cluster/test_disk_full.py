"""The coordinator's disk fills up: a full disk for a while costs no training and no evaluation
row; one still full at the end gives a one-line error and keeps the last checkpoint.

The out_dir is a small tmpfs mounted for the test (root only; skipped, saying why, elsewhere).
"""

from __future__ import annotations

import errno
import itertools
import json
import re
import signal
from pathlib import Path

import pytest

from hogwild.cluster.coordinator.checkpoints import checkpoint_file

from .helpers import (
    PROGRESS_ROW,
    Cluster,
    Proc,
    incomplete,
    published,
    read_metrics,
    reuters_settings,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

APPEND_FAILED = re.compile(r"cannot add to \S*metrics\.jsonl \(No space left on device\)")



def _fill(disk: Path) -> Path:
    """Write a file until the disk is full; returns it (delete it to make room again)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:  # unbuffered: nothing left to flush
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def _start(cluster: Cluster, disk: Path, time_budget: float) -> tuple[Path, Proc]:
    """Two workers on Reuters until ``time_budget``, evaluating and checkpointing often, the
    outputs on ``disk``."""
    out = disk / "out"
    cluster.start(2, **reuters_settings(out, epochs=1_000_000, time_budget=time_budget,
                                        eval_interval=0.1, checkpoint_interval=0.5))
    assert cluster.coordinator is not None
    return out, cluster.coordinator


def test_a_disk_full_for_a_while_costs_no_training_and_no_evaluation(
        cluster: Cluster, small_disk: Path) -> None:
    out, coordinator = _start(cluster, small_disk, time_budget=8)
    coordinator.wait_for(PROGRESS_ROW, 60)
    filler = _fill(small_disk)
    coordinator.wait_for(APPEND_FAILED, 10)
    coordinator.wait_for(
        re.compile(r"checkpoint not written: metrics\.jsonl still lacks \d+ evaluation"), 10)
    filler.unlink()
    coordinator.wait_for(re.compile(r"metrics\.jsonl is whole again \(\d+ rows\)"), 10)
    assert coordinator.wait(120) == 0
    assert all(w.wait(30) == 0 for w in cluster.workers), cluster.output()
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "time budget" and metrics["test_accuracy"] > 0.97
    # Said once, not at every evaluation of the full stretch.
    assert len([ln for ln in coordinator.lines if APPEND_FAILED.search(ln)]) == 1
    # Every evaluation is in the file, the full stretch's too (kept in memory, then written).
    rows = [json.loads(line) for line in
            (published(out) / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == metrics["evaluations"]
    gaps = [b["elapsed"] - a["elapsed"] for a, b in itertools.pairwise(rows)]
    assert min(gaps) >= 0 and max(gaps) < 1.0, max(gaps)


def test_a_disk_still_full_at_the_end_is_one_line_and_keeps_the_checkpoint(
        cluster: Cluster, small_disk: Path) -> None:
    out, coordinator = _start(cluster, small_disk, time_budget=5)
    coordinator.wait_for(re.compile(r"^\s*[1-9]\.\d+s\s+\d+\s+\d+"), 60)  # past 1 s
    _fill(small_disk)
    assert coordinator.wait(120) == 1
    text = "\n".join(coordinator.lines)
    assert "Traceback" not in text
    error = [ln for ln in coordinator.lines if ln.startswith("hogwild coordinator: error:")]
    assert len(error) == 1, text
    run = incomplete(out)  # the run's directory, never published
    assert (f"cannot write the outputs to {run} (No space left on device" in error[0]
            and f"the last checkpoint is kept: once there is room, `hogwild coordinator "
                f"--resume {run}`" in error[0]
            and f"this run's files are in {run}, left incomplete" in error[0]), error[0]
    # The checkpoint written before the disk filled is whole, and the rows it counts are in
    # metrics.jsonl (later rows may not be: they never got room).
    kept = checkpoint_file.load(run)
    assert kept is not None and kept.round > 0 and kept.history_rows >= 1
    assert not published(out).exists() and checkpoint_file.locate(out) == run


def test_a_hand_over_whose_checkpoint_cannot_be_written_finishes_the_run_instead(
        cluster: Cluster, small_disk: Path) -> None:
    """on_sigterm checkpoint with no room for the checkpoint: the workers are stopped, not
    sent to a successor that would have nothing to resume, and the run ends as without the
    setting (here: one line, since the outputs find no room either)."""
    out = small_disk / "out"
    cluster.start(2, **reuters_settings(out, epochs=1_000_000, time_budget=120,
                                        eval_interval=0.1, checkpoint_interval=0,
                                        on_sigterm="checkpoint"))
    coordinator = cluster.coordinator
    assert coordinator is not None
    coordinator.wait_for(PROGRESS_ROW, 60)
    _fill(small_disk)
    coordinator.proc.send_signal(signal.SIGTERM)
    assert coordinator.wait(120) == 1
    coordinator.wait_for(re.compile(r"SIGTERM with on_sigterm checkpoint, but the checkpoint "
                                    r"could not be written: finishing the run here instead"), 1)
    assert all(w.wait(30) == 0 for w in cluster.workers), cluster.output()
    assert not any("register again" in line for w in cluster.workers for line in w.lines)
    assert not published(out).exists() and checkpoint_file.locate(out) is None
