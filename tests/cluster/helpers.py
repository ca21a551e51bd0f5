"""Start real coordinator and worker processes on loopback (port 0) and always reap them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.outputs.artifacts import load_compact_weights

REPO = Path(__file__).resolve().parents[2]
# The shared data sets sit beside the checkout (or beside the directory of worktrees).
DATA = next((d for d in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data")
             if d.is_dir()), REPO.parent / "shared" / "data")
REUTERS_TRAIN = DATA / "reuters21578_modapte_earn.train.libsvm.gz"
REUTERS_TEST = DATA / "reuters21578_modapte_earn.test.libsvm.gz"
READY = re.compile(r"coordinator listening on port (\d+)")
REGISTERED = re.compile(r"registered as worker (\d+) of")
# A row of the coordinator's progress table: elapsed, round, examples, ...
PROGRESS_ROW = re.compile(r"^\s*\d+\.\d+s\s+(\d+)\s+\d+")


def require_reuters() -> tuple[Path, Path]:
    if not (REUTERS_TRAIN.exists() and REUTERS_TEST.exists()):
        pytest.skip(f"Reuters earn data set not found in {DATA}")
    return REUTERS_TRAIN, REUTERS_TEST


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    src = str(REPO / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    for name in [k for k in env if k.startswith("HOGWILD_")]:
        del env[name]  # the tests say everything with flags
    return env


def flags(**settings: Any) -> list[str]:
    out = []
    for key, value in settings.items():
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append(f"--{key.replace('_', '-')}={text}")
    return out


# argv: the RLIMIT_DATA in bytes, then the command to run under it (exec'd: the same pid).
_LIMITED = ("import os, resource, sys\n"
            "limit = int(sys.argv[1])\n"
            "resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))\n"
            "os.execv(sys.argv[2], sys.argv[2:])\n")


class Proc:
    """A child process whose output lines are collected (and echoed for failed tests)."""

    def __init__(self, name: str, argv: Sequence[str], cwd: Path) -> None:
        self.name = name
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, bufsize=1, env=_env(), cwd=cwd, start_new_session=True)
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        """The first output line matching ``pattern``; fails the test after ``timeout``."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    match = pattern.search(line)
                    if match:
                        return match
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    pytest.fail(f"{self.name}: no line matching {pattern.pattern!r} within "
                                f"{timeout:g}s (exit {self.proc.poll()})\n" + self.output())
                self._cond.wait(min(left, 0.2))

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} still running after {timeout:g}s\n" + self.output())

    def output(self) -> str:
        with self._cond:
            return "\n".join(f"[{self.name}] {line}" for line in self.lines)

    def reap(self) -> None:
        """SIGTERM, then SIGKILL after a short grace: nothing outlives its test."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(2)


class Cluster:
    """A coordinator plus workers started as ``python -m hogwild.cli`` processes."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []
        self.coordinator: Proc | None = None
        self.workers: list[Proc] = []

    def start(self, n_workers: int, *, worker_data_limit: int | None = None,
              **settings: Any) -> None:
        """A coordinator, then ``n_workers`` workers; ``worker_data_limit``: each worker's
        RLIMIT_DATA in bytes (its heap and other private writable memory). Every worker
        trains (``engage: all``) unless the settings say otherwise: these tests are of W
        workers, on sets too small to keep more than two of them busy."""
        common = {"bind_host": "127.0.0.1", "workers": n_workers, "engage": "all", **settings}
        self.coordinator = self.spawn("coordinator", "coordinator",
                                       {**common, "coordinator_port": 0})
        port = int(self.coordinator.wait_for(READY, 60).group(1))
        for i in range(n_workers):
            limit = {} if worker_data_limit is None else {"data_limit": worker_data_limit}
            self.workers.append(self.spawn(f"worker-{i}", "worker", {
                **common, "worker_port": 0, "coordinator_address": f"127.0.0.1:{port}"},
                **limit))

    def spawn(self, name: str, role: str, settings: dict[str, Any],
               data_limit: int | None = None) -> Proc:
        if not settings.get("tls_ca"):  # plain text on loopback, asked for as a user must
            settings = {"insecure": True, **settings}
        argv = [sys.executable, "-m", "hogwild.cli", role, *flags(**settings)]
        if data_limit is not None:  # set in the child, which then becomes the command
            argv = [sys.executable, "-c", _LIMITED, str(data_limit), *argv]
        proc = Proc(name, argv, self.workdir)
        self.procs.append(proc)
        return proc

    def worker_ids(self, timeout: float = 60) -> dict[int, Proc]:
        """Worker id (as assigned by the coordinator) -> process."""
        return {int(p.wait_for(REGISTERED, timeout).group(1)): p for p in self.workers}

    def output(self) -> str:
        return "\n".join(p.output() for p in self.procs)

    def reap(self) -> None:
        for proc in self.procs:
            proc.reap()


def train_on_then_stop(cluster: Cluster, seconds: float = 3.0) -> None:
    """Let the healed cluster train a while (hundreds of Reuters rounds), then end the run
    the way an operator would (SIGTERM: final states collected, outputs written)."""
    assert cluster.coordinator is not None
    time.sleep(seconds)
    cluster.coordinator.proc.send_signal(signal.SIGTERM)


def one_worker_reads_other_data(cluster: Cluster, settings: dict[str, Any],
                                 good: dict[str, Any], bad: dict[str, Any]) -> str:
    """A coordinator and two workers on loopback, the second started with settings (its
    ``local_data``) that make it read other data than planned: the run fails (the
    coordinator and that worker exit 1, the other 0). Returns that worker's one error line."""
    settings = {**settings, "bind_host": "127.0.0.1", "workers": 2}
    cluster.coordinator = cluster.spawn("coordinator", "coordinator",
                                         {**settings, "coordinator_port": 0})
    port = int(cluster.coordinator.wait_for(READY, 60).group(1))
    worker = {**settings, "worker_port": 0, "coordinator_address": f"127.0.0.1:{port}"}
    first = cluster.spawn("worker-good", "worker", {**worker, **good})
    other = cluster.spawn("worker-bad", "worker", {**worker, **bad})
    cluster.workers = [first, other]
    assert cluster.coordinator.wait(120) == 1
    assert other.wait(60) == 1
    assert first.wait(60) == 0
    errors = [ln for ln in other.lines if "error:" in ln]
    assert len(errors) == 1, other.output()
    return errors[0]


def published(out_dir: Path) -> Path:
    """The run last published under the runs root ``out_dir`` (its ``latest`` link)."""
    return out_dir / "latest"


def incomplete(out_dir: Path) -> Path:
    """The one run directory under ``out_dir`` not published: a run under way, failed or
    killed (AssertionError if there is not exactly one)."""
    found = sorted(out_dir.glob("*.incomplete"))
    assert len(found) == 1, found
    return found[0]


@contextmanager
def final_states(out_dir: Path, name: str) -> Iterator[dict[str, np.ndarray]]:
    """One model of final_states/ (``global.npz``, ``worker-ID.npz``) of the run last
    published under ``out_dir``, as {"w": dense weights}: the run must have asked for them
    (final_states: compact)."""
    yield {"w": load_compact_weights(published(out_dir) / "final_states" / name)}


def read_metrics(out_dir: Path) -> dict[str, Any]:
    """metrics.json of the run last published under the runs root ``out_dir``."""
    return dict(json.loads((published(out_dir) / "metrics.json").read_text()))


def reuters_settings(out: Path, **extra: Any) -> dict[str, Any]:
    """A short Reuters earn run (10 epochs, 1 thread, no early stop) writing to ``out``."""
    train, test = require_reuters()
    return {"data": str(train), "test_data": str(test), "threads": 1, "epochs": 10,
            "patience": 0, "eval_interval": 0.5, "out_dir": str(out), "rpc_timeout": 5,
            "barrier_timeout": 5, "connect_timeout": 60, "register_timeout": 120,
            "data_cache": False, "final_states": "compact", **extra}


def finished_run(workdir: Path, n_workers: int, **extra: Any) -> dict[str, Any]:
    """Run :func:`reuters_settings` + ``extra`` to the end (every process exits 0) and return
    its metrics, with ``out`` set to the output directory."""
    out = workdir / "out"
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(workdir)
    try:
        cluster.start(n_workers, **reuters_settings(out, **extra))
        assert cluster.coordinator is not None
        # Start-up (imports, parsing) takes most of a run on a loaded machine.
        assert cluster.coordinator.wait(300) == 0, cluster.output()
        for worker in cluster.workers:
            assert worker.wait(30) == 0, cluster.output()
        # No legitimate delta (a relay's or a tree hop's sum, a compressed residual) is
        # ever beyond the bound on what the run's SGD steps can make.
        assert "beyond what this run's SGD steps" not in cluster.output(), cluster.output()
    finally:
        cluster.reap()
    metrics = read_metrics(out)
    metrics["out"] = out
    return metrics


def tree_run_with_a_death(cluster: Cluster, out: Path, *, mode: str, workers: int,
                          fanout: int, victim: int | tuple[int, ...], time_budget: float = 6,
                          timeout: float = 120, **settings: Any
                          ) -> tuple[dict[int, Proc], dict[str, Any]]:
    """A tree run on Reuters (until ``time_budget``) whose worker ``victim`` (or workers, at
    once) is killed once training is under way; every other process must exit 0. Returns
    the processes by worker id and metrics.json, with the victims dropped. ``settings``:
    more settings for every process."""
    victims = (victim,) if isinstance(victim, int) else victim
    cluster.start(workers, mode=mode, topology="tree", **reuters_settings(
        out, epochs=1_000_000, time_budget=time_budget, barrier_timeout=2, rpc_timeout=5,
        eval_interval=0.3, tree_fanout=fanout, **settings))
    assert cluster.coordinator is not None
    ids = cluster.worker_ids(timeout)
    cluster.coordinator.wait_for(PROGRESS_ROW, timeout)  # training is under way
    for wid in victims:
        ids[wid].proc.send_signal(signal.SIGKILL)
    assert cluster.coordinator.wait(timeout) == 0, cluster.output()
    for wid, proc in ids.items():
        if wid not in victims:
            assert proc.wait(30) == 0, cluster.output()
    metrics = read_metrics(out)
    assert sorted(metrics["dropped_workers"]) == sorted(victims)
    return ids, metrics


def survivors_equal_the_global_model(out: Path, metrics: dict[str, Any],
                                     survivors: list[int]) -> None:
    """Every survivor's final weights equal the coordinator's (float32 rounding aside)."""
    states = metrics["worker_states"]
    assert isinstance(states, list)
    assert sorted(s["worker_id"] for s in states) == survivors
    with final_states(out, "global.npz") as g:
        global_w = g["w"]
    assert np.any(global_w != 0)
    for wid in survivors:
        with final_states(out, f"worker-{wid}.npz") as f:
            np.testing.assert_allclose(f["w"], global_w, rtol=1e-5, atol=1e-5,
                                       err_msg=f"worker {wid}")
