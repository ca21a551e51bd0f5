"""Faults on a real cluster (coordinator + workers as processes on loopback, port 0): signals in
every phase, a coordinator that disappears, and what the outputs then say.

Each test asserts how every process ends (exit code, bounded wait: nothing is left running)
and, when the run completes, its accuracy.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint, WorkerEntry
from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.errors import EXIT_LEFT

from .helpers import (
    PROGRESS_ROW,
    READY,
    REGISTERED,
    Cluster,
    Proc,
    final_states,
    incomplete,
    published,
    read_metrics,
    require_reuters,
    train_on_then_stop,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

DONE_LINE = re.compile(r"done \((.+?)\): ([\d.]+) epochs(?: \(model of epoch [\d.]+\))?, "
                       r"(\d+) rounds in .*?; "
                       r"(\d+) deltas, ([\d.]+) MB received")
WAITING = re.compile(r"waiting for \d+ worker")


def reuters(out: Path, **extra: Any) -> dict[str, Any]:
    train, test = require_reuters()
    base = {"data": str(train), "test_data": str(test), "threads": 1, "epochs": 10,
            "patience": 0, "eval_interval": 0.3, "out_dir": str(out), "rpc_timeout": 3,
            "barrier_timeout": 3, "connect_timeout": 60, "register_timeout": 120,
            "data_cache": False, "final_states": "compact"}
    base.update(extra)
    return base


def _all_exit(cluster: Cluster, codes: dict[str, int], within: float = 30) -> None:
    """Every process of the cluster ends (bounded wait) with the expected code."""
    got = {}
    for proc in cluster.procs:
        got[proc.name] = proc.wait(within)
    assert got == {name: codes.get(name, got[name]) for name in got}, got
    assert all(p.proc.poll() is not None for p in cluster.procs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_metrics_json_agrees_with_the_last_printed_line(cluster: Cluster, tmp_path: Path,
                                                        mode: str) -> None:
    out = tmp_path / "out"
    # Long enough for several evaluations.
    cluster.start(2, mode=mode, **reuters(out, epochs=1_000_000, time_budget=3))
    assert cluster.coordinator is not None
    seen_early = False
    while cluster.coordinator.proc.poll() is None:
        # metrics.jsonl grows while the run goes on, in the run's directory, not published.
        history = next(out.glob("*.incomplete/metrics.jsonl"), None)
        if not seen_early and history is not None and history.read_text().count("\n") >= 2:
            seen_early = not published(out).exists()
        time.sleep(0.1)
    assert cluster.coordinator.wait(120) == 0
    assert seen_early
    _all_exit(cluster, {"worker-0": 0, "worker-1": 0})
    line = cluster.coordinator.wait_for(DONE_LINE, 1)
    metrics = read_metrics(out)
    assert line.group(1) == metrics["stop_reason"]
    assert float(line.group(2)) == pytest.approx(metrics["epochs"], abs=0.006)
    assert int(line.group(3)) == metrics["rounds"]
    assert int(line.group(4)) == metrics["delta_rounds"]  # the done line counts worker rounds
    assert float(line.group(5)) == pytest.approx(metrics["bytes_received"] / 1e6, abs=0.06)
    assert metrics["test_accuracy"] >= 0.97
    # metrics.jsonl: one row per evaluation; its last row is the final evaluation.
    rows = (published(out) / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == metrics["evaluations"] >= 2
    # The done line names the run's own directory, which latest links to.
    assert line.string.endswith(f"outputs in {published(out).resolve()}")


def test_sigterm_while_waiting_for_registrations_exits_at_once(cluster: Cluster,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Two workers expected, one started: the coordinator waits (register_timeout 300 s).
    cluster.start(1, **reuters(out, workers=2, register_timeout=300))
    assert cluster.coordinator is not None
    cluster.workers[0].wait_for(REGISTERED, 60)
    began = time.monotonic()
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(20) == 130
    # The registered worker is told to stop and exits cleanly.
    assert cluster.workers[0].wait(20) == 0
    assert time.monotonic() - began < 60  # far below register_timeout: it did not wait
    assert "no outputs written" in cluster.coordinator.output()
    assert not published(out).exists()


def test_sigterm_while_loading_data_exits_at_once(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(0, **reuters(out, workers=2, register_timeout=300))
    assert cluster.coordinator is not None
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(60) == 130
    assert not published(out).exists()


def test_sigterm_before_the_run_with_on_sigterm_checkpoint_sends_workers_to_register_again(
        cluster: Cluster, tmp_path: Path) -> None:
    """Handing over before training: the registered worker is not stopped (a Job would count
    it complete and never start it again) but registers with the successor."""
    out = tmp_path / "out"
    settings = reuters(out, workers=2, register_timeout=300, connect_timeout=90,
                       on_sigterm="checkpoint")
    cluster.start(1, **settings)
    assert cluster.coordinator is not None
    port = int(_coordinator_address(cluster).rpartition(":")[2])
    cluster.workers[0].wait_for(REGISTERED, 60)
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(20) == EXIT_LEFT
    assert "before the run started: left to a successor" in cluster.coordinator.output()
    cluster.workers[0].wait_for(re.compile(r"leaving the run to register again: the "
                                           r"coordinator was sent SIGTERM"), 10)
    assert cluster.workers[0].proc.poll() is None
    # The successor (here as a Job would start it: resume, nothing to resume yet) gets it.
    again = cluster.spawn("coordinator-again", "coordinator", {
        **settings, "bind_host": "127.0.0.1", "coordinator_port": port, "resume": str(out),
        "epochs": 2})
    # The new worker asks for any free port only once the successor holds the one its
    # predecessor freed: started side by side, the worker was once given that very port.
    again.wait_for(READY, 60)
    cluster.workers.append(cluster.spawn("worker-1", "worker", {
        **settings, "bind_host": "127.0.0.1", "worker_port": 0,
        "coordinator_address": f"127.0.0.1:{port}"}))
    assert again.wait(120) == 0
    _all_exit(cluster, {"coordinator": EXIT_LEFT, "coordinator-again": 0, "worker-0": 0,
                        "worker-1": 0})
    assert read_metrics(out)["test_accuracy"] >= 0.95


def test_workers_exit_when_the_coordinator_dies_before_start(cluster: Cluster,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(1, **reuters(out, workers=2, register_timeout=300, connect_timeout=300))
    assert cluster.coordinator is not None
    cluster.workers[0].wait_for(REGISTERED, 60)
    cluster.coordinator.proc.send_signal(signal.SIGKILL)
    assert cluster.coordinator.wait(10) == -signal.SIGKILL
    # Far below connect_timeout: the worker sees the coordinator's port refuse connections.
    assert cluster.workers[0].wait(30) == 1
    assert "went away before the run started" in cluster.workers[0].output()


# ------------------------------------------------------------------ faults during training

ADVERTISED = re.compile(r"registered as worker (\d+) of \d+ in run \w+ \(advertising ([\d.]+):(\d+)\)")
# Long enough for every fault below to land mid-run and for the run to recover from it.
BUDGET = 10
_CLEAN: dict[str, float] = {}


def faulty(out: Path, **extra: Any) -> dict[str, Any]:
    return reuters(out, **{"epochs": 1_000_000, "time_budget": BUDGET, "barrier_timeout": 2,
                           "rpc_timeout": 2, **extra})


def clean_accuracy(tmp_path: Path, mode: str) -> float:
    """Test accuracy of the same run without a fault (run once per mode, then remembered)."""
    if mode not in _CLEAN:
        cluster = Cluster(tmp_path / f"clean-{mode}")
        cluster.workdir.mkdir()
        out = cluster.workdir / "out"
        try:
            cluster.start(3, mode=mode, **faulty(out, time_budget=4))
            assert cluster.coordinator is not None
            assert cluster.coordinator.wait(120) == 0, cluster.output()
            _CLEAN[mode] = float(read_metrics(out)["test_accuracy"])
        finally:
            cluster.reap()
    return _CLEAN[mode]


def _finished_well(cluster: Cluster, out: Path, tmp_path: Path, mode: str,
                   codes: dict[str, int], fault: str = "",
                   stop_reason: str = "time budget") -> dict[str, Any]:
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(120) == 0
    _all_exit(cluster, {"coordinator": 0, **codes})
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == stop_reason
    clean = clean_accuracy(tmp_path, mode)
    _report(fault, mode, metrics, clean, codes)
    assert metrics["test_accuracy"] >= clean - 0.01
    return metrics


def _report(fault: str, mode: str, metrics: dict[str, Any], clean: float,
            codes: dict[str, int]) -> None:
    """One line of the README's fault table (shown with ``pytest -s``)."""
    print(f"\nFAULT | {fault} | {mode} | {metrics['test_accuracy']:.4f} | {clean:.4f} | "
          f"{metrics['stop_reason']} | {sorted(codes.values())} | "
          f"dropped {metrics['dropped_workers']}")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_worker_is_dropped_and_the_run_completes(cluster: Cluster, tmp_path: Path,
                                                          mode: str) -> None:
    out = tmp_path / "out"
    cluster.start(3, mode=mode, **faulty(out))
    ids = cluster.worker_ids()
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    ids[2].proc.send_signal(signal.SIGKILL)
    metrics = _finished_well(cluster, out, tmp_path, mode,
                             {p.name: 0 for w, p in ids.items() if w != 2}
                             | {ids[2].name: -signal.SIGKILL}, "kill -9 worker")
    assert 2 in metrics["dropped_workers"]
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_frozen_worker_resynchronises_and_nobody_fails(cluster: Cluster, tmp_path: Path,
                                                         mode: str) -> None:
    out = tmp_path / "out"
    # Room for the freeze and the rejoin inside the budget, even on a loaded machine.
    cluster.start(3, mode=mode, **faulty(out, time_budget=2 * BUDGET))
    ids = cluster.worker_ids()
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    frozen = ids[1]
    frozen.proc.send_signal(signal.SIGSTOP)
    time.sleep(10)  # five barrier_timeouts: its peers drop it
    frozen.proc.send_signal(signal.SIGCONT)
    cluster.coordinator.wait_for(re.compile(r"worker 1 rejoined"), 30)
    # Ended by an operator once healed: the time budget's end after a fault is the killed
    # worker's test (a budget long enough for the freeze took 35 s a test).
    train_on_then_stop(cluster)
    metrics = _finished_well(cluster, out, tmp_path, mode, {p.name: 0 for p in ids.values()},
                             "SIGSTOP worker 10 s", stop_reason="SIGTERM")
    assert "was frozen for" in frozen.output()
    # It came back: its final state was collected, and no healthy worker was dropped for it.
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1, 2]
    assert metrics["dropped_workers"] == []
    assert all(r["peer"] == 1 for r in metrics["peer_reports"])


def test_a_frozen_star_worker_is_refused_and_rejoins_through_the_relay(cluster: Cluster,
                                                                      tmp_path: Path) -> None:
    """Topology star, sync: a worker frozen past barrier_timeout is dropped by the relay; once
    awake, its next message to the coordinator (a delta or a progress report) is refused, it
    registers again and the relay takes it back. The run ends with all three workers."""
    out = tmp_path / "out"
    cluster.start(3, mode="sync", **faulty(out, topology="star", time_budget=2 * BUDGET))
    ids = cluster.worker_ids()
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    frozen = ids[1]
    frozen.proc.send_signal(signal.SIGSTOP)
    cluster.coordinator.wait_for(re.compile(r"worker 1 dropped: "), 30)
    time.sleep(1)
    frozen.proc.send_signal(signal.SIGCONT)
    cluster.coordinator.wait_for(
        re.compile(r"worker 1 rejoined at round \d+ .*through the star relay"), 30)
    train_on_then_stop(cluster)
    metrics = _finished_well(cluster, out, tmp_path, "sync", {p.name: 0 for p in ids.values()},
                             "SIGSTOP worker (star)", stop_reason="SIGTERM")
    assert "was frozen for" in frozen.output()
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1, 2]
    assert metrics["dropped_workers"] == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_restarted_worker_rejoins_with_its_old_id(cluster: Cluster, tmp_path: Path,
                                                    mode: str) -> None:
    out = tmp_path / "out"
    # Room for a new process to start and rejoin inside the budget, even on a loaded machine.
    addresses, victim = _kill_in_training(cluster, out, mode)
    assert cluster.coordinator is not None
    again = _respawn(cluster, out, mode, 2 * BUDGET, addresses, 2)
    again.wait_for(re.compile(r"registered as worker 2 of 3"), 60)
    cluster.coordinator.wait_for(re.compile(r"worker 2 rejoined at round (\d+)"), 30)
    train_on_then_stop(cluster)
    codes = {addresses[w][0].name: 0 for w in (0, 1)} | {victim.name: -signal.SIGKILL,
                                                        again.name: 0}
    metrics = _finished_well(cluster, out, tmp_path, mode, codes, "kill -9 + restart worker",
                             stop_reason="SIGTERM")
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1, 2]
    assert 2 not in metrics["dropped_workers"]
    # It trained after it came back, and its peers applied its new deltas.
    assert states[2]["rounds"] > 0
    assert all(states[w]["applied_from"]["2"] > 0 for w in (0, 1))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_restarted_worker_rejoins_through_the_star_relay(cluster: Cluster, tmp_path: Path,
                                                           mode: str) -> None:
    """Topology star: the relay takes a restarted worker back (it used to keep relaying to
    the dead process only, and the new one hung, never stopping). Sync: every worker, the
    restarted one included, still ends equal to the coordinator's model."""
    out = tmp_path / "out"
    # Async with a staleness bound, as the star cluster test runs it (see there).
    extra = {"topology": "star", **({"staleness": 2} if mode == "async" else {})}
    addresses, victim = _kill_in_training(cluster, out, mode, **extra)
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(re.compile(r"worker 2 dropped: "), 30)
    again = _respawn(cluster, out, mode, 2 * BUDGET, addresses, 2)
    cluster.coordinator.wait_for(
        re.compile(r"worker 2 rejoined at round \d+ .*through the star relay"), 60)
    train_on_then_stop(cluster)
    codes = {addresses[w][0].name: 0 for w in (0, 1)} | {victim.name: -signal.SIGKILL,
                                                        again.name: 0}
    metrics = _finished_well(cluster, out, tmp_path, mode, codes, "kill -9 + restart worker "
                             "(star)", stop_reason="SIGTERM")
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1, 2]
    assert metrics["dropped_workers"] == []
    relay = str(COORDINATOR_SENDER_ID)
    # It trained after it came back; the relay passed its deltas on and sent it the others'.
    assert states[2]["rounds"] > 0 and states[2]["applied_from"][relay] > 0
    assert again.output().count("registered as worker 2") == 1, again.output()
    if mode == "sync":
        with final_states(out, "global.npz") as g:
            global_w = g["w"]
        for wid in states:
            with final_states(out, f"worker-{wid}.npz") as f:
                np.testing.assert_allclose(f["w"], global_w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_restarted_interior_tree_worker_rejoins_as_a_leaf_of_the_coordinator(
        cluster: Cluster, tmp_path: Path, mode: str) -> None:
    """Topology tree, 4 workers, fan-out 2: worker 0 relays for 2 and 3. Killed, its children
    re-attach to the coordinator; restarted, it comes back as one more leaf of the
    coordinator (it used to be told to stop, and a StatefulSet restarted it again and
    again). Its place in the tree stays routed around."""
    out = tmp_path / "out"
    extra = {"topology": "tree", "tree_fanout": 2, **({"staleness": 2} if mode == "async"
                                                     else {})}
    addresses, victim = _kill_in_training(cluster, out, mode, n=4, victim=0, **extra)
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(re.compile(r"worker 0 dropped: "), 30)
    again = _respawn(cluster, out, mode, 2 * BUDGET, addresses, 0)
    cluster.coordinator.wait_for(re.compile(r"worker 0 rejoined at round \d+ .*as a leaf of "
                                            r"the coordinator"), 60)
    train_on_then_stop(cluster)
    codes = {addresses[w][0].name: 0 for w in (1, 2, 3)} | {victim.name: -signal.SIGKILL,
                                                           again.name: 0}
    metrics = _finished_well(cluster, out, tmp_path, mode, codes, "kill -9 + restart an "
                             "interior worker (tree)", stop_reason="SIGTERM")
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1, 2, 3] and metrics["dropped_workers"] == []
    relay = str(COORDINATOR_SENDER_ID)
    # The new process talks to the coordinator only, both ways, and the run went on around
    # it (async with a staleness bound once stalled for good after the re-attachment).
    assert set(states[0]["applied_from"]) == {relay} and states[0]["applied_from"][relay] >= 10
    assert states[0]["acked_by"] == {} and states[0]["acked_by_coordinator"] > 0
    assert again.output().count("registered as worker 0") == 1, again.output()
    if mode == "sync":
        # It and worker 1 (outside its old subtree) applied every delta once.
        with final_states(out, "global.npz") as g:
            global_w = g["w"]
        for wid in (0, 1):
            with final_states(out, f"worker-{wid}.npz") as f:
                np.testing.assert_allclose(f["w"], global_w, rtol=1e-5, atol=1e-5)


def _kill_in_training(cluster: Cluster, out: Path, mode: str, n: int = 3, victim: int = 2,
                      **extra: Any) -> tuple[dict[int, tuple[Proc, str, int]], Proc]:
    """``n`` workers with a budget of 2 x BUDGET; worker ``victim`` killed (-9) once training
    is under way. Returns the addresses the workers advertised and the killed process."""
    cluster.start(n, mode=mode, **faulty(out, time_budget=2 * BUDGET, **extra))
    assert cluster.coordinator is not None
    addresses = _advertised(cluster)
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    proc = addresses[victim][0]
    proc.proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    return addresses, proc


def _advertised(cluster: Cluster) -> dict[int, tuple[Proc, str, int]]:
    """Worker id -> (process, host, port) as each worker advertised itself."""
    addresses = {}
    for proc in cluster.workers:
        match = proc.wait_for(ADVERTISED, 60)
        addresses[int(match.group(1))] = (proc, match.group(2), int(match.group(3)))
    return addresses


def _respawn(cluster: Cluster, out: Path, mode: str, budget: float,
             addresses: dict[int, tuple[Proc, str, int]], wid: int, workers: int = 3,
             name: str | None = None) -> Proc:
    """What a StatefulSet does: a new process at the dead worker's address."""
    _, host, port = addresses[wid]
    return cluster.spawn(name or f"worker-{wid}-again", "worker", {
        **faulty(out, mode=mode, time_budget=budget), "bind_host": "127.0.0.1",
        "workers": workers,
        "worker_port": port, "advertise_address": f"{host}:{port}",
        "coordinator_address": _coordinator_address(cluster)})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_that_rejoined_while_another_was_dead_takes_it_back(
        cluster: Cluster, tmp_path: Path, mode: str) -> None:
    """Two overlapping faults: worker 2 dies; worker 1 is restarted while 2 is still dead;
    then 2 is restarted. Worker 1 was configured with 2 marked down, so it takes 2 back
    (it used to refuse it as no peer, and 2 kept registering again until the run ended)."""
    out = tmp_path / "out"
    cluster.start(3, mode=mode, **faulty(out, time_budget=3 * BUDGET))
    assert cluster.coordinator is not None
    addresses = _advertised(cluster)
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)

    def restart(wid: int) -> Proc:
        proc = _respawn(cluster, out, mode, 3 * BUDGET, addresses, wid)
        proc.wait_for(re.compile(rf"registered as worker {wid} of 3"), 60)
        return proc

    for wid in (2, 1):
        addresses[wid][0].proc.send_signal(signal.SIGKILL)
        addresses[wid][0].wait(10)
        if wid == 2:
            cluster.coordinator.wait_for(re.compile(r"worker 2 dropped: "), 30)
    again1 = restart(1)
    cluster.coordinator.wait_for(re.compile(r"worker 1 rejoined at round"), 30)
    assert "2@" in again1.wait_for(re.compile(r"configured: .*peers .*\(down\)"), 10).group(0)
    again2 = restart(2)
    cluster.coordinator.wait_for(re.compile(r"worker 2 rejoined at round"), 30)
    train_on_then_stop(cluster)
    codes = {addresses[0][0].name: 0, addresses[1][0].name: -signal.SIGKILL,
             addresses[2][0].name: -signal.SIGKILL, again1.name: 0, again2.name: 0}
    metrics = _finished_well(cluster, out, tmp_path, mode, codes, "two overlapping restarts",
                             stop_reason="SIGTERM")
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1, 2]
    assert metrics["dropped_workers"] == []
    # Worker 1 applied the returned worker's deltas, and 2 registered once: never refused.
    assert states[1]["applied_from"]["2"] > 0 and states[2]["applied_from"]["1"] > 0
    assert again2.output().count("registered as worker 2") == 1, again2.output()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_workers_restarted_together_rejoin_as_peers_of_each_other(
        cluster: Cluster, tmp_path: Path, mode: str) -> None:
    """Workers 1 and 2 die together and come back together: each rejoin is configured while
    the other one is still down, and each must still end up sending to and applying from the
    other."""
    out = tmp_path / "out"
    cluster.start(3, mode=mode, **faulty(out, time_budget=3 * BUDGET))
    assert cluster.coordinator is not None
    addresses = _advertised(cluster)
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    for wid in (1, 2):
        addresses[wid][0].proc.send_signal(signal.SIGKILL)
    for wid in (1, 2):
        addresses[wid][0].wait(10)
        cluster.coordinator.wait_for(re.compile(rf"worker {wid} dropped: "), 30)
    again = {wid: _respawn(cluster, out, mode, 3 * BUDGET, addresses, wid) for wid in (1, 2)}
    for wid in (1, 2):
        cluster.coordinator.wait_for(re.compile(rf"worker {wid} rejoined at round"), 60)
    train_on_then_stop(cluster)
    codes = {addresses[0][0].name: 0, addresses[1][0].name: -signal.SIGKILL,
             addresses[2][0].name: -signal.SIGKILL, again[1].name: 0, again[2].name: 0}
    metrics = _finished_well(cluster, out, tmp_path, mode, codes,
                             "two workers restarted together", stop_reason="SIGTERM")
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1, 2]
    assert metrics["dropped_workers"] == []
    assert states[1]["applied_from"]["2"] > 0 and states[2]["applied_from"]["1"] > 0
    for wid in (1, 2):
        assert again[wid].output().count(f"registered as worker {wid}") == 1, again[wid].output()


def _kill_once_checkpointed(coordinator: Proc, out: Path, settle: float = 1.0) -> None:
    """SIGKILL the coordinator ``settle`` seconds after its run's first checkpoint is on disk
    (waited for at most a minute)."""
    deadline = time.monotonic() + 60
    while not any(out.glob("*.incomplete/checkpoint.npz")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(settle)
    coordinator.proc.send_signal(signal.SIGKILL)
    assert coordinator.wait(10) == -signal.SIGKILL


def _coordinator_address(cluster: Cluster) -> str:
    assert cluster.coordinator is not None
    return f"127.0.0.1:{cluster.coordinator.wait_for(READY, 1).group(1)}"


def test_a_second_worker_advertising_a_taken_address_is_refused(cluster: Cluster,
                                                                tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster.start(1, **reuters(out, workers=2))
    assert cluster.coordinator is not None
    first = cluster.workers[0]
    match = first.wait_for(ADVERTISED, 60)
    taken = f"{match.group(2)}:{match.group(3)}"
    common = {**reuters(out, workers=2), "bind_host": "127.0.0.1", "worker_port": 0,
              "coordinator_address": _coordinator_address(cluster)}
    impostor = cluster.spawn("impostor", "worker", {**common, "advertise_address": taken})
    assert impostor.wait(60) == 1
    assert "is registered by worker 0" in impostor.output()
    assert "still answers there" in impostor.output()
    # The run is not held up: the next worker completes it.
    cluster.spawn("worker-1", "worker", common)
    assert cluster.coordinator.wait(120) == 0
    _all_exit(cluster, {"coordinator": 0, "worker-0": 0, "worker-1": 0, "impostor": 1})
    assert read_metrics(out)["test_accuracy"] >= 0.97


GIVEN_BACK = re.compile(r"worker (\d+) at \S+ did not answer: .*: its place goes to the next "
                        r"worker that registers")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_killed_after_registering_gives_its_place_to_the_next(
        cluster: Cluster, tmp_path: Path, mode: str) -> None:
    """A worker dies between its registration and its shipment (a pod crashing at start-up;
    a registration by someone who serves nothing is the same). Its place goes back, in one
    line, to the next worker that registers, which is shipped the same part: the run
    completes. It used to end at once, `cannot ship shard`, exit 1, nothing written."""
    out = tmp_path / "out"
    cluster.start(0, **reuters(out, workers=2, mode=mode, epochs=3))
    assert cluster.coordinator is not None
    common = {**reuters(out, workers=2, mode=mode, epochs=3), "bind_host": "127.0.0.1",
              "worker_port": 0, "coordinator_address": _coordinator_address(cluster)}
    doomed = cluster.spawn("doomed", "worker", common)
    doomed_id = int(doomed.wait_for(REGISTERED, 60).group(1))
    doomed.proc.send_signal(signal.SIGKILL)
    assert doomed.wait(10) == -signal.SIGKILL
    cluster.spawn("worker-a", "worker", common).wait_for(REGISTERED, 60)
    given = cluster.coordinator.wait_for(GIVEN_BACK, 60)
    assert int(given.group(1)) == doomed_id
    late = cluster.spawn("worker-b", "worker", common)
    assert int(late.wait_for(REGISTERED, 60).group(1)) == doomed_id
    assert cluster.coordinator.wait(120) == 0, cluster.output()
    _all_exit(cluster, {"worker-a": 0, "worker-b": 0})
    assert cluster.coordinator.output().count("its place goes to the next worker") == 1
    metrics = read_metrics(out)
    assert metrics["workers"] == 2 and metrics["dropped_workers"] == []
    assert metrics["test_accuracy"] >= 0.95


def test_a_place_nobody_takes_again_fails_the_run_in_one_line(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    """A stranger registers with a plain-text coordinator, giving an address where nothing
    listens: its place goes back, and when no worker takes it within register_timeout the
    run fails with one line, exit 1."""
    out = tmp_path / "out"
    cluster.start(0, **reuters(out, workers=1, register_timeout=3))
    assert cluster.coordinator is not None
    with socket.socket() as closed:  # a port that was free a moment ago: nothing listens
        closed.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    with grpc.insecure_channel(_coordinator_address(cluster)) as channel:
        reply = pb_grpc.CoordinatorStub(channel).Register(pb.RegisterRequest(
            protocol_version=PROTOCOL_VERSION, address=nowhere, threads=1,
            hostname="stranger", pid=1, process_secret=b"s" * 32), timeout=30)
    assert reply.worker_id == 0
    assert cluster.coordinator.wait(120) == 1
    errors = [ln for ln in cluster.coordinator.lines if ln.startswith("hogwild coordinator:")]
    said = ("hogwild coordinator: error: no worker registered for the place of worker(s) 0 "
            "within register_timeout=3s after its holder did not answer (start another worker "
            "sooner, or raise register_timeout)")
    assert errors == [said], cluster.output()
    assert cluster.coordinator.output().count(f"worker 0 at {nowhere} did not answer") == 1
    assert not published(out).exists()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_to_a_worker_then_to_the_coordinator_during_training(
        cluster: Cluster, tmp_path: Path, mode: str) -> None:
    out = tmp_path / "out"
    cluster.start(3, mode=mode, **faulty(out, time_budget=120))
    ids = cluster.worker_ids()
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(PROGRESS_ROW, 60)
    ids[1].proc.send_signal(signal.SIGTERM)
    # Leaves after sending its final delta, with the code that has a supervisor start it again.
    assert ids[1].wait(30) == EXIT_LEFT
    time.sleep(2)
    cluster.coordinator.proc.send_signal(signal.SIGTERM)
    assert cluster.coordinator.wait(60) == 0  # stops the others, collects, writes outputs
    _all_exit(cluster, {**{p.name: 0 for p in cluster.procs}, ids[1].name: EXIT_LEFT})
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "SIGTERM"
    clean = clean_accuracy(tmp_path, mode)
    _report("SIGTERM worker, then coordinator", mode, metrics, clean,
            {p.name: p.proc.returncode for p in cluster.procs})
    assert metrics["test_accuracy"] >= clean - 0.01
    assert metrics["coordinator_applied_from"]["1"] >= 1


@pytest.mark.parametrize(("mode", "topology", "staleness"), [
    ("sync", "mesh", None), ("async", "mesh", None), ("async", "mesh", 2), ("sync", "star", None),
    ("async", "tree", 2)])
def test_a_killed_coordinator_resumes_from_its_checkpoint(
        cluster: Cluster, tmp_path: Path, mode: str, topology: str, staleness: int | None
        ) -> None:
    out = tmp_path / "out"
    # patience: early stopping's counters and best model go on across the resume (too large
    # to stop this run, which ends on its time budget).
    bound = {} if staleness is None else {"staleness": staleness}
    settings = faulty(out, mode=mode, topology=topology, checkpoint_interval=0.5,
                      connect_timeout=90, patience=10_000, **bound)
    cluster.start(3, **settings)
    assert cluster.coordinator is not None
    first = cluster.coordinator
    # The restarted coordinator must be found where the first one was.
    port = int(_coordinator_address(cluster).rpartition(":")[2])
    first.wait_for(PROGRESS_ROW, 60)
    _kill_once_checkpointed(first, out, settle=2)  # a few more checkpoints
    run = incomplete(out)  # the killed coordinator's run, resumed in its own directory
    before = (run / "metrics.jsonl").read_text().splitlines()
    rows_before = len(before)
    assert rows_before >= 2  # appended as the run went, not lost with the coordinator
    time.sleep(1)
    again = cluster.spawn("coordinator-again", "coordinator", {
        **settings, "bind_host": "127.0.0.1", "workers": 3, "coordinator_port": port,
        "resume": str(out)})
    again.wait_for(re.compile(r"resumed run \w+ at round \d+"), 90)
    again.wait_for(re.compile(r"early stopping goes on: best validation loss \d"), 10)
    assert again.wait(120) == 0
    _all_exit(cluster, {p.name: 0 for p in cluster.workers} | {"coordinator": -signal.SIGKILL,
                                                                 "coordinator-again": 0})
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "time budget"
    assert metrics["resumed_at_round"] > 1
    # Training went on after the resume (a resumed sync star once trained no more round
    # until its time budget ran out, and still ended "time budget", exit 0).
    assert metrics["rounds"] >= metrics["resumed_at_round"] + 20
    clean = clean_accuracy(tmp_path, mode)
    _report(f"kill -9 coordinator, resume ({topology})", mode, metrics, clean,
            {p.name: p.proc.returncode for p in cluster.procs})
    assert metrics["test_accuracy"] >= clean - 0.01
    # The run is complete: nothing to resume, and published under its own name.
    assert not run.exists()
    assert published(out).resolve() == out / run.name.removesuffix(".incomplete")
    assert not (published(out) / "checkpoint.npz").exists()
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1, 2]
    # One history across both coordinators: the rows before the crash, then the new ones.
    lines = (published(out) / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) > rows_before
    # The checkpoint counted the rows before it; the resumed run read them back from the file.
    kept = next((i for i, (a, b) in enumerate(zip(lines, before)) if a != b), rows_before)
    assert kept >= 1, (lines[:3], before[:3])
    assert all(a["elapsed"] <= b["elapsed"] for a, b in itertools.pairwise(rows))


def test_a_run_that_engaged_fewer_workers_resumes_with_them(cluster: Cluster,
                                                            tmp_path: Path) -> None:
    """engage auto: 4 workers started on Reuters, 2 engaged (the other 2 exit 0 at the
    start). The coordinator is killed; its successor, given the same settings (workers: 4),
    resumes the checkpoint's run of 2 and does not wait for the released ones."""
    out = tmp_path / "out"
    settings = faulty(out, mode="sync", checkpoint_interval=0.5, connect_timeout=90,
                      engage="auto")
    cluster.start(4, **settings)
    assert cluster.coordinator is not None
    first = cluster.coordinator
    port = int(_coordinator_address(cluster).rpartition(":")[2])
    first.wait_for(PROGRESS_ROW, 60)
    assert "engaging 2 of 4 workers" in first.output()
    _kill_once_checkpointed(first, out)
    again = cluster.spawn("coordinator-again", "coordinator", {
        **settings, "bind_host": "127.0.0.1", "workers": 4, "coordinator_port": port,
        "resume": str(out)})
    again.wait_for(re.compile(r"resumed run \w+ at round \d+"), 90)
    assert again.wait(120) == 0, cluster.output()
    _all_exit(cluster, {p.name: 0 for p in cluster.workers} | {"coordinator": -signal.SIGKILL,
                                                                 "coordinator-again": 0})
    assert "engaging" not in again.output()
    metrics = read_metrics(out)
    assert metrics["workers"] == 2 and metrics["resumed_at_round"] > 1
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1]
    assert metrics["dropped_workers"] == [] and metrics["test_accuracy"] >= 0.95


@pytest.mark.parametrize(("mode", "topology"), [("sync", "mesh"), ("async", "star")])
def test_sigterm_with_on_sigterm_checkpoint_hands_the_run_to_a_resumed_coordinator(
        cluster: Cluster, tmp_path: Path, mode: str, topology: str) -> None:
    """An evicted coordinator pod: it writes a checkpoint, tells the workers to register
    again and exits 143 (a Job starts it again); its successor resumes at the checkpoint's
    round and the workers never leave. No periodic checkpoints: the one resumed from is the
    hand-over's. SIGUSR1 then ends the resumed run the way SIGTERM otherwise would."""
    out = tmp_path / "out"
    settings = faulty(out, mode=mode, topology=topology, checkpoint_interval=0,
                      connect_timeout=90, time_budget=120, on_sigterm="checkpoint")
    cluster.start(3, **settings)
    assert cluster.coordinator is not None
    first = cluster.coordinator
    port = int(_coordinator_address(cluster).rpartition(":")[2])
    first.wait_for(PROGRESS_ROW, 60)
    time.sleep(2)
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait(30) == EXIT_LEFT
    handed = first.wait_for(re.compile(r"the run was left to a successor at round (\d+)"), 1)
    assert (incomplete(out) / "checkpoint.npz").exists()
    assert not published(out).exists() and not (incomplete(out) / "model.npz").exists()
    for worker in cluster.workers:
        worker.wait_for(re.compile(r"leaving the run to register again: the coordinator was "
                                   r"sent SIGTERM"), 10)
        assert worker.proc.poll() is None  # waiting for the successor, not gone
    again = cluster.spawn("coordinator-again", "coordinator", {
        **settings, "bind_host": "127.0.0.1", "workers": 3, "coordinator_port": port,
        "resume": str(out)})
    resumed = again.wait_for(re.compile(r"resumed run \w+ at round (\d+)"), 90)
    # The successor goes on from the round the hand-over reached, not from an older one.
    assert int(resumed.group(1)) == int(handed.group(1)) + 1
    again.wait_for(PROGRESS_ROW, 30)
    time.sleep(3)
    again.proc.send_signal(signal.SIGUSR1)  # ends the run, outputs written, exit 0
    assert again.wait(60) == 0
    _all_exit(cluster, {p.name: 0 for p in cluster.workers} | {"coordinator": EXIT_LEFT,
                                                                 "coordinator-again": 0})
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "SIGUSR1"
    assert metrics["resumed_at_round"] == int(resumed.group(1))
    assert metrics["rounds"] >= metrics["resumed_at_round"] + 20  # it trained on
    clean = clean_accuracy(tmp_path, mode)
    _report(f"SIGTERM coordinator with on_sigterm checkpoint, resume ({topology})", mode,
            metrics, clean, {p.name: p.proc.returncode for p in cluster.procs})
    assert metrics["test_accuracy"] >= clean - 0.01
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == [0, 1, 2]
    assert metrics["dropped_workers"] == []
    assert not (published(out) / "checkpoint.npz").exists()
    assert not list(out.glob("*.incomplete"))


def test_a_resume_on_other_rows_is_refused_before_any_worker_is_waited_for(
        cluster: Cluster, tmp_path: Path) -> None:
    """A checkpoint remembers a fingerprint of the rows it was taken on; resuming it on other
    ones (here: rows it never saw) would train its model on them and exit 0."""
    out = tmp_path / "out"
    settings = {**reuters(out, workers=2), "bind_host": "127.0.0.1", "coordinator_port": 0}
    workers = [WorkerEntry(w, f"127.0.0.1:{40000 + w}", 1) for w in range(2)]
    unknown = Checkpoint(run_id="r1", w=np.zeros(3), round=5, elapsed=1.0, deltas_received=0,
                         bytes_received=0, duplicates=0, workers=workers)
    run = out / "20250101-000000-0123456789ab.incomplete"  # as a killed coordinator leaves it
    run.mkdir(parents=True)
    checkpoint_file.save(run, dataclasses.replace(unknown, data="0" * 32))
    refused = cluster.spawn("refused", "coordinator", {**settings, "resume": str(out)})
    assert refused.wait(60) == 2
    refused.wait_for(re.compile(r"hogwild coordinator: error: setting 'resume': the checkpoint "
                                r"in .* was taken on other training or validation rows than "
                                r"these"), 1)
    assert not any("waiting for" in line for line in refused.lines)
    # A checkpoint that does not say (the previous format) is not refused for it.
    checkpoint_file.save(run, unknown)
    taken = cluster.spawn("taken", "coordinator", {**settings, "resume": str(out)})
    taken.wait_for(re.compile(r"waiting for 2 worker\(s\)"), 60)


@pytest.mark.parametrize(("mode", "topology", "victim"),
                         [("sync", "mesh", 2), ("async", "star", 2), ("sync", "tree", 0)])
def test_a_resumed_coordinator_goes_on_without_a_worker_that_died_meanwhile(
        cluster: Cluster, tmp_path: Path, mode: str, topology: str, victim: int) -> None:
    """Two faults overlapping: a worker dies while the coordinator is down. The resumed
    coordinator waits register_timeout for it, goes on with the others (it used to exit 1,
    only 2 of 3 workers registered) and takes it back when it is restarted. In the tree the
    victim is worker 0, worker 2's parent: 2 is the coordinator's child from the start."""
    out = tmp_path / "out"
    extra = {"staleness": 2} if topology == "star" else {}
    settings = faulty(out, mode=mode, topology=topology, checkpoint_interval=0.5,
                      connect_timeout=90, time_budget=3 * BUDGET, **extra)
    cluster.start(3, **settings)
    assert cluster.coordinator is not None
    first = cluster.coordinator
    port = int(_coordinator_address(cluster).rpartition(":")[2])
    addresses = _advertised(cluster)
    first.wait_for(PROGRESS_ROW, 60)
    _kill_once_checkpointed(first, out)
    killed = addresses[victim][0]
    killed.proc.send_signal(signal.SIGKILL)
    assert killed.wait(10) == -signal.SIGKILL
    again = cluster.spawn("coordinator-again", "coordinator", {
        **settings, "bind_host": "127.0.0.1", "workers": 3, "coordinator_port": port,
        "resume": str(out), "register_timeout": 10})
    again.wait_for(re.compile(rf"worker {victim} dropped: did not register again within "
                              r"register_timeout=10s of the resume"), 90)
    again.wait_for(re.compile(r"started 2 of 3 worker\(s\)"), 30)
    time.sleep(2)  # the two train without it
    back = _respawn(cluster, out, mode, 3 * BUDGET, addresses, victim)
    again.wait_for(re.compile(rf"worker {victim} rejoined at round"), 60)
    time.sleep(3)  # the healed cluster trains a while, then an operator ends the run
    again.proc.send_signal(signal.SIGTERM)
    assert again.wait(120) == 0
    codes = {addresses[w][0].name: 0 for w in range(3) if w != victim} | {
        killed.name: -signal.SIGKILL, back.name: 0, "coordinator": -signal.SIGKILL,
        "coordinator-again": 0}
    _all_exit(cluster, codes)
    metrics = read_metrics(out)
    assert metrics["stop_reason"] == "SIGTERM" and metrics["resumed_at_round"] > 1
    clean = clean_accuracy(tmp_path, mode)
    _report(f"kill -9 coordinator and a worker, resume, restart the worker ({topology})",
            mode, metrics, clean, codes)
    assert metrics["test_accuracy"] >= clean - 0.01
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1, 2] and metrics["dropped_workers"] == []
    assert states[victim]["rounds"] > 0
    assert metrics["rounds"] >= metrics["resumed_at_round"] + 20  # it trained on
    coordinator = str(COORDINATOR_SENDER_ID)
    if topology == "mesh":  # the others, configured with it down, took it back
        assert states[0]["applied_from"]["2"] > 0 and states[2]["applied_from"]["1"] > 0
    else:
        assert states[victim]["applied_from"][coordinator] > 0
    if topology == "tree":  # its orphan took the others' sums from the coordinator
        assert states[2]["applied_from"][coordinator] > 0
