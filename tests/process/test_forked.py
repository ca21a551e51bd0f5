"""Children forked by `hogwild run` from a launcher that loaded their libraries (hogwild.cluster.localrun.forked)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from hogwild.cluster.localrun.forked import can_fork

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _script(body: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter (forking pytest itself would copy its threads)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = textwrap.dedent("""
        import json, signal, subprocess, sys
        from hogwild.cli import main_process
        from hogwild.cluster.localrun.forked import ForkedProcess
        from hogwild.cluster.localrun.launcher import child_env
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


def test_forked_child_runs_its_arguments_and_never_returns_into_the_caller(
        tmp_path: Path) -> None:
    out = tmp_path / "rows.svm"
    proc = _script(f"""
        child = ForkedProcess("worker", child_env(), main_process)
        child.stdin.write(json.dumps(["gen-data", "rcv1", "--rows", "30", "--out", {str(out)!r}])
                          + "\\n")
        child.stdin.close()
        text = child.stdout.read()
        print("CALLER", child.wait(60), json.dumps(text))
    """)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CALLER")]
    assert len(lines) == 1, proc.stdout  # the child left by os._exit, not through this code
    assert lines[0].startswith("CALLER 0 ")
    assert f"wrote {out}" in lines[0]
    assert len(out.read_text().splitlines()) == 30


def test_forked_child_without_arguments_ends_quietly() -> None:
    proc = _script("""
        child = ForkedProcess("worker", child_env(), main_process)
        child.stdin.close()
        print("CALLER", child.wait(60), json.dumps(child.stdout.read()))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == 'CALLER 0 ""'


def test_forked_child_times_out_then_dies_of_sigterm() -> None:
    proc = _script("""
        child = ForkedProcess("worker", child_env(), main_process)
        try:
            child.wait(0.2)
        except subprocess.TimeoutExpired:
            print("TIMEOUT")
        child.send_signal(signal.SIGTERM)
        print("CALLER", child.wait(60))
        child.kill()  # gone already: nothing happens
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["TIMEOUT", "CALLER", str(-15)]


def test_forked_child_that_fails_exits_1_with_its_traceback() -> None:
    # An unknown role cannot be imported: the child reports it and ends with 1.
    proc = _script("""
        child = ForkedProcess("nonexistent", child_env(), main_process)
        child.stdin.close()
        print("CALLER", child.wait(60), json.dumps(child.stdout.read()))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("CALLER") == 1
    assert proc.stdout.startswith("CALLER 1 ")
    assert "ModuleNotFoundError" in proc.stdout and "hogwild.nonexistent" in proc.stdout


def test_a_fresh_process_may_fork() -> None:
    proc = _script("""
        from hogwild.cluster.localrun.forked import can_fork
        print(can_fork())
    """)
    assert proc.stdout.strip() == "True", proc.stderr


def test_no_fork_while_another_thread_runs() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        thread.join()
