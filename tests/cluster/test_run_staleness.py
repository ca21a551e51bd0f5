"""Async mode with bounded staleness: no worker ever runs more than `staleness` rounds ahead of
the slowest live peer, and the model is as good as without the bound.

The bound checked is the one the workers measure (metrics.json, worker_states[*].max_staleness):
each time a worker sends its round-r delta it records r minus the highest round whose delta
has arrived from each live peer. A training thread starts round r only once every live peer
has completed round r - staleness, so the measured gap is at most `staleness`, with no slack.
(The coordinator's own view, `coordinator_round_gap`, also counts deltas still in flight and
is not bounded.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import Cluster, read_metrics
from .test_run_cluster import _check_exactly_once, _reuters_settings

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

STALENESS = 2


def test_async_with_staleness_two_keeps_every_worker_within_two_rounds(
        cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(3, mode="async", staleness=STALENESS, **_reuters_settings(out, threads=1))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(120) == 0
    for worker in cluster.workers:
        assert worker.wait(30) == 0
    metrics = read_metrics(out)
    assert metrics["mode"] == "async" and metrics["staleness"] == STALENESS
    assert metrics["test_accuracy"] >= 0.97
    states = metrics["worker_states"]
    assert len(states) == 3
    gaps = {st["worker_id"]: st["max_staleness"] for st in states}
    assert all(gap <= STALENESS for gap in gaps.values()), gaps
    # The gap is really measured: sending round r before a peer's round r arrived counts 1.
    assert max(gaps.values()) >= 1, gaps
    assert metrics["max_staleness"] == max(gaps.values())
    assert all(st["rounds"] > 10 * STALENESS for st in states)
    _check_exactly_once(metrics, 3)
