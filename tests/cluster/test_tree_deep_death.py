"""Topology tree, sync, a death below the coordinator's children (7 workers, fan-out 2:
worker 2 is a child of worker 0 and the parent of worker 6): worker 6 re-attaches to worker
0, the run goes on, and nothing that went through worker 2 is lost: every survivor ends
equal to the coordinator's model. Async: worker 6 is levelled by worker 0. Two deaths on
one path at once (workers 0 and 2): worker 6 re-attaches to the coordinator; survivors
still end equal to the global model, and the async coordinator holds every message each
survivor sent up; likewise when worker 0 dies after worker 6 re-attached to it."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import (
    PROGRESS_ROW,
    Cluster,
    Proc,
    read_metrics,
    reuters_settings,
    survivors_equal_the_global_model,
    tree_run_with_a_death,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

N, K, VICTIM, ORPHAN = 7, 2, 2, 6
FINAL = re.compile(r"tree: final message to the parent: (\d+) message\(s\) up in all")


def test_tree_sync_orphan_of_a_deeper_death_loses_nothing(cluster: Cluster,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "out"
    ids, metrics = tree_run_with_a_death(cluster, out, mode="sync", workers=N,
                                         fanout=K, victim=VICTIM, time_budget=6,
                                         timeout=120)
    assert "tree: re-attached around worker(s) 2: parent 0" in ids[ORPHAN].output(), \
        ids[ORPHAN].output()
    survivors_equal_the_global_model(out, metrics, [w for w in range(N) if w != VICTIM])


def test_tree_async_orphan_of_a_deeper_death_is_caught_up(cluster: Cluster,
                                                          tmp_path: Path) -> None:
    # Async: worker 6 re-sends to worker 0 what the coordinator had not applied, and worker
    # 0 owes it what it had sent worker 2 that 2 had not passed down; the coordinator ends
    # holding every message every survivor sent up, without a gap.
    out = tmp_path / "out"
    ids, metrics = tree_run_with_a_death(cluster, out, mode="async", workers=N,
                                         fanout=K, victim=VICTIM, time_budget=6,
                                         timeout=120)
    parent = ids[0].output()
    assert re.search(rf"tree: worker {ORPHAN} adopted around dead worker {VICTIM}: sent it "
                     r"everything that crossed that edge", parent), parent
    survivors = [w for w in range(N) if w != VICTIM]
    _coordinator_holds_every_message_up(ids, metrics, survivors)
    survivors_equal_the_global_model(out, metrics, survivors)


def _coordinator_holds_every_message_up(ids: dict[int, Proc], metrics: dict[str, Any],
                                        survivors: list[int]) -> None:
    recovery = metrics["tree_recovery"]
    for wid in survivors:
        sent = [int(n) for n in FINAL.findall(ids[wid].output())]
        assert len(sent) == 1, ids[wid].output()
        # (on a failure, the tree's own account of it: what was re-sent, let go, adopted)
        story = "\n".join(line for p in ids.values() for line in p.output().splitlines()
                          if "tree:" in line)
        assert recovery["applied_up"][str(wid)] == sent[0], (wid, recovery, story)
        assert recovery["applied_count"][str(wid)] == sent[0], (wid, recovery, story)


def test_tree_sync_two_deaths_on_one_path_lose_nothing(cluster: Cluster,
                                                       tmp_path: Path) -> None:
    # Worker 6's parent (2) and grandparent (0) die together: it and worker 3 (0's other
    # child) re-attach to the coordinator, whose kept aggregates catch both up. Messages
    # cut into parts of 4 KiB: one cut off by a death is summed nowhere, not in part.
    out = tmp_path / "out"
    ids, metrics = tree_run_with_a_death(cluster, out, mode="sync", workers=N,
                                         fanout=K, victim=(0, VICTIM), time_budget=6,
                                         timeout=120, chunk_bytes=4096)
    assert re.search(r"tree: re-attached around worker\(s\) [02, ]+: parent coordinator",
                     ids[ORPHAN].output()), ids[ORPHAN].output()
    survivors_equal_the_global_model(out, metrics, [1, 3, 4, 5, 6])


def test_tree_async_two_deaths_on_one_path_keep_every_message(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out"
    ids, metrics = tree_run_with_a_death(cluster, out, mode="async", workers=N,
                                         fanout=K, victim=(0, VICTIM), time_budget=6,
                                         timeout=120, chunk_bytes=4096)
    _coordinator_holds_every_message_up(ids, metrics, [1, 3, 4, 5, 6])
    survivors_equal_the_global_model(out, metrics, [1, 3, 4, 5, 6])


@pytest.mark.parametrize("settle", [0.5, 0.0], ids=["settled", "re-sending"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tree_deaths_one_after_the_other(cluster: Cluster, tmp_path: Path, mode: str,
                                         settle: float) -> None:
    # Worker 2 dies; once its orphan 6 has re-attached to worker 0, worker 0 dies too: 6 (and
    # 0's other child 3) re-attach to the coordinator. "settled": 0 dies after a few rounds
    # through it; "re-sending": as soon as 6 logs its re-attachment, when what it re-sends
    # to 0 (and 0's catch-up of it) is queued or on the wire.
    out = tmp_path / "out"
    cluster.start(N, mode=mode, topology="tree", **reuters_settings(
        out, epochs=1_000_000, time_budget=8, barrier_timeout=2, rpc_timeout=5,
        eval_interval=0.3, tree_fanout=K))
    assert cluster.coordinator is not None
    ids = cluster.worker_ids(120)
    cluster.coordinator.wait_for(PROGRESS_ROW, 120)
    ids[VICTIM].proc.send_signal(signal.SIGKILL)
    ids[ORPHAN].wait_for(re.compile(r"tree: re-attached around worker\(s\) 2: parent 0"), 60)
    time.sleep(settle)
    ids[0].proc.send_signal(signal.SIGKILL)
    assert cluster.coordinator.wait(120) == 0, cluster.output()
    survivors = [1, 3, 4, 5, 6]
    for wid in survivors:
        assert ids[wid].wait(30) == 0, cluster.output()
    assert re.search(r"tree: re-attached around worker\(s\) [02, ]+: parent coordinator",
                     ids[ORPHAN].output()), ids[ORPHAN].output()
    metrics = read_metrics(out)
    assert sorted(metrics["dropped_workers"]) == [0, VICTIM]
    if mode == "async":
        _coordinator_holds_every_message_up(ids, metrics, survivors)
    survivors_equal_the_global_model(out, metrics, survivors)
