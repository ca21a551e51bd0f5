"""Topology star on a real cluster (Reuters earn, 3 workers): workers send only to the
coordinator, which relays to each the sum of the others' deltas. Sync and async reach the
mesh accuracy within 1 point; sync workers end equal to the coordinator's model; a killed
worker is dropped by the relay and the others finish."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID

from .helpers import (
    PROGRESS_ROW,
    Cluster,
    final_states,
    finished_run,
    read_metrics,
    reuters_settings,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

RELAY = str(COORDINATOR_SENDER_ID)


# Async with a staleness bound of 2 rounds for both topologies, as the tree test does: these
# runs last well under a second of short rounds, and unbounded, how stale a relayed sum gets
# depends on how the 2 cores are shared (on a loaded machine star trailed mesh by 1.1-1.5
# points in 3 of 3 pairs: the relay is one more queue a sum waits in), so a single pair would
# measure the load more than the topology.
@pytest.mark.parametrize(("mode", "extra"), [("sync", {}), ("async", {"staleness": 2})])
def test_star_reaches_the_mesh_accuracy(mode: str, extra: dict[str, Any],
                                        tmp_path: Path) -> None:
    mesh = finished_run(tmp_path / "mesh", 3, mode=mode, **extra)
    star = finished_run(tmp_path / "star", 3, mode=mode, topology="star", **extra)
    assert star["topology"] == "star" and mesh["topology"] == "mesh"
    assert star["test_accuracy"] >= mesh["test_accuracy"] - 0.01, (star, mesh)
    assert star["dropped_workers"] == []
    states = star["worker_states"]
    # Workers talk to the coordinator only; each applied every aggregate it acknowledged once.
    assert all(s["acked_by"] == {} for s in states)
    assert sum(s["applied_from"][RELAY] for s in states) == star["relay_messages"]
    for s in states:
        assert star["coordinator_applied_from"][str(s["worker_id"])] == s["acked_by_coordinator"]
    if mode == "sync":
        # Every worker applied the same deltas: all equal the coordinator's model.
        out = star["out"]
        with final_states(out, "global.npz") as g:
            global_w = g["w"]
        assert np.any(global_w != 0)
        for wid in range(3):
            with final_states(out, f"worker-{wid}.npz") as f:
                np.testing.assert_allclose(f["w"], global_w, rtol=1e-6, atol=1e-6)
        # One message per worker and round each way, against n(n+1) = 12 in a mesh.
        rounds = star["rounds"]
        assert star["relay_messages"] <= 3 * (rounds + 2)
        assert sum(s["deltas_sent"] for s in states) <= 3 * (rounds + 2)


def test_star_sync_run_survives_a_killed_worker(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(3, mode="sync", topology="star", **reuters_settings(
        out, epochs=1_000_000, time_budget=6, barrier_timeout=2, rpc_timeout=5,
        eval_interval=0.3))
    assert cluster.coordinator is not None
    ids = cluster.worker_ids(120)
    cluster.coordinator.wait_for(PROGRESS_ROW, 300)  # training is under way
    victim = 2
    ids[victim].proc.send_signal(signal.SIGKILL)
    assert cluster.coordinator.wait(120) == 0
    for wid, proc in ids.items():
        if wid != victim:
            assert proc.wait(30) == 0
    metrics = read_metrics(out)
    assert victim in metrics["dropped_workers"]
    survivors = [s for s in metrics["worker_states"]
                 if s["worker_id"] not in metrics["dropped_workers"]]
    assert survivors
    assert metrics["stop_reason"] == "time budget"
    assert metrics["test_accuracy"] is not None and metrics["test_accuracy"] > 0.9
    with final_states(out, "global.npz") as g:
        global_w = g["w"]
    for st in survivors:
        # The survivors kept applying the same set after the drop, the killed worker's
        # deltas that reached the coordinator included: they still equal the model.
        with final_states(out, f"worker-{st['worker_id']}.npz") as f:
            np.testing.assert_allclose(f["w"], global_w, rtol=1e-5, atol=1e-5)
