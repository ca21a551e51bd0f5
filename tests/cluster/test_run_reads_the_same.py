"""The same `hogwild run` twice reads the same: its stop reason, and its count of deltas (the
worker rounds the model holds, however the messages carrying them were summed); its last
progress row is timed as its done line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .helpers import _env as child_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

# A progress row (elapsed, round, examples, ...) after the process's prefix.
ROW = re.compile(r"^\[coordinator\]\s+\d+\.\d\ds\s+\d+\s+\d+\s")
DONE = re.compile(r"done \((?P<reason>[^)]+)\): .*; (?P<deltas>\d+) deltas, ")


def _run(tmp_path: Path, name: str, *extra: str) -> tuple[dict[str, Any], re.Match[str]]:
    """One run's metrics and done line; its last progress row is timed as the done line."""
    argv = [sys.executable, "-m", "hogwild.cli", "run", "--workers=2", "--insecure",
            f"--out={tmp_path / name}", "--json", *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=child_env(),
                          timeout=100, check=False)
    assert proc.returncode == 0, proc.stderr
    done = DONE.search(proc.stderr)
    assert done is not None, proc.stderr
    metrics = json.loads(proc.stdout)
    seconds = f"{metrics['seconds']:.2f}s"
    rows = [line.split()[1:] for line in proc.stderr.splitlines() if ROW.match(line)]
    assert rows and rows[-1][0] == seconds and f" in {seconds} with " in done[0], proc.stderr
    return metrics, done


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_same_run_ends_for_the_same_reason_with_the_same_deltas(
        tmp_path: Path, mode: str) -> None:
    seen = set()
    for i in range(3):
        metrics, done = _run(tmp_path, f"{mode}{i}", f"--mode={mode}")
        # Each worker trained every round: the model holds 2 x rounds of them, whether
        # the messages to the coordinator were summed in twos, threes, or not at all.
        assert metrics["delta_rounds"] == 2 * metrics["rounds"], metrics
        assert int(done["deltas"]) == metrics["delta_rounds"]
        seen.add((done["reason"], metrics["stop_reason"], metrics["delta_rounds"]))
    assert seen == {("max epochs", "max epochs", 2 * metrics["rounds"])}, seen
