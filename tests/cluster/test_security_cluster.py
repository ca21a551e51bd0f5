"""Real processes with mutual TLS and a run token (certificates from `hogwild certs`): strangers
and insiders without the right keys are refused while the run trains to its usual accuracy;
a busy port is one line and exit 1."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from hogwild.cluster.transport import health
from hogwild.cluster.transport.certs import Bundle
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.wire.codec import DeltaHeader, encode_delta

from .helpers import READY, REPO, Cluster, read_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

WORKER_PORT = re.compile(r"worker listening on port (\d+)")
RUN_ID = re.compile(r"run (\w+): waiting for")
PROBES = re.compile(r"health checks \(plain text, health only\) on port (\d+)")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOGWILD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                      env.get("PYTHONPATH")]))
    return env


def _cli(*args: str, cwd: Path, timeout: float = 60,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hogwild.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env={**_env(), **(env or {})}, timeout=timeout,
                          check=False)


def _tls(bundle: Bundle, role: str) -> dict[str, Any]:
    return {"tls_ca": str(bundle.ca), "tls_cert": str(bundle.cert(role)),
            "tls_key": str(bundle.key(role)), "auth_token_file": str(bundle.token)}


def _as(bundle: Bundle, role: str, token: str) -> Security:
    return Security(ca=bundle.ca.read_bytes(), cert=bundle.cert(role).read_bytes(),
                    key=bundle.key(role).read_bytes(), token=token)


def _code(call: Any) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_mtls_cluster_refuses_strangers_and_trains(cluster: Cluster, tmp_path: Path) -> None:
    made = _cli("certs", "--out", str(tmp_path / "certs"), "--hosts", "127.0.0.1",
                cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    bundle = Bundle(tmp_path / "certs")
    token = bundle.token.read_text().strip()
    out = tmp_path / "out"
    common = {"bind_host": "127.0.0.1", "workers": 2, "threads": 1, "epochs": 10,
              "eval_interval": 0.5, "out_dir": str(out), "register_timeout": 60,
              "connect_timeout": 60, "data_cache": False, "health_port": 0}
    coordinator = cluster.spawn("coordinator", "coordinator", {
        **common, **_tls(bundle, "coordinator"), "coordinator_port": 0})
    cluster.coordinator = coordinator
    probe_port = int(coordinator.wait_for(PROBES, 60).group(1))
    address = f"127.0.0.1:{int(coordinator.wait_for(READY, 60).group(1))}"
    # The probe port answers health checks in plain text (Kubernetes' probes have no
    # certificate); the main port does not answer them without one.
    assert health.check(f"127.0.0.1:{probe_port}", timeout=10) in ("SERVING", "NOT_SERVING")
    assert health.check(address, timeout=3) == "UNREACHABLE"
    run_id = coordinator.wait_for(RUN_ID, 60).group(1)

    # Before any worker: strangers cannot take a slot.
    register = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address="10.66.0.1:1")
    for who, expected in ((Security(token=token), grpc.StatusCode.UNAVAILABLE),
                          (_as(bundle, "client", "wrong"), grpc.StatusCode.UNAUTHENTICATED)):
        with who.channel(address) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            assert _code(lambda s=stub: s.Register(register, timeout=10)) == expected

    for i in range(2):
        cluster.workers.append(cluster.spawn(f"worker-{i}", "worker", {
            **common, **_tls(bundle, "worker"), "worker_port": 0,
            "coordinator_address": address}))
    ports = [int(w.wait_for(WORKER_PORT, 60).group(1)) for w in cluster.workers]
    assert all(w.wait_for(PROBES, 1) for w in cluster.workers)
    cluster.worker_ids()

    # An insider (a valid client certificate and the token) without the sender keys: no
    # poison delta, no Stop, no reading a worker's weights.
    insider = _as(bundle, "client", token)
    poison = encode_delta(DeltaHeader(run_id, 0, round=1, seq=1, dim=1),
                          np.zeros(1, dtype=np.int32), np.full(1, 1e30, dtype=np.float32))
    with insider.channel(address) as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        assert _code(lambda: stub.PushDelta(poison, timeout=10)) == \
            grpc.StatusCode.PERMISSION_DENIED
    stop = pb.StopRequest(protocol_version=PROTOCOL_VERSION, run_id=run_id)
    read = pb.FinalStateRequest(protocol_version=PROTOCOL_VERSION, run_id=run_id)
    for port in ports:
        with insider.channel(f"127.0.0.1:{port}") as channel:
            worker = pb_grpc.WorkerStub(channel)
            assert _code(lambda w=worker: w.Stop(stop, timeout=10)) == \
                grpc.StatusCode.PERMISSION_DENIED
            assert _code(lambda w=worker: list(w.GetFinalState(read, timeout=10))) == \
                grpc.StatusCode.PERMISSION_DENIED

    assert coordinator.wait(120) == 0
    for worker_proc in cluster.workers:
        assert worker_proc.wait(30) == 0
    metrics = read_metrics(out)
    assert metrics["test_accuracy"] >= 0.97, cluster.output()
    assert metrics["workers"] == 2 and metrics["dropped_workers"] == []
    assert "serving with mutual TLS, run token" in cluster.output()


@pytest.mark.parametrize("role", ["coordinator", "worker"])
def test_busy_port_is_one_line_and_exit_1(tmp_path: Path, role: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        extra = ([f"--coordinator-port={port}", f"--out={tmp_path / 'out'}"]
                 if role == "coordinator" else [f"--worker-port={port}", "--connect-timeout=5"])
        done = _cli(role, "--bind-host=127.0.0.1", "--insecure", *extra, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and str(port) in lines[0] and "Traceback" not in done.stderr, lines


def test_second_coordinator_on_the_same_port_fails(tmp_path: Path, cluster: Cluster) -> None:
    first = cluster.spawn("coordinator", "coordinator", {
        "bind_host": "127.0.0.1", "coordinator_port": 0, "out_dir": str(tmp_path / "a")})
    port = int(first.wait_for(READY, 60).group(1))
    second = _cli("coordinator", "--bind-host=127.0.0.1", f"--coordinator-port={port}",
                  f"--out={tmp_path / 'b'}", "--insecure", cwd=tmp_path)
    assert second.returncode == 1
    assert str(port) in second.stderr and "Traceback" not in second.stderr


@pytest.mark.parametrize("role", ["coordinator", "worker"])
def test_plain_text_is_refused_unless_asked_for(tmp_path: Path, role: str) -> None:
    """Without TLS files a terminal command serves nothing: anyone reaching a plain-text port
    could register and receive the run's keys. One line says how to make credentials or ask
    for plain text; exit 2 (a setting), before any port is bound or out_dir is made."""
    extra = {"coordinator": ["--coordinator-port=0", f"--out={tmp_path / 'out'}"],
             "worker": ["--worker-port=0", "--connect-timeout=5"]}[role]
    done = _cli(role, "--bind-host=0.0.0.0", *extra, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, lines
    assert lines[0].startswith(f"hogwild {role}: error: setting 'insecure':"), lines
    assert "hogwild certs --out DIR --hosts" in lines[0] and "--insecure" in lines[0]
    assert "listening on port" not in done.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["flag", "setting", "environment"])
def test_plain_text_asked_for_starts(tmp_path: Path, how: str) -> None:
    """`--insecure`, `insecure: true` in the settings file or HOGWILD_INSECURE: the coordinator
    and a worker serve plain text, and the worker registers."""
    extra: list[str] = []
    env = _env()
    if how == "flag":
        extra = ["--insecure"]
    elif how == "setting":
        (tmp_path / "settings.yaml").write_text("insecure: true\n")
    else:
        env["HOGWILD_INSECURE"] = "true"
    common = ["--bind-host=127.0.0.1", "--workers=2", "--register-timeout=60", *extra]
    procs: list[subprocess.Popen[str]] = []

    def start(role: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "hogwild.cli", role, *common, *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=tmp_path, env=env, start_new_session=True)
        procs.append(proc)
        return proc

    def line(proc: subprocess.Popen[str], pattern: re.Pattern[str]) -> re.Match[str]:
        assert proc.stdout is not None
        seen = []
        for text in proc.stdout:  # ends when the process does (the module's timeout guards)
            seen.append(text)
            if match := pattern.search(text):
                return match
        raise AssertionError("".join(seen))

    try:
        coordinator = start("coordinator", "--coordinator-port=0", f"--out={tmp_path / 'out'}")
        port = line(coordinator, READY).group(1)
        worker = start("worker", "--worker-port=0", f"--coordinator=127.0.0.1:{port}")
        line(worker, re.compile(r"registered as worker 0 of 2"))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
