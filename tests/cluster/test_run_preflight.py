"""A coordinator process with an unusable out_dir fails at once, before waiting for workers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import Cluster, flags, require_reuters, reuters_settings
from .helpers import _env as child_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hogwild.cli", *argv], capture_output=True,
                          text=True, cwd=tmp_path, env=child_env(), timeout=90, check=False)


def test_coordinator_refuses_an_out_dir_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    # register_timeout is long: a coordinator that waited for workers would hit the timeout.
    proc = _run(tmp_path, "coordinator", *flags(bind_host="127.0.0.1", coordinator_port=0,
                                                workers=2, register_timeout=600,
                                                out_dir=blocker / "out", insecure=True))
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    assert "out_dir" in errors[0] and str(blocker / "out") in errors[0]
    assert "listening on port" not in proc.stdout  # it never bound a port
    assert blocker.read_text() == "x"


def test_hogwild_run_reports_the_bad_out_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    proc = _run(tmp_path, "run", "--workers=2", f"--out={blocker / 'out'}")
    assert proc.returncode != 0
    assert "out_dir" in proc.stdout + proc.stderr
    assert "registered as worker" not in proc.stdout


def test_a_second_run_into_a_busy_out_dir_gets_a_directory_of_its_own(
        cluster: Cluster, tmp_path: Path) -> None:
    """A coordinator waiting for its workers holds its run's directory, not the runs root:
    `hogwild train` into the same out_dir writes and publishes a run of its own beside it,
    and the coordinator's directory and process are untouched."""
    out = tmp_path / "out"
    train, test = require_reuters()
    cluster.start(0, **reuters_settings(out, workers=2, register_timeout=600))
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(re.compile(r"waiting for 2 worker\(s\)"), 60)
    waiting = sorted(out.glob("*.incomplete"))
    assert len(waiting) == 1, waiting
    trained = _run(tmp_path, "train", f"--data={train}", f"--test={test}", f"--out={out}",
                   "--epochs=1", "--data-cache=false")
    assert trained.returncode == 0, trained.stderr
    latest = (out / "latest").resolve()
    assert latest.parent == out and (latest / "metrics.json").is_file()
    assert sorted(out.glob("*.incomplete")) == waiting  # the coordinator's: not published
    assert cluster.coordinator.proc.poll() is None  # the first one is still waiting, unharmed
