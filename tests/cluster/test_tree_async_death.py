"""Topology tree, async, a child of the coordinator dies (4 workers, fan-out 2: worker 0 is
the parent of workers 2 and 3): its orphans re-send what the coordinator had not applied,
and at the end the coordinator holds every message every survivor sent up, without a gap;
the orphans are levelled with everything that crossed the dead worker's edge, so every
survivor ends equal to the global model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .helpers import Cluster, survivors_equal_the_global_model, tree_run_with_a_death

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

N, K, VICTIM, ORPHANS = 4, 2, 0, (2, 3)
FINAL = re.compile(r"tree: final message to the parent: (\d+) message\(s\) up in all")


def test_tree_async_orphans_lose_nothing(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ids, metrics = tree_run_with_a_death(cluster, out, mode="async", workers=N,
                                         fanout=K, victim=VICTIM, time_budget=5,
                                         timeout=60)
    recovery = metrics["tree_recovery"]
    for wid in ORPHANS:
        text = ids[wid].output()
        assert re.search(r"tree: (re-sent \d+ message|nothing to re-send)", text), text
        assert "is lost" not in text, text
    for wid in (w for w in range(N) if w != VICTIM):
        sent = [int(n) for n in FINAL.findall(ids[wid].output())]
        assert len(sent) == 1, ids[wid].output()
        # Every message it sent up is in the coordinator's model (counts per origin), each
        # one: the number held is the highest, so none in between is missing.
        assert recovery["applied_up"][str(wid)] == sent[0], (wid, recovery)
        assert recovery["applied_count"][str(wid)] == sent[0], (wid, recovery)
    # Of the dead worker's own messages, what reached the model has no gap either.
    victim = str(VICTIM)
    assert recovery["applied_count"][victim] == recovery["applied_up"][victim], recovery
    # Downwards: each orphan was levelled with what crossed its dead parent's edge.
    assert cluster.coordinator is not None
    coordinator = cluster.coordinator.output()
    for wid in ORPHANS:
        assert re.search(rf"tree: worker {wid} adopted around dead worker {VICTIM}: sent it "
                         r"everything that crossed that edge", coordinator), coordinator
        assert "resync from worker" not in ids[wid].output(), ids[wid].output()
    assert recovery["orphans_caught_up"] == len(ORPHANS), recovery
    survivors_equal_the_global_model(out, metrics, [w for w in range(N) if w != VICTIM])
