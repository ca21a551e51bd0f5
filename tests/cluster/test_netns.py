"""Multi-host runs: coordinator and workers each in its own network namespace, as in compose."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hogwild.cluster.transport.certs import write_bundle

try:  # imported as a package module or as a rootdir-relative script
    from . import netns
except ImportError:
    import netns  # type: ignore[no-redef]

pytestmark = pytest.mark.netns

_REASON = netns.unavailable_reason()
needs_netns = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

# A TCP echo server and client that each run inside one namespace.
_ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(4); srv.settimeout(30)
    print("listening", flush=True)
    while True:
        conn, peer = srv.accept()
        with conn:
            data = conn.recv(1024)
            conn.sendall(data + b" from " + sys.argv[1].encode())
""")
_ECHO_CLIENT = textwrap.dedent("""
    import socket, sys, time
    deadline = time.monotonic() + float(sys.argv[3])
    while True:
        try:
            with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2) as c:
                c.settimeout(2); c.sendall(b"ping"); print(c.recv(1024).decode()); break
        except OSError as exc:
            if time.monotonic() > deadline:
                print("failed:", exc); sys.exit(3)
            time.sleep(0.1)
""")


@pytest.fixture
def network() -> Iterator[netns.Network]:
    with netns.Network() as net:
        yield net


@needs_netns
def test_hosts_reach_each_other_and_a_cut_link_isolates_one(
        network: netns.Network, tmp_path: Path) -> None:
    a, b, c = network.add_host("a"), network.add_host("b"), network.add_host("c")
    assert len({a.address, b.address, c.address}) == 3
    server = network.start(a, [sys.executable, "-c", _ECHO_SERVER, a.address, "7007"], env={},
                           log_path=tmp_path / "server.log")
    for client in (b, c):
        done = network.run(client, [sys.executable, "-c", _ECHO_CLIENT, a.address, "7007", "20"],
                           timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"ping from {a.address}"
    # Nothing sent inside a host can leave the test subnet: its only route is the /24.
    routes = netns.ip("-n", b.namespace, "route", "show").stdout
    assert "default" not in routes and f"{network.subnet}.0/24 dev eth0" in routes

    network.cut(c)
    cut = network.run(c, [sys.executable, "-c", _ECHO_CLIENT, a.address, "7007", "2"], timeout=60)
    assert cut.returncode == 3, cut.stdout + cut.stderr
    still = network.run(b, [sys.executable, "-c", _ECHO_CLIENT, a.address, "7007", "20"],
                        timeout=60)
    assert still.returncode == 0, still.stdout + still.stderr
    assert server.poll() is None


@needs_netns
def test_close_removes_namespaces_and_processes(tmp_path: Path) -> None:
    with netns.Network() as net:
        host = net.add_host("solo")
        proc = net.start(host, [sys.executable, "-c", "import time; time.sleep(600)"], env={},
                         log_path=tmp_path / "sleep.log")
        names = {host.namespace, f"hw{net.tag}-br"}
    listed = netns.ip("netns", "list").stdout
    assert not any(name in listed for name in names)
    assert proc.poll() is not None


# --- the real thing: compose's services, one namespace per container -----------------------

REPO = Path(__file__).resolve().parents[2]
# Every wait is bounded; the whole run takes seconds on the bundled data.
RUN_TIMEOUT = 240.0
SUBNET = netns.DEFAULT_SUBNET


def _composefile() -> Any:
    """tests/deploy/composefile.py, which reads docker-compose.yml like compose does."""
    path = REPO / "tests" / "deploy" / "composefile.py"
    spec = importlib.util.spec_from_file_location("hogwild_tests_composefile", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hogwild() -> list[str]:
    """The console script the image's ENTRYPOINT runs (or the module, if not installed)."""
    script = Path(sys.executable).with_name("hogwild")
    return [str(script)] if script.exists() else [sys.executable, "-m", "hogwild.cli"]


def _base_env(home: Path) -> dict[str, str]:
    """A container-like environment: nothing HOGWILD_* from the test's own environment."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    src = str(REPO / "src")
    env["PYTHONPATH"] = os.pathsep.join(
        [src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != src]])
    for name in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


class ComposeOnHosts:
    """docker-compose.yml's services started on namespace hosts, with their own environment.

    Service names in host:port values become the host's address; container paths under a
    bind mount become the host path (writable mounts are redirected into ``workdir``).
    """

    def __init__(self, network: netns.Network, workdir: Path, workers: int,
                 overrides: dict[str, str] | None = None) -> None:
        self.cf = _composefile()
        self.network = network
        self.workdir = workdir
        self.overrides = overrides or {}
        self.services = self.cf.load({"HOGWILD_WORKERS": str(workers)})["services"]
        # What `hogwild certs --out secrets --hosts hogwild` makes before `docker compose up`.
        self.secrets = write_bundle(workdir / "secrets", ["hogwild"]).directory
        self.secret_files = {name: Path(spec["file"]).name for name, spec in
                             self.cf.load_raw().get("secrets", {}).items()}
        self.hosts: dict[str, netns.Host] = {"coordinator": network.add_host("coord")}
        self.worker_hosts = [network.add_host(f"w{i + 1}") for i in range(workers)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def _value(self, service: dict[str, Any], value: str) -> str:
        host, sep, port = value.rpartition(":")
        if sep and host in self.services and port.isdigit():
            return f"{self.hosts[host].address}:{port}"
        if value.startswith("/run/secrets/"):  # compose mounts secrets there, by target name
            for secret in service.get("secrets", []):
                if value == f"/run/secrets/{secret['target']}":
                    return str(self.secrets / self.secret_files[secret["source"]])
        if value.startswith("/"):
            for source, target, read_only in self.cf.mounts(service):
                if isinstance(source, Path) and (value == target or
                                                 value.startswith(target.rstrip("/") + "/")):
                    rest = value[len(target):].lstrip("/")
                    root = source if read_only else self.workdir / source.name
                    return str(root / rest if rest else root)
        return value

    def env(self, name: str) -> dict[str, str]:
        service = self.services[name]
        env = _base_env(self.workdir)
        for key, value in self.cf.environment(service).items():
            env[key] = self._value(service, value)
        env.update(self.overrides)
        return env

    def start(self, name: str, host: netns.Host, label: str) -> None:
        service = self.services[name]
        self.logs[label] = self.workdir / f"{label}.log"
        self.procs[label] = self.network.start(host, [*_hogwild(), *service["command"]],
                                               self.env(name), self.logs[label], cwd=self.workdir)

    def healthy(self, name: str, host: netns.Host, timeout: float) -> None:
        """Poll the service's compose healthcheck command inside its host until it passes."""
        test = self.services[name]["healthcheck"]["test"]
        assert test[:2] == ["CMD", "hogwild"]
        deadline = time.monotonic() + timeout
        while True:
            done = self.network.run(host, [*_hogwild(), *test[2:]], timeout=30,
                                    env=self.env(name))
            if done.returncode == 0:
                return
            for label, proc in self.procs.items():
                assert proc.poll() is None, f"{label} exited early:\n{self.log(label)}"
            assert time.monotonic() < deadline, f"{name} never became healthy: {done.stdout}"
            time.sleep(0.5)

    def up(self) -> None:
        """Like `docker compose up`: coordinator, wait for healthy, then the workers."""
        self.start("coordinator", self.hosts["coordinator"], "coordinator")
        self.healthy("coordinator", self.hosts["coordinator"], timeout=120)
        for i, host in enumerate(self.worker_hosts):
            self.start("worker", host, f"worker{i + 1}")

    def wait(self, label: str, timeout: float) -> int:
        try:
            return self.procs[label].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{label} still running after {timeout:.0f}s:\n"
                                 f"{self.log(label)}") from None

    def log(self, label: str) -> str:
        return self.logs[label].read_text(errors="replace")[-6000:]

    def wait_for_line(self, label: str, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.log(label))
            if match:
                return match.group(0)
            assert self.procs[label].poll() is None, f"{label} exited:\n{self.log(label)}"
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} from {label} in {timeout:.0f}s:\n{self.log(label)}")

    def coordinator_port(self) -> int:
        """The coordinator port that the compose file's worker environment names."""
        value = self.cf.environment(self.services["worker"])["HOGWILD_COORDINATOR_ADDRESS"]
        return int(value.rpartition(":")[2])

    def metrics(self) -> dict[str, Any]:
        out_dir = Path(self.env("coordinator")["HOGWILD_OUT_DIR"])
        return json.loads(  # type: ignore[no-any-return]
            (out_dir / "latest" / "metrics.json").read_text())


@pytest.fixture
def compose_network() -> Iterator[netns.Network]:
    if _REASON is not None:
        pytest.skip(_REASON)
    with netns.Network(subnet=SUBNET) as net:
        yield net


def test_compose_services_train_across_three_hosts(compose_network: netns.Network,
                                                   tmp_path: Path) -> None:
    run = ComposeOnHosts(compose_network, tmp_path, workers=2)
    # The worker's only setting from compose is the coordinator's service name.
    assert run.env("worker")["HOGWILD_COORDINATOR_ADDRESS"] == \
        f"{run.hosts['coordinator'].address}:{run.coordinator_port()}"
    run.up()
    assert run.wait("coordinator", RUN_TIMEOUT) == 0, run.log("coordinator")
    for i, host in enumerate(run.worker_hosts):
        label = f"worker{i + 1}"
        assert run.wait(label, 60) == 0, run.log(label)
        # advertise_address was left empty: each worker found its own address on eth0.
        assert f"advertising {host.address}:" in run.log(label), run.log(label)
    metrics = run.metrics()
    assert metrics["test_accuracy"] >= 0.97, metrics
    assert metrics["dropped_workers"] == []


def test_async_run_survives_a_worker_whose_link_is_cut(compose_network: netns.Network,
                                                       tmp_path: Path) -> None:
    # Longer than the default run (no early stop, a time budget) so the cut lands mid-run,
    # and shorter deadlines so the lost worker is noticed quickly.
    overrides = {"HOGWILD_MODE": "async", "HOGWILD_PATIENCE": "0", "HOGWILD_EPOCHS": "100000",
                 "HOGWILD_TIME_BUDGET": "8", "HOGWILD_RPC_TIMEOUT": "2",
                 "HOGWILD_BARRIER_TIMEOUT": "2"}
    run = ComposeOnHosts(compose_network, tmp_path, workers=2, overrides=overrides)
    run.up()
    victim = run.worker_hosts[1]
    registered = run.wait_for_line("worker2", r"registered as worker (\d+)", timeout=60)
    victim_id = int(re.search(r"\d+", registered).group(0))  # type: ignore[union-attr]
    run.wait_for_line("worker2", r"configured: async mode", timeout=60)
    time.sleep(1.0)  # let a few rounds of deltas flow first
    compose_network.cut(victim)

    assert run.wait("coordinator", RUN_TIMEOUT) == 0, run.log("coordinator")
    assert run.wait("worker1", 60) == 0, run.log("worker1")
    metrics = run.metrics()
    assert metrics["test_accuracy"] >= 0.97, metrics
    assert victim_id in metrics["dropped_workers"], metrics
    # Somebody says what happened to the lost peer, naming it by id or address.
    said = "\n".join(run.log(label) for label in ("coordinator", "worker1"))
    lost = re.compile(rf"(worker|peer) {victim_id}\b.*(down|drop|dead|lost|unreachable)|"
                      rf"(down|drop|dead|lost|unreachable).*((worker|peer) {victim_id}\b|"
                      rf"{re.escape(victim.address)})", re.IGNORECASE)
    assert lost.search(said), said
