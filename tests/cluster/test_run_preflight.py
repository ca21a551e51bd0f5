"""A coordinator process with an unusable out_dir fails at once, before waiting for workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import _env as child_env
from .helpers import flags

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
                                                out_dir=blocker / "out"))
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
