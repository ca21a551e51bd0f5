"""The same short run, again and again, in both modes: no run may hang, fail or lose accuracy.

A hang that happens once in twenty runs (a race at start-up or shutdown) is invisible in a
single run; twenty per mode, each bounded in time, make it visible.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import Cluster, read_metrics, require_reuters

RUNS = 20

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_twenty_short_runs_all_finish(tmp_path: Path, mode: str) -> None:
    train, test = require_reuters()
    failures = []
    for i in range(RUNS):
        workdir = tmp_path / f"run-{i}"
        workdir.mkdir()
        cluster = Cluster(workdir)
        out = workdir / "out"
        try:
            cluster.start(2, mode=mode, data=str(train), test_data=str(test), threads=1,
                          epochs=3, patience=0, eval_interval=0.5, out_dir=str(out),
                          rpc_timeout=5, barrier_timeout=5, data_cache=False)
            assert cluster.coordinator is not None
            # Bounded waits: a run that does not end within them is a hang. Generous, since a
            # run takes ~10 s on a quiet machine but a minute when the machine is overloaded.
            codes = [cluster.coordinator.wait(180)] + [w.wait(60) for w in cluster.workers]
            accuracy = read_metrics(out)["test_accuracy"]
            if codes != [0, 0, 0] or accuracy < 0.97:
                failures.append((i, codes, accuracy, cluster.output()[-3000:]))
        finally:
            cluster.reap()
    assert not failures, failures[0]
