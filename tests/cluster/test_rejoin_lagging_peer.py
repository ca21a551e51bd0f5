"""A worker restarted at a round its peers lag by far: async mesh with a staleness bound.

A restarted worker is taken back at the run's round, which a live peer may lag by far more
than a peer may run ahead of it (slow, or just unfrozen while others went on without it). Its deltas were refused there as "further ahead
of this worker than a peer can be", and the run could stall for good (every process alive:
nobody was dropped) until its time budget. Now the rejoiner's deltas are taken from the round
the coordinator started it at, a delta still refused as too far ahead gets its sender dropped
once the receiver waits for it, and training goes on after the rejoin.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from .helpers import PROGRESS_ROW, Cluster, read_metrics
from .test_faults import _advertised, _respawn, faulty

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

BUDGET = 45.0
REJOINED = re.compile(r"worker 2 rejoined at round (\d+)")


def test_training_goes_on_after_a_rejoin_at_a_round_its_peers_lag(cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    """Workers 0, 1 and 3 are frozen together: worker 2 drops them (silent) and trains on
    alone, far ahead, until it is killed. The three wake before the coordinator's probes of
    them give up (so they stay in the run) and go on among themselves, far behind the round
    worker 2 reached. Restarted, worker 2 is taken back at that round."""
    out = tmp_path / "out"
    cluster.start(4, mode="async", **faulty(out, time_budget=BUDGET, staleness=2))
    assert cluster.coordinator is not None
    advertised = _advertised(cluster)
    cluster.coordinator.wait_for(PROGRESS_ROW, 120)
    lagging = [advertised[w][0] for w in (0, 1, 3)]
    ahead = advertised[2][0]
    for proc in lagging:
        proc.proc.send_signal(signal.SIGSTOP)
    try:
        ahead.wait_for(re.compile(r"dropping peer 3 "), 30)
        time.sleep(0.5)  # alone: hundreds of rounds ahead of the frozen three
        ahead.proc.send_signal(signal.SIGKILL)
        ahead.wait(10)
    finally:
        for proc in lagging:
            proc.proc.send_signal(signal.SIGCONT)
    time.sleep(0.5)
    again = _respawn(cluster, out, "async", BUDGET, advertised, 2, workers=4)
    rejoined = int(cluster.coordinator.wait_for(REJOINED, 60).group(1))
    assert cluster.coordinator.wait(180) == 0, cluster.output()
    codes = {p.name: p.wait(60) for p in cluster.procs}
    assert codes == {**dict.fromkeys(codes, 0), ahead.name: -signal.SIGKILL}, codes
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "time budget"
    # Progress rows went on after the rejoin (the stall kept the round where the rejoin
    # left it, every later row the same), and the run trained far past it.
    rows = [int(m.group(1)) for line in cluster.coordinator.lines
            if (m := PROGRESS_ROW.search(line))]
    after = [r for r in rows if r > rejoined]
    assert len(set(after)) >= 5, rows[-20:]
    assert metrics["rounds"] >= rejoined + 100, (rejoined, metrics["rounds"])
    assert metrics["test_accuracy"] >= 0.97
    # No worker refused the rejoiner's deltas as labelled too far ahead.
    assert "further ahead" not in again.output(), again.output()
