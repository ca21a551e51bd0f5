"""Real coordinator + worker processes on loopback: sync/async accuracy, exactly-once deltas,
a worker killed mid-run, and `hogwild run` end to end."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.errors import EXIT_LEFT

from .helpers import PROGRESS_ROW, Cluster, final_states, published, read_metrics, require_reuters
from .helpers import _env as child_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]



def _reuters_settings(out: Path, **extra: Any) -> dict[str, Any]:
    train, test = require_reuters()
    base = {"data": str(train), "test_data": str(test), "threads": 2, "epochs": 10,
            "patience": 0, "eval_interval": 0.5, "out_dir": str(out), "rpc_timeout": 5,
            "barrier_timeout": 5, "connect_timeout": 60, "register_timeout": 60,
            "data_cache": False, "final_states": "compact"}
    base.update(extra)
    return base


def _check_exactly_once(metrics: dict[str, Any], n_workers: int) -> None:
    """Every delta message a destination acknowledged was applied there exactly once.

    Deltas queued behind a slow send are summed into one message (to the coordinator always,
    to peers in async mode), so a destination may get fewer messages than the worker built;
    in sync mode every peer gets every message.
    """
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == list(range(n_workers))
    coordinator = metrics["coordinator_applied_from"]
    for wid, st in states.items():
        sent = st["deltas_sent"]
        assert sent > 1
        assert 1 <= st["acked_by_coordinator"] <= sent
        assert coordinator[str(wid)] == st["acked_by_coordinator"], (
            f"coordinator applied {coordinator[str(wid)]} of worker {wid}'s "
            f"{st['acked_by_coordinator']} acknowledged deltas")
        for peer, pst in states.items():
            if peer != wid:
                acked = st["acked_by"][str(peer)]
                assert pst["applied_from"][str(wid)] == acked, (
                    f"worker {peer} applied {pst['applied_from'][str(wid)]} of worker {wid}'s "
                    f"{acked} acknowledged deltas")
                if metrics["mode"] == "sync":
                    assert acked == sent
                else:
                    assert 1 <= acked <= sent
    assert metrics["deltas_received"] == sum(s["acked_by_coordinator"] for s in states.values())


def _check_workers_equal_the_global_model(out: Path, n_workers: int) -> np.ndarray:
    """Sync mode: every worker's final weights are the coordinator's global model (the same
    deltas added in another order, and a float32 rounding residual); returns that model."""
    with final_states(out, "global.npz") as g:
        global_w = g["w"]
    for wid in range(n_workers):
        with final_states(out, f"worker-{wid}.npz") as f:
            np.testing.assert_allclose(f["w"], global_w, rtol=1e-6, atol=1e-6)
    return global_w


def test_sync_run_reaches_accuracy_and_workers_equal_the_global_model(
        cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.jsonl").write_text('{"stale": true}\n')  # an earlier run's, traced
    cluster.start(2, mode="sync", **_reuters_settings(out))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(90) == 0
    for worker in cluster.workers:
        assert worker.wait(30) == 0
    metrics = read_metrics(out)
    assert not (published(out) / "trace.jsonl").exists()  # this run traced nothing
    assert metrics["trace_snapshots"] == 0
    assert metrics["warnings"] == []  # a healthy run: the saved model is the best one seen
    assert metrics["test_accuracy"] >= 0.97
    assert metrics["mode"] == "sync" and metrics["workers"] == 2
    assert metrics["dropped_workers"] == []
    assert metrics["combine"] == "sum"  # combine auto: Reuters holds under 10,000 rows a worker
    _check_exactly_once(metrics, 2)
    assert np.any(_check_workers_equal_the_global_model(out, 2) != 0)


def test_averaged_sync_run_with_a_trace_and_frequent_evaluations(
        cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(2, mode="sync", **_reuters_settings(
        out, combine="average", trace_interval=0.005, eval_interval=0.02, epochs=30))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(90) == 0
    for worker in cluster.workers:
        assert worker.wait(30) == 0
    metrics = read_metrics(out)
    assert metrics["test_accuracy"] >= 0.97
    # Averaged deltas take rounds up to an epoch: here the cap, an epoch per thread, cut so
    # that whole rounds make the 30 epochs asked for, not up to a round more.
    rows = metrics["train_rows"]
    assert 0.95 * (rows // 4) <= metrics["round_size"] <= rows // 4
    assert 30 <= metrics["epochs"] <= 30 + metrics["rounds"] * 4 / rows, metrics["epochs"]
    _check_exactly_once(metrics, 2)
    _check_workers_equal_the_global_model(out, 2)
    # The trace: copies of the global model taken in order while the workers trained,
    # each scored after (validation accuracy of a real model, not a placeholder).
    rows = [json.loads(line) for line in (published(out) / "trace.jsonl").read_text().splitlines()]
    assert len(rows) == metrics["trace_snapshots"] >= 2
    assert all(a["elapsed"] < b["elapsed"] for a, b in itertools.pairwise(rows))
    assert all(a["deltas_received"] <= b["deltas_received"]
               for a, b in itertools.pairwise(rows))
    assert rows[0]["deltas_received"] < rows[-1]["deltas_received"]  # a model that moved
    assert all(0.0 <= r["val_accuracy"] <= 1.0 for r in rows)
    assert max(r["val_accuracy"] for r in rows) >= 0.95
    assert rows[-1]["deltas_received"] <= metrics["deltas_received"]
    # Evaluations more often than the monitor loop's 50 ms turn when asked to: some gap
    # between two is below it (the loop used to stretch every one to 50 ms or more).
    history = [json.loads(line) for line in (published(out) / "metrics.jsonl").read_text().splitlines()]
    # (the last row is the closing evaluation, made whenever training ends)
    gaps = [b["elapsed"] - a["elapsed"] for a, b in itertools.pairwise(history[:-1])]
    assert gaps and min(gaps) < 0.045, gaps
    # With a trace, trace.jsonl is the fine curve: no curve points between the evaluations,
    # so every row of metrics.jsonl is a progress row, of which the 1st, 2nd, 4th, ... and
    # the last are printed (the rows are thinned out; see hogwild.outputs.console).
    printed = [line.split()[0] for line in cluster.coordinator.lines
               if PROGRESS_ROW.search(line)]
    assert len(history) >= 5, history
    # (history[0] is epoch 0, the model before training, which is not a progress row)
    stamps = [f"{row['elapsed']:.2f}s" for row in history]
    # Printed in order, each one a row of the history; a best row held back in between
    # (the saved model's) may be printed just before the next due one.
    at = [stamps.index(p, 1) for p in printed]
    assert at == sorted(at), (printed, stamps)
    assert {stamps[i] for i in (1, 2, 4)} <= set(printed), (printed, stamps)
    assert printed[-1] == stamps[-1], printed


def test_async_run_with_three_workers_finishes_accurately(cluster: Cluster,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(3, mode="async", **_reuters_settings(out))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(90) == 0
    for worker in cluster.workers:
        assert worker.wait(30) == 0
    metrics = read_metrics(out)
    assert metrics["test_accuracy"] >= 0.97
    assert metrics["mode"] == "async" and metrics["workers"] == 3
    # Reuters over 3 workers is under 10,000 rows each: combine auto sums, and says what
    # that costs.
    assert metrics["combine"] == "sum"
    assert re.search(r"8,643 training rows over 3 workers is 2,881 a worker.*fewer workers "
                     r"are likely faster", cluster.coordinator.output()), cluster.output()
    _check_exactly_once(metrics, 3)


def test_workers_the_data_cannot_keep_busy_are_released(cluster: Cluster,
                                                       tmp_path: Path) -> None:
    """engage auto (the default): Reuters keeps two workers busy at most, so of four started
    two train and two are released before anything is shipped; they exit 0 saying why, and
    the run is the two workers' run (a mesh, all their deltas exactly once)."""
    out = tmp_path / "out"
    cluster.start(4, mode="sync", engage="auto", **_reuters_settings(out, threads=1))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(90) == 0
    ids = cluster.worker_ids()
    for proc in ids.values():
        assert proc.wait(30) == 0
    assert re.search(r"engaging 2 of 4 workers: [0-9,]+ training non-zeros",
                     cluster.coordinator.output()), cluster.output()
    for wid in (2, 3):
        assert re.search(r"stop requested: not needed: engaging 2 of 4 workers",
                         ids[wid].output()), ids[wid].output()
    metrics = read_metrics(out)
    assert metrics["workers"] == 2 and metrics["workers_started"] == 4
    assert metrics["topology"] == "mesh" and metrics["dropped_workers"] == []
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1]
    assert metrics["test_accuracy"] >= 0.97
    _check_exactly_once(metrics, 2)


def test_sync_run_survives_a_killed_worker(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # The run lasts its time budget whatever the machine's speed, so the kill always lands
    # mid-run; a short barrier deadline to notice it.
    cluster.start(3, mode="sync", **_reuters_settings(
        out, epochs=1_000_000, time_budget=6, barrier_timeout=2, rpc_timeout=2,
        eval_interval=0.3))
    assert cluster.coordinator is not None
    ids = cluster.worker_ids()
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)  # training is under way
    victim = 2
    ids[victim].proc.send_signal(signal.SIGKILL)
    assert cluster.coordinator.wait(90) == 0
    for wid, proc in ids.items():
        if wid != victim:
            assert proc.wait(30) == 0
    metrics = read_metrics(out)
    assert victim in metrics["dropped_workers"]
    assert any(r["peer"] == victim for r in metrics["peer_reports"])
    survivors = [s for s in metrics["worker_states"] if s["worker_id"] != victim]
    assert len(survivors) == 2
    for st in survivors:
        assert victim in st["dropped_peers"]
    assert metrics["stop_reason"] == "time budget"
    assert metrics["test_accuracy"] is not None and metrics["test_accuracy"] > 0.9


def test_hogwild_run_end_to_end_on_the_bundled_data(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "hogwild.cli", "run", "-v", "--workers=2", "--threads=1",
            f"--out={out}", "--epochs=10", "--eval-interval=0.5"]
    env = child_env()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path, env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, output
    assert "[coordinator]" in output and "[worker-1]" in output  # (-v: the workers' logs)
    # A whole `hogwild run` loads the libraries once and forks its children (more in
    # tests/unit/test_prespawn.py); the plot helper it started for the coordinator drew.
    assert "forked the coordinator and 2 worker(s)" in output, output
    assert "plot helper failed" not in output
    # By default every process talks mutual TLS with a run token (throw-away credentials).
    assert output.count("serving with mutual TLS, run token") == 3, output
    # Every connection passed its handshake: the coordinator names no peer for failing one.
    assert "closed before their first call" not in output, output
    metrics = read_metrics(out)
    assert metrics["test_accuracy"] >= 0.97, output
    assert metrics["threads"] == 1  # the workers' setting, reported by them
    for name in ("model.npz", "model.json", "metrics.jsonl", "loss.png"):
        assert (published(out) / name).is_file(), name
    # Training (~0.25 s) ends before the first evaluation is due (0.5 s): the learning curve
    # is the coordinator's cheap curve points and the closing evaluation, of which only the
    # closing one is printed as a progress row.
    rows = [json.loads(line) for line in (published(out) / "metrics.jsonl").read_text().splitlines()]
    printed = [line for line in output.splitlines() if line.startswith("[coordinator]")
               and PROGRESS_ROW.search(line.partition("] ")[2])]
    assert len(rows) == metrics["evaluations"] >= 3, rows
    assert len(printed) < len(rows), printed
    assert all(a["elapsed"] < b["elapsed"] for a, b in itertools.pairwise(rows))
    assert all(a["deltas_received"] <= b["deltas_received"] for a, b in itertools.pairwise(rows))
    assert rows[-1]["train_loss"] is not None and rows[-1]["val_loss"] is not None
    # The workers report their training loss every half second: rows between two reports
    # leave it empty rather than repeat the last one.
    assert any(r["train_loss"] is None for r in rows[1:-1]), rows


def _early_stopped(cluster: Cluster, out: Path, **settings: Any) -> list[dict[str, Any]]:
    """A sync run of 2 workers on Reuters with a min_delta no evaluation meets, which early
    stopping must end; its metrics.jsonl rows."""
    cluster.start(2, mode="sync", **_reuters_settings(
        out, epochs=1_000_000, min_delta=100.0, time_budget=30, **settings))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(90) == 0
    for worker in cluster.workers:
        assert worker.wait(30) == 0
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "early stopping", metrics["stop_reason"]
    return [json.loads(line) for line in (published(out) / "metrics.jsonl").read_text().splitlines()]


def test_curve_points_do_not_count_towards_patience(cluster: Cluster, tmp_path: Path) -> None:
    """patience 1 with a min_delta no evaluation can meet: the run stops at the second
    periodic evaluation (2 x eval_interval), not at the second of the curve points that
    come every few ms in between."""
    rows = _early_stopped(cluster, tmp_path / "out", eval_interval=0.4, patience=1)
    assert rows[-2]["elapsed"] >= 0.7, [r["elapsed"] for r in rows]
    assert len(rows) > 3  # curve points were taken, and did not stop the run


def test_sigterm_stops_a_worker_and_then_the_coordinator_gracefully(
        cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Far more epochs than can run before the signals arrive; the time budget is only a backstop.
    cluster.start(2, mode="async", **_reuters_settings(out, epochs=1_000_000, eval_interval=0.3,
                                                         time_budget=120))
    assert cluster.coordinator is not None
    ids = cluster.worker_ids()
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    ids[1].proc.send_signal(signal.SIGTERM)
    assert ids[1].wait(30) == EXIT_LEFT  # graceful: final delta sent, left a run that goes on
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(60) == 0
    assert ids[0].wait(30) == 0
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "SIGTERM"
    assert metrics["epochs"] < 1_000_000
    # The worker that left sent its final delta: the coordinator applied all it sent.
    assert metrics["coordinator_applied_from"]["1"] >= 1
    assert (published(out) / "model.npz").is_file()


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (from /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _start_long_run(tmp_path: Path, budget: float, env: dict[str, str]) -> subprocess.Popen[str]:
    """`hogwild run` with 2 workers on the bundled data, ended by its time budget only."""
    argv = [sys.executable, "-m", "hogwild.cli", "run", "-v", "--workers=2", "--threads=1",
            f"--out={tmp_path / 'out'}", "--epochs=1000000", f"--time-budget={budget:g}",
            "--eval-interval=0.3", "--patience=0"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path, env=env, start_new_session=True)


def _read_until_training(launcher: subprocess.Popen[str]) -> list[str]:
    """The launcher's lines up to the coordinator's first progress row (bounded by the
    test's timeout)."""
    assert launcher.stdout is not None
    lines = []
    for line in launcher.stdout:
        lines.append(line)
        if line.startswith("[coordinator]") and PROGRESS_ROW.match(line.split("]", 1)[1]):
            break
    return lines


def test_a_killed_launcher_stops_the_run_as_sigterm_would(tmp_path: Path) -> None:
    """`hogwild run` killed -9 (or by the OOM killer): its children notice that their parent
    is gone and stop as on SIGTERM, the coordinator writing its outputs. The coordinator used
    to die at its next line of output (BrokenPipeError, no model written) and the workers to
    run on without it."""
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"  # where the launcher writes its throw-away credentials
    scratch.mkdir()
    launcher = _start_long_run(tmp_path, 120, {**child_env(), "TMPDIR": str(scratch)})
    children: list[int] = []
    try:
        _read_until_training(launcher)
        children = [c for c in _children(launcher.pid) if _running(c)]
        assert len(children) >= 3, children  # the coordinator, two workers (and a plot helper)
        (secrets,) = scratch.glob("hogwild-secrets-*")
        assert {p.name for p in secrets.iterdir()} >= {"ca.crt", "run-token"}
        launcher.kill()
        launcher.wait(10)
        deadline = time.monotonic() + 90
        while any(_running(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(c) for c in children), "children outlived their launcher"
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "SIGTERM"
    assert metrics["test_accuracy"] is not None and metrics["test_accuracy"] > 0.9
    assert (published(out) / "model.npz").is_file()
    # The keys and the run token do not outlive the run (they used to stay in /tmp).
    assert not secrets.exists()


def test_sigterm_to_hogwild_run_writes_the_outputs_whatever_on_sigterm_says(
        tmp_path: Path) -> None:
    """A settings file or environment shared with a Kubernetes deployment may say
    ``on_sigterm: checkpoint``; `hogwild run` starts no successor, so its coordinator must
    still finish on SIGTERM (it used to hand the run over and exit 143: no model)."""
    out = tmp_path / "out"
    launcher = _start_long_run(tmp_path, 120, {**child_env(), "HOGWILD_ON_SIGTERM": "checkpoint"})
    try:
        lines = _read_until_training(launcher)
        launcher.send_signal(signal.SIGTERM)
        rest, _ = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
    output = "".join(lines) + rest
    assert launcher.returncode == 130, output
    assert "setting 'on_sigterm' (checkpoint) is for a coordinator that a supervisor starts " \
           "again; `hogwild run` ignores it" in output, output
    assert "left to a successor" not in output, output
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "SIGTERM"
    assert (published(out) / "model.npz").is_file()
    assert not (published(out) / "checkpoint.npz").exists()


def _listener(port: int, candidates: list[int]) -> int:
    """Which of ``candidates`` listens on TCP ``port`` (from /proc: its socket's inode)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[1].rpartition(":")[2], 16) == port and fields[3] == "0A":  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in candidates:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return pid
    raise AssertionError(f"no process of {candidates} listens on port {port}")


def test_a_worker_sent_sigterm_leaves_and_the_run_goes_on(tmp_path: Path) -> None:
    """SIGTERM to one worker of `hogwild run`: it sends its final delta and exits 143 (it
    left a run still under way); the launcher reports that and does not stop the run, which
    ends at its time budget with exit 0, the worker's final delta applied."""
    out = tmp_path / "out"
    launcher = _start_long_run(tmp_path, 5, child_env())
    lines: list[str] = []
    try:
        lines = _read_until_training(launcher)
        ports = [int(line.rsplit(" ", 1)[1]) for line in lines
                 if re.match(r"\[worker pid \d+\] worker listening on port ", line)]
        assert len(ports) == 2, "".join(lines)
        ports = ports[:1]
        os.kill(_listener(ports[0], _children(launcher.pid)), signal.SIGTERM)
        assert launcher.stdout is not None
        lines.extend(launcher.stdout)
        assert launcher.wait(60) == 0, "".join(lines)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(10)
    output = "".join(lines)
    # The worker sent SIGTERM is named by the id the coordinator gave it.
    victim = re.search(rf"\[worker pid (\d+)\] worker listening on port {ports[0]}\n", output)
    assert victim is not None, output
    registered = re.search(rf"\[worker pid {victim[1]}\].*registered as worker (\d+)", output)
    assert registered is not None, output
    worker_1 = int(registered[1])
    assert f"[run] worker-{worker_1} left the run (SIGTERM); the others go on" in output, output
    assert "stopping the run" not in output
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "time budget"
    assert metrics["coordinator_applied_from"][str(worker_1)] >= 1
    assert metrics["test_accuracy"] is not None and metrics["test_accuracy"] > 0.9


def test_hogwild_run_fails_cleanly_on_bad_data(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "hogwild.cli", "run", "--workers=2",
            f"--data={tmp_path / 'missing.svm'}", f"--out={tmp_path / 'out'}"]
    env = child_env()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=90, check=False)
    assert proc.returncode != 0
    assert "missing.svm" in proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "latest").exists()



def test_without_validation_rows_early_stopping_counts_each_training_loss_once(
        cluster: Cluster, tmp_path: Path) -> None:
    """No validation set: early stopping watches the workers' training loss, reported every
    half second by each worker. Evaluations every 0.1 s in between used to count the same
    value again as an evaluation without progress, so patience 2 ran out after 0.3 s, one
    report in. It takes three reports (the first sets the best): a row carries the training
    loss only when a report arrived since the row before it, so at least three rows before
    the closing one carry one. (Not a time: the two workers' reports may come a moment
    apart, each a new value.)"""
    rows = _early_stopped(cluster, tmp_path / "out", eval_interval=0.1, patience=2,
                          val_fraction=0.0)
    assert all(r["val_loss"] is None for r in rows)
    reported = [r for r in rows[:-1] if r["train_loss"] is not None]
    assert len(reported) >= 3, [(r["elapsed"], r["train_loss"]) for r in rows]


def test_sync_block_momentum_in_few_rounds_scales_the_workers_steps(
        cluster: Cluster, tmp_path: Path) -> None:
    """Five workers of one thread, block momentum on Reuters: a round is a whole epoch of a
    worker's rows (K = 1), so the workers step learning_rate x W / (4 K) = x 1.25, and the
    coordinator says so; the run still trains a model."""
    out = tmp_path / "out"
    cluster.start(5, mode="sync", **_reuters_settings(out, threads=1, combine="momentum",
                                                      epochs=3))
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(90) == 0
    for worker in cluster.workers:
        assert worker.wait(30) == 0
    assert re.search(r"learning_rate 0\.5 x 1\.25 = 0\.625 on the workers: block momentum "
                     r"builds its step over about 5 rounds, 5 epochs here",
                     cluster.coordinator.output()), cluster.output()
    metrics = read_metrics(out)
    assert metrics["combine"] == "momentum" and metrics["workers"] == 5
    rows = metrics["train_rows"]
    # About one round an epoch (cut so that whole rounds make the 3 epochs).
    assert rows / 5 / 1.5 < metrics["round_size"] <= -(-rows // 5)
    assert metrics["test_accuracy"] >= 0.9
