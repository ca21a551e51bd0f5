"""The chaos soak's 2-minute form (tests/cluster/soak.py; bench/bench_chaos.py runs the long
one): 4 workers, sync mesh, a fault every 18-26 s (worker kills and freezes, one coordinator
kill and resume, one bad member), against the same run without faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hogwild.errors import EXIT_QUARANTINED

from .soak import Soak, clean_accuracy, missed, table

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_a_two_minute_chaos_soak_meets_its_targets(tmp_path: Path) -> None:
    soak = Soak(tmp_path / "soak", "sync", "mesh", workers=4, budget=120, seed=1,
                interval=(18.0, 26.0))
    soak.workdir.mkdir()
    report = soak.run()
    report.clean_accuracy = clean_accuracy(tmp_path / "clean", "sync", "mesh", 4, 60)
    print("\n" + table([report]))
    (tmp_path / "soak.json").write_text(json.dumps(report.to_json(), indent=1))
    kinds = [f.kind for f in report.faults]
    # Every kind of fault happened: a worker killed or frozen, the coordinator, a bad member.
    assert any("coordinator" in k for k in kinds), kinds
    assert any(k.startswith("bad member") for k in kinds), kinds
    assert any(k in ("kill -9 + restart", "SIGSTOP") for k in kinds), kinds
    assert missed(report) == []
    # The bad member was quarantined: the run says so in its exit code.
    assert report.metrics["stop_reason"] == "time budget"
    assert report.metrics["quarantined_workers"], report.metrics
    coordinators = [c for name, c in report.exit_codes.items() if name.startswith("coordinator")]
    assert coordinators[-1] == EXIT_QUARANTINED, report.exit_codes
