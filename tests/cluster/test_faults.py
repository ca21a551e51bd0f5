"""Faults on a real cluster (coordinator + workers as processes on loopback, port 0): signals in
every phase, a coordinator that disappears, and what the outputs then say.

Each test asserts how every process ends (exit code, bounded wait: nothing is left running)
and, when the run completes, its accuracy.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import REGISTERED, Cluster, read_metrics, require_reuters

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

DONE_LINE = re.compile(r"done \((.+?)\): ([\d.]+) epochs, (\d+) rounds in .*?; "
                       r"(\d+) deltas, ([\d.]+) MB received")
WAITING = re.compile(r"waiting for \d+ worker")
PROGRESS_ROW = re.compile(r"^\s*\d+\.\d+s\s+(\d+)\s+\d+")


def reuters(out: Path, **extra: Any) -> dict[str, Any]:
    train, test = require_reuters()
    base = {"data": str(train), "test_data": str(test), "threads": 1, "epochs": 10,
            "patience": 0, "eval_interval": 0.3, "out_dir": str(out), "rpc_timeout": 3,
            "barrier_timeout": 3, "connect_timeout": 60, "register_timeout": 120,
            "data_cache": False}
    base.update(extra)
    return base


def _all_exit(cluster: Cluster, codes: dict[str, int], within: float = 30) -> None:
    """Every process of the cluster ends (bounded wait) with the expected code."""
    got = {}
    for proc in cluster.procs:
        got[proc.name] = proc.wait(within)
    assert got == {name: codes.get(name, got[name]) for name in got}, got
    assert all(p.proc.poll() is not None for p in cluster.procs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_metrics_json_agrees_with_the_last_printed_line(cluster: Cluster, tmp_path: Path,
                                                        mode: str) -> None:
    out = tmp_path / "out"
    # Long enough for several evaluations.
    cluster.start(2, mode=mode, **reuters(out, epochs=1_000_000, time_budget=3))
    assert cluster.coordinator is not None
    seen_early = False
    while cluster.coordinator.proc.poll() is None:
        # metrics.jsonl grows while the run goes on, not only at its end.
        history = out / "metrics.jsonl"
        if not seen_early and history.exists() and history.read_text().count("\n") >= 2:
            seen_early = not (out / "metrics.json").exists()
        time.sleep(0.1)
    assert cluster.coordinator.wait(120) == 0
    assert seen_early
    _all_exit(cluster, {"worker-0": 0, "worker-1": 0})
    line = cluster.coordinator.wait_for(DONE_LINE, 1)
    metrics = read_metrics(out)
    assert line.group(1) == metrics["stop_reason"]
    assert float(line.group(2)) == pytest.approx(metrics["epochs"], abs=0.006)
    assert int(line.group(3)) == metrics["rounds"]
    assert int(line.group(4)) == metrics["deltas_received"]
    assert float(line.group(5)) == pytest.approx(metrics["bytes_received"] / 1e6, abs=0.06)
    assert metrics["test_accuracy"] >= 0.97
    # metrics.jsonl: one row per evaluation; its last row is the final evaluation.
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == metrics["evaluations"] >= 2


def test_sigterm_while_waiting_for_registrations_exits_at_once(cluster: Cluster,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Two workers expected, one started: the coordinator waits (register_timeout 300 s).
    cluster.start(1, **reuters(out, workers=2, register_timeout=300))
    assert cluster.coordinator is not None
    cluster.workers[0].wait_for(REGISTERED, 60)
    began = time.monotonic()
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(20) == 130
    # The registered worker is told to stop and exits cleanly.
    assert cluster.workers[0].wait(20) == 0
    assert time.monotonic() - began < 60  # far below register_timeout: it did not wait
    assert "no outputs written" in cluster.coordinator.output()
    assert not (out / "metrics.json").exists()


def test_sigterm_while_loading_data_exits_at_once(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(0, **reuters(out, workers=2, register_timeout=300))
    assert cluster.coordinator is not None
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(60) == 130
    assert not (out / "metrics.json").exists()


def test_workers_exit_when_the_coordinator_dies_before_start(cluster: Cluster,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(1, **reuters(out, workers=2, register_timeout=300, connect_timeout=300))
    assert cluster.coordinator is not None
    cluster.workers[0].wait_for(REGISTERED, 60)
    cluster.coordinator.proc.send_signal(signal.SIGKILL)
    assert cluster.coordinator.wait(10) == -signal.SIGKILL
    # Far below connect_timeout: the worker sees the coordinator's port refuse connections.
    assert cluster.workers[0].wait(30) == 1
    assert "went away before the run started" in cluster.workers[0].output()
