"""What `hogwild run` prints: workers named by their ids, -q, --json."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hogwild.cluster.localrun.launcher import child_env

from .helpers import published, read_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hogwild.cli", "run", "--workers=2", "--threads=1",
         "--epochs=3", f"--out={tmp_path / 'out'}", *extra],
        capture_output=True, text=True, cwd=tmp_path, env=child_env(), timeout=150,
        check=False)


def test_each_worker_is_named_by_the_id_the_coordinator_gave_it(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = re.findall(r"^\[(worker[^\]]*)\] .*registered as worker (\d+) of 2", proc.stdout,
                      re.MULTILINE)
    assert sorted(wid for _, wid in said) == ["0", "1"], proc.stdout
    for wid in ("0", "1"):
        # From its registration on, the prefix is the id (its lines before: its pid).
        lines = re.findall(rf"^\[worker-{wid}\] (.*)$", proc.stdout, re.MULTILINE)
        assert lines and f"received shard {int(wid) + 1}/2" in "\n".join(lines), proc.stdout
    assert not re.search(r"^\[worker-(\d+)\] .*registered as worker (?!\1 )", proc.stdout,
                         re.MULTILINE), proc.stdout


def test_quiet_run_prints_only_the_result(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("[coordinator] done ("), proc.stdout
    assert proc.stderr == ""


def test_run_json_is_one_object_equal_to_metrics_json(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == 1, proc.stdout
    printed = json.loads(proc.stdout)
    assert printed == read_metrics(tmp_path / "out") and printed["command"] == "run"
    # The progress went to standard error; the conflicts of this dense data set are no
    # warning (no setting of the run acts on them).
    assert "[coordinator] done (" in proc.stderr and "conflict" not in proc.stderr
    # final_states is off by default: no model per worker on disk, the counters in metrics.
    assert not (published(tmp_path / "out") / "final_states").exists()
    assert sorted(s["worker_id"] for s in printed["worker_states"]) == [0, 1]
