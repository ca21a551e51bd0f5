"""The coordinator's conflict statistics: one line after loading, the same in metrics.json."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .helpers import Cluster, read_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

CONFLICTS = re.compile(r"conflicts \((exact|sampled [^,]+), (\d+) ms\): Ω=([\d,]+), .*ρ=")


def test_coordinator_prints_and_stores_conflict_statistics(cluster: Cluster,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(2, data="bundled:spamassassin", threads=1, epochs=2, patience=0,
                  out_dir=str(out), rpc_timeout=3, barrier_timeout=3, connect_timeout=60,
                  register_timeout=120)
    assert cluster.coordinator is not None
    line = cluster.coordinator.wait_for(CONFLICTS, 90)
    assert cluster.coordinator.wait(120) == 0
    text = cluster.coordinator.output()
    assert text.index(line.group(0)) < text.index("waiting for 2 worker")
    metrics = read_metrics(out)
    stats = metrics["conflicts"]
    assert stats["rows"] == metrics["train_rows"]
    assert f"{stats['omega']:,}" == line.group(3)
    assert stats["max_degree"] >= stats["avg_degree"] > 0
    rec = stats["recommendation"]
    # One process per worker, 1 thread each: in flight = 1 x 2 x the run's round size.
    assert rec["in_flight"] == 2 * metrics["round_size"]
    assert stats["share_of_load_time"] > 0
