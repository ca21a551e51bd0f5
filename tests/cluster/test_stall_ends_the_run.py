"""A run that trains nothing for long ends by itself, stop reason ``stalled``.

Both workers are frozen (SIGSTOP) for good: alive as far as the coordinator can tell, no
delta arrives. With ``stall_warning_after: 8`` it warns at 8, 16 and 32 s of silence (30, 60
and 120 s by default) and at the third warning ends the run with the model so far and exit
code 4 (such a run used to train nothing until its time budget, or for ever without one).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from hogwild.errors import EXIT_STALLED

from .helpers import PROGRESS_ROW, Cluster, read_metrics
from .test_faults import faulty

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(420)]


def test_a_run_silent_through_three_stall_warnings_ends_stalled(cluster: Cluster,
                                                                tmp_path: Path) -> None:
    out = tmp_path / "out"
    # No time budget: nothing else would end this run.
    cluster.start(2, mode="sync", **faulty(out, time_budget=0, stall_warning_after=8))
    assert cluster.coordinator is not None
    ids = cluster.worker_ids()
    cluster.coordinator.wait_for(PROGRESS_ROW, 120)
    for proc in ids.values():
        proc.proc.send_signal(signal.SIGSTOP)
    try:
        cluster.coordinator.wait_for(re.compile(r"ending the run: no delta for \d+s"), 240)
        assert cluster.coordinator.wait(120) == EXIT_STALLED, cluster.output()
    finally:
        for proc in ids.values():
            proc.proc.send_signal(signal.SIGCONT)
    warnings = [line for line in cluster.coordinator.lines
                if "training may be stalled" in line]
    assert len(warnings) == 3, warnings
    # The first after 8 s of silence, each later one after twice as long.
    seconds = [int(m.group(1)) for line in warnings
               if (m := re.search(r"no delta from any worker for (\d+)s", line))]
    assert len(seconds) == 3 and 8 <= seconds[0] <= 10, warnings
    assert seconds[1] >= 2 * seconds[0] - 1 and seconds[2] >= 2 * seconds[1] - 1, warnings
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "stalled"
    assert "done (stalled)" in cluster.coordinator.output()
    assert metrics["test_accuracy"] >= 0.9  # the model trained before the freeze
