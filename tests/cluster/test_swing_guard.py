"""A cluster run whose validation accuracy swings is acted on: every worker's step shrinks.

A step size far too large for the data (500, constant schedule) with short rounds (500
examples) makes the global model's validation accuracy jump by several points between
evaluations: two seconds of it (about 110 evaluations) made the guard act all four times in
each of six runs tried here. The coordinator must say what it
saw and what it changed, every worker must take the change (its log says so), and the run
still saves its best validated model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .helpers import Cluster, read_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

SWINGING = {"data": "synthetic:rcv1?rows=60000&seed=3", "learning_rate": 500,
            "lr_schedule": "constant", "round_size": 500, "epochs": 1_000_000,
            "time_budget": 2, "patience": 0, "eval_interval": 0.02,
            "threads": 1, "mode": "sync", "rpc_timeout": 5, "barrier_timeout": 5,
            "connect_timeout": 60, "register_timeout": 120, "data_cache": False}


def _run(cluster: Cluster, out: Path, **extra: Any) -> dict[str, Any]:
    cluster.start(2, **{**SWINGING, "out_dir": str(out), **extra})
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(180) == 0, cluster.output()
    for worker in cluster.workers:
        assert worker.wait(60) == 0, cluster.output()
    return read_metrics(out)


def test_a_swing_halves_every_workers_step_and_is_said(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    metrics = _run(cluster, tmp_path / "out")
    adjustments = metrics["adjustments"]
    assert adjustments, "no swing acted on:\n" + cluster.output()
    first = adjustments[0]
    assert first["number"] == 1 and first["lr_scale"] == 0.5
    assert first["staleness"] is None  # sync: no staleness bound to tighten
    assert "swung" in first["reason"]
    # Each further one halves again; never more than the guard's four.
    assert [a["lr_scale"] for a in adjustments] == [0.5 ** (i + 1)
                                                    for i in range(len(adjustments))]
    assert len(adjustments) <= 4
    assert metrics["adjustments_unreached"] == {}
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(re.compile(
        r"swung .* the workers go on with step size x0\.5"), 1)
    for worker in cluster.workers:
        worker.wait_for(re.compile(
            r"coordinator: validation accuracy .* swung .*; step size now x0\.5"), 1)
    # The swing cost nothing kept: the saved model is the best evaluated.
    saved = metrics["saved_model"]
    assert saved is not None and saved["val_accuracy"] is not None
    assert saved["val_accuracy"] >= first_best(first["reason"]) - 1e-4


def first_best(reason: str) -> float:
    """The best validation accuracy named in an adjustment's reason."""
    return float(reason.split("below the best ")[1].split()[0])


def test_with_the_guard_off_nothing_is_changed(cluster: Cluster, tmp_path: Path) -> None:
    metrics = _run(cluster, tmp_path / "out", swing_tolerance="null")
    assert metrics["adjustments"] == []
    for worker in cluster.workers:
        assert "step size now" not in worker.output()
