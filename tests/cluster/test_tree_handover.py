"""Topology tree, a coordinator handing the run over (SIGTERM with on_sigterm checkpoint) to a
successor that resumes it: the fine trace of the global model (trace_interval) taken before
the hand-over is in trace.jsonl at the end, followed by the successor's."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from hogwild.errors import EXIT_LEFT

from .helpers import PROGRESS_ROW, READY, Cluster, published, read_metrics, reuters_settings

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_the_trace_taken_before_a_hand_over_is_kept_by_the_resumed_run(
        cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    settings = reuters_settings(out, epochs=1_000_000, time_budget=60, barrier_timeout=2,
                                rpc_timeout=2, checkpoint_interval=0, connect_timeout=90,
                                on_sigterm="checkpoint", mode="sync", topology="tree",
                                tree_fanout=2, trace_interval=0.05)
    cluster.start(4, **settings)
    first = cluster.coordinator
    assert first is not None
    port = int(first.wait_for(READY, 1).group(1))
    first.wait_for(PROGRESS_ROW, 120)
    time.sleep(1)
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait(60) == EXIT_LEFT, cluster.output()
    handed = first.wait_for(re.compile(r"left to a successor at round \d+ after "
                                       r"([\d.]+)s of training"), 1)
    at = float(handed.group(1))
    again = cluster.spawn("coordinator-again", "coordinator", {
        **settings, "bind_host": "127.0.0.1", "workers": 4, "coordinator_port": port,
        "resume": str(out)})
    again.wait_for(re.compile(r"resumed run \w+ at round \d+"), 90)
    again.wait_for(PROGRESS_ROW, 60)
    time.sleep(1.5)
    again.proc.send_signal(signal.SIGUSR1)  # ends the run, outputs written, exit 0
    assert again.wait(90) == 0, cluster.output()
    metrics = read_metrics(out)
    rows = [json.loads(line) for line in
            (published(out) / "trace.jsonl").read_text().splitlines()]
    before = [r for r in rows if r["elapsed"] <= at]
    after = [r for r in rows if r["elapsed"] > at]
    # About 20 copies a second over the first coordinator's part (at least a second of it).
    assert len(before) >= 10 and len(after) >= 10, (at, [r["elapsed"] for r in rows])
    assert [r["elapsed"] for r in rows] == sorted(r["elapsed"] for r in rows)
    assert all(r["val_loss"] is not None for r in rows)
    assert metrics["trace_snapshots"] == len(rows)
