"""The chaos soak's targets (tests/cluster/soak.py: missed) on made-up samples."""

from __future__ import annotations

import pytest

from .soak import KILLED, Sample, SoakReport, missed

pytestmark = pytest.mark.cluster


def _report(fds: list[int], exit_code: int) -> SoakReport:
    """One coordinator sampled every 5 s with ``fds`` descriptors, then ending with
    ``exit_code``."""
    report = SoakReport("sync", "tree", 8, 600.0, metrics={"test_accuracy": 0.98},
                        clean_accuracy=0.98)
    report.samples = [Sample(16.0 + 5 * i, "coordinator", 1, 200_000_000, n)
                      for i, n in enumerate(fds)]
    report.exit_codes = {"coordinator": exit_code}
    return report


def test_descriptors_that_grow_to_a_process_s_end_are_a_missed_target() -> None:
    grew = [32, 30, 33, 33, 33, 34, 34, 33, 33, 33, 33, 35, 36, 36, 36]
    assert missed(_report(grew, 0)) == ["coordinator: descriptors 34 -> 36"]
    # Killed by the soak, its last samples are wherever the kill found it: not judged.
    assert missed(_report(grew, KILLED)) == []
    # Up and down by one or two as peers come and go, ending within what it held: met.
    assert missed(_report([32, 34, 33, 34, 34, 31, 31, 33, 32, 33, 33, 33], 0)) == []
