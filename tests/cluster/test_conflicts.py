"""The coordinator's conflict statistics: one line after loading, the same in metrics.json."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .helpers import READY, Cluster, read_metrics

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


def test_the_advice_is_given_again_for_the_threads_the_workers_registered_with(
        cluster: Cluster, tmp_path: Path) -> None:
    # A worker's thread count is its own setting (compose, Kubernetes): the coordinator's
    # estimate before registration assumed its own `threads: 1`; the workers run 2 each.
    out = tmp_path / "out"
    # Uniformly sparse rows leave room for asynchrony (τ in the hundreds), so the advice
    # depends on the count; round_size fixed, as auto sizes are capped per epoch by threads.
    common = {"bind_host": "127.0.0.1", "workers": 2, "round_size": 10, "epochs": 2,
              "data": "synthetic:seed000?rows=20000&n_features=100000&min_nnz=5&max_nnz=20",
              "patience": 0, "out_dir": str(out), "rpc_timeout": 3,
              "barrier_timeout": 3, "connect_timeout": 60, "register_timeout": 120}
    coordinator = cluster.coordinator = cluster.spawn(
        "coordinator", "coordinator", {**common, "threads": 1, "coordinator_port": 0})
    port = int(coordinator.wait_for(READY, 60).group(1))
    for i in range(2):
        cluster.workers.append(cluster.spawn(f"worker-{i}", "worker", {
            **common, "threads": 2, "worker_port": 0,
            "coordinator_address": f"127.0.0.1:{port}"}))
    again = coordinator.wait_for(re.compile(
        r"conflicts as started \(the workers' own threads and the run's round size\): "
        r"safe in-flight examples n/\(2Δ\) = [\d.,e+-]+: threads x workers x round_size as "
        r"configured = ([\d,]+)"), 90)
    assert coordinator.wait(120) == 0
    stats = read_metrics(out)["conflicts"]
    rec, before = stats["recommendation"], stats["recommendation_before_registration"]
    assert read_metrics(out)["round_size"] == 10
    assert rec["in_flight"] == 2 * 2 * 10 == int(again.group(1).replace(",", ""))
    assert before["in_flight"] == 1 * 2 * 10
