"""The processes of `hogwild run` start before their command line is known (hogwild.cluster.localrun.prespawn, hogwild.prespawned)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def test_prespawned_process_runs_the_arguments_from_stdin(tmp_path: Path) -> None:
    out = tmp_path / "rows.svm"
    args = ["gen-data", "rcv1", "--rows", "30", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "hogwild.prespawned"], input=json.dumps(args) + "\n",
                          capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout
    assert len(out.read_text().splitlines()) == 30


def test_prespawned_process_without_arguments_ends_quietly() -> None:
    proc = subprocess.run([sys.executable, "-m", "hogwild.prespawned"], input="",
                          capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_prespawned_coordinator_runs_its_arguments_and_leaves_no_plot_helper(
        tmp_path: Path) -> None:
    # The coordinator role starts the loss plot's helper first; a command that ends before
    # plotting (here: a bad setting, exit 2) must not leave it behind.
    mark = uuid.uuid4().hex
    args = ["coordinator", "--workers", "0", "--data", "bundled:spamassassin",
            "--out", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-m", "hogwild.prespawned", "coordinator"],
                          input=json.dumps(args) + "\n", capture_output=True, text=True,
                          env=_env(PRESPAWN_TEST_MARK=mark), timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "workers" in proc.stderr
    assert _processes_marked(mark) == []


def test_prespawn_refuses_an_unknown_role() -> None:
    proc = subprocess.run([sys.executable, "-m", "hogwild.prespawned", "driver"], input="",
                          capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert proc.returncode == 2
    assert "role must be one of coordinator, worker" in proc.stderr


def _processes_marked(mark: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"PRESPAWN_TEST_MARK={mark}".encode() in environ.split(b"\0"):
            found.append(int(pid))
    return found


def test_run_whose_coordinator_fails_before_its_port_leaves_no_worker(tmp_path: Path) -> None:
    """The prespawned workers of a run whose coordinator never announced are stopped."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    mark = uuid.uuid4().hex
    proc = subprocess.run(
        [sys.executable, "-m", "hogwild.cli", "run", "--workers", "2", "--data",
         "bundled:spamassassin", "--out", str(blocker / "out")],
        capture_output=True, text=True, env=_env(PRESPAWN_TEST_MARK=mark), cwd=tmp_path,
        timeout=180, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "before it announced its port" in proc.stdout
    assert "[worker-" not in proc.stdout
    assert _processes_marked(mark) == []


def test_whole_run_forks_its_children_and_leaves_nothing_running(tmp_path: Path) -> None:
    """A whole `hogwild run` loads the libraries once and forks the coordinator and the
    workers; the plot helper it starts for the coordinator draws, and every process of the
    run (children, helper) is gone when it returns."""
    mark = uuid.uuid4().hex
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "hogwild.cli", "run", "-v", "--workers", "2", "--threads", "1",
         "--epochs", "2", "--data", "bundled:spamassassin", "--out", str(out)],
        capture_output=True, text=True, env=_env(PRESPAWN_TEST_MARK=mark), cwd=tmp_path,
        timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[run] libraries and kernels loaded once" in proc.stdout
    assert "forked the coordinator and 2 worker(s)" in proc.stdout
    assert "plot helper failed" not in proc.stdout
    out = out / "latest"  # the run's own directory, published whole
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "metrics.json").read_text())["threads"] == 1
    assert _processes_marked(mark) == []
