"""A worker restarted after running far ahead of its live peers: async mesh, staleness bound.

A worker that dropped its frozen peers trains on alone, far ahead of them; restarted, it
comes back while they go on far behind the round it had reached. Taken back at that round,
its deltas were first refused as "further ahead of this worker than a peer can be" (the run
stalled), and then, accepted, it sat idle under the staleness bound until its peers had
trained all those rounds (tens of seconds, longer than the time budget on a fast machine).
Now it is taken back at its live peers' round and trains with them at once.
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
    worker 2 reached. Restarted, worker 2 is taken back at their round."""
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
    line = cluster.coordinator.wait_for(REJOINED, 60)
    rejoined = int(line.group(1))
    assert cluster.coordinator.wait(180) == 0, cluster.output()
    codes = {p.name: p.wait(60) for p in cluster.procs}
    assert codes == {**dict.fromkeys(codes, 0), ahead.name: -signal.SIGKILL}, codes
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "time budget"
    lines = cluster.coordinator.lines
    at = next(i for i, text in enumerate(lines) if REJOINED.search(text))
    rows = [int(m.group(1)) for m in map(PROGRESS_ROW.search, lines) if m]
    before = [int(m.group(1)) for m in map(PROGRESS_ROW.search, lines[:at]) if m]
    after = [int(m.group(1)) for m in map(PROGRESS_ROW.search, lines[at:]) if m]
    # Taken back where its live peers were, far below the round it had reached alone
    # (the last row before the rejoin still counts that dead record's round).
    assert rejoined + 100 < before[-1], (rejoined, rows)
    # Progress rows went on after the rejoin (a stall keeps every later row the same), and
    # the run trained far past it.
    assert len(set(after)) >= 5, rows[-20:]
    assert metrics["rounds"] >= rejoined + 100, (rejoined, metrics["rounds"])
    assert metrics["test_accuracy"] >= 0.97
    # No worker refused the rejoiner's deltas as labelled too far ahead.
    assert "further ahead" not in again.output(), again.output()
