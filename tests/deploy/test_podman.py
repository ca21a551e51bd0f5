"""The Dockerfile and docker-compose.yml really built and run, with podman (marker container)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "tests" / "deploy" / "podman_setup.sh"
IMAGE = os.environ.get("HOGWILD_IMAGE", "hogwild:latest")
COMPOSE = Path(os.environ.get("PODMAN_COMPOSE",
                              REPO / ".cache" / "podman-compose" / "bin" / "podman-compose"))
HOGWILD = Path(sys.executable).parent / "hogwild"
HOW = (f"set it up as root with `{SETUP.relative_to(REPO)}` (podman, runc, debootstrap, "
       "podman-compose, /etc/containers settings, the images; see docs/operations/docker.md, "
       "\"With podman instead of Docker\")")
# A first build from nothing took 13 min on a loaded 2-core machine; a cached one, seconds.
SETUP_TIMEOUT = 1800

pytestmark = [pytest.mark.container, pytest.mark.timeout(SETUP_TIMEOUT + 600)]

REGISTERED = re.compile(r"registered as worker (\d+) of 2 ")
# A row of the coordinator's progress table: elapsed, round, examples, ...
PROGRESS_ROW = re.compile(r"^\s*\d+\.\d+s\s+(\d+)\s+\d+", re.MULTILINE)
TLS = "serving with mutual TLS, run token"


def run(args: list[str], timeout: float, check: bool = True,
        **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """A command with a bound on its time; its output in the failure message."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False,
                          **kwargs)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def results(out_dir: Path) -> Path:
    """The run's outputs: a runs root's ``latest`` link, else the directory itself."""
    latest = out_dir / "latest"
    return latest if latest.exists() else out_dir


def check_outputs(out_dir: Path, workers: int) -> dict[str, Any]:
    """The files a finished run writes, readable, from a model that learnt something."""
    where = results(out_dir)
    for name in ("model.json", "model.npz", "metrics.json", "metrics.jsonl", "loss.png"):
        path = where / name
        assert path.is_file() and path.stat().st_size > 0, f"{path} missing or empty"
        # Written as the user the containers ran as (--user / HOST_UID), not as someone else.
        assert path.stat().st_uid == os.getuid(), f"{path} belongs to uid {path.stat().st_uid}"
    assert json.loads((where / "model.json").read_text())["format"] == "hogwild-model"
    metrics: dict[str, Any] = json.loads((where / "metrics.json").read_text())
    assert metrics["workers"] == workers
    assert sorted(s["worker_id"] for s in metrics["worker_states"]) == list(range(workers))
    assert metrics["test_accuracy"] >= 0.95, metrics["test_accuracy"]
    assert (where / "metrics.jsonl").read_text().count("\n") >= 1
    return metrics


@pytest.fixture(scope="session")
def image() -> str:
    """The project image, built from this tree by the setup script (cached layers reused)."""
    if shutil.which("podman") is None:
        message = f"podman is not installed: {HOW}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the container tests: {message}")
        pytest.skip(message)
    done = run(["bash", str(SETUP)], SETUP_TIMEOUT, check=False)
    if done.returncode != 0:
        pytest.fail(f"{SETUP.relative_to(REPO)} failed ({HOW}):\n{done.stdout}\n{done.stderr}")
    return IMAGE


def test_the_image_starts_as_its_own_non_root_user(image: str) -> None:
    done = run(["podman", "run", "--rm", "--network", "none", image, "--version"], 120,
               check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    user = run(["podman", "image", "inspect", "--format", "{{.Config.User}}", image], 60)
    assert user.stdout.strip() == "10001:10001"


def test_the_image_runs_a_whole_run_into_a_mounted_volume(image: str, tmp_path: Path) -> None:
    name = f"hogwild-test-run-{os.getpid()}"
    out = tmp_path / "runs"
    out.mkdir()
    try:
        # --network none: the run's coordinator and workers talk over the container's own
        # loopback only. -v: the servers' log lines (how they serve) are info.
        done = run(["podman", "run", "--rm", "--name", name, "--network", "none",
                    "--user", f"{os.getuid()}:{os.getgid()}", "-v", f"{out}:/out",
                    image, "run", "-v", "--out", "/out/demo"], 600, check=False)
    finally:
        subprocess.run(["podman", "rm", "--force", "--time", "5", name], capture_output=True,
                       timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert TLS in done.stdout + done.stderr
    metrics = check_outputs(out / "demo", workers=2)
    assert metrics["stop_reason"] != "SIGTERM"  # it ended by itself
    assert metrics["dropped_workers"] == []


# ----------------------------------------------------------------------------- compose


class _Override(dict[str, Any]):
    """A mapping that replaces the base file's instead of being merged into it."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(_Override,
                        lambda dumper, data: dumper.represent_mapping("!override", dict(data)))


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Stack:
    """The project's compose file, copied with its settings into a directory of its own, and
    an override that keeps every container on the host's loopback."""

    workdir: Path
    project: str
    env: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    health: dict[str, list[str]] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run([str(COMPOSE), "-p", self.project, "-f", "docker-compose.yml",
                    "-f", "docker-compose.podman-test.yml", *args], timeout,
                   cwd=self.workdir, env=self.env)

    def logs(self, service: str) -> str:
        done = run(["podman", "logs", self.names[service]], 60)
        return done.stdout + done.stderr

    def state(self, service: str) -> tuple[str, int]:
        done = run(["podman", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                    self.names[service]], 60)
        status, code = done.stdout.split()
        return status, int(code)

    def wait_log(self, service: str, pattern: re.Pattern[str], timeout: float,
                 count: int = 1) -> list[re.Match[str]]:
        """The first ``count`` matches of ``pattern`` in a container's log, or fail."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.logs(service)
            found = list(pattern.finditer(text))
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"{service}: no {pattern.pattern!r} (x{count}) within {timeout}s:"
                            f"\n{text[-4000:]}")
            time.sleep(0.5)

    def wait_exit(self, service: str, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (state := self.state(service))[0] not in ("exited", "stopped"):
            if time.monotonic() > deadline:
                pytest.fail(f"{service} still {state[0]} after {timeout}s:\n"
                            f"{self.logs(service)[-4000:]}")
            time.sleep(0.5)
        return state[1]

    def healthy(self, service: str) -> subprocess.CompletedProcess[str]:
        """The service's own compose healthcheck, run now (podman runs healthchecks on
        systemd timers, and this machine has no systemd)."""
        return run(["podman", "healthcheck", "run", self.names[service]], 60, check=False)

    def remove(self) -> None:
        """Everything of this project gone, whatever state the test left it in."""
        subprocess.run([str(COMPOSE), "-p", self.project, "-f", "docker-compose.yml",
                        "-f", "docker-compose.podman-test.yml", "down", "-t", "10"],
                       cwd=self.workdir, env=self.env, capture_output=True, timeout=180,
                       check=False)
        ids = subprocess.run(["podman", "ps", "-a", "-q", "--filter",
                              f"label=io.podman.compose.project={self.project}"],
                             capture_output=True, text=True, timeout=60, check=False).stdout
        if ids.split():
            subprocess.run(["podman", "rm", "--force", "--time", "5", *ids.split()],
                           capture_output=True, timeout=120, check=False)
        subprocess.run(["podman", "pod", "rm", "--force", f"pod_{self.project}"],
                       capture_output=True, timeout=120, check=False)


def _write_override(stack: Stack, settings: dict[str, str]) -> None:
    """docker-compose.podman-test.yml: host networking with distinct loopback ports (the
    gRPC ones and the Prometheus ones the compose file turns on), and two worker services
    (podman-compose cannot give replicas of one service distinct ports)."""
    base = yaml.safe_load((stack.workdir / "docker-compose.yml").read_text())["services"]
    coordinator_port, *ports = free_ports(6)
    worker_ports, metrics_ports = ports[:2], iter(ports[2:])
    coordinator = f"127.0.0.1:{coordinator_port}"

    def healthcheck(service: str, role: str, port: int) -> dict[str, Any]:
        check: dict[str, Any] = copy.deepcopy(base[role]["healthcheck"])
        check["test"] = [re.sub(r"^localhost:\d+$", f"localhost:{port}", arg)
                         for arg in check["test"]]
        stack.health[service] = check["test"]
        return check

    common = {"HOGWILD_BIND_HOST": "127.0.0.1", **settings}
    services: dict[str, Any] = {
        "coordinator": {
            "network_mode": "host",
            "environment": {**common, "HOGWILD_COORDINATOR_PORT": str(coordinator_port),
                            "HOGWILD_METRICS_PORT": str(next(metrics_ports))},
            "healthcheck": _Override(healthcheck("coordinator", "coordinator",
                                                 coordinator_port)),
        },
    }
    for index, port in enumerate(worker_ports):
        service = "worker" if index == 0 else f"worker-{index + 1}"
        env = {**common, "HOGWILD_COORDINATOR_ADDRESS": coordinator,
               "HOGWILD_WORKER_PORT": str(port),
               "HOGWILD_METRICS_PORT": str(next(metrics_ports))}
        if index == 0:
            services[service] = {"network_mode": "host", "environment": env,
                                 "deploy": _Override({"replicas": 1}),
                                 "healthcheck": _Override(healthcheck(service, "worker", port))}
        else:  # a new service: the worker's definition, written out in full
            worker = copy.deepcopy(base["worker"])
            worker.pop("deploy", None)
            worker["environment"].update(env)
            worker.update(network_mode="host", expose=[str(port)],
                          healthcheck=healthcheck(service, "worker", port))
            services[service] = worker
    text = yaml.dump({"services": services}, Dumper=_Dumper, sort_keys=False)
    (stack.workdir / "docker-compose.podman-test.yml").write_text(
        "# The project's compose file on one host's loopback, for tests/deploy/test_podman.py\n"
        + text)
    stack.names = {s: f"{stack.project}_{s}_1" for s in services}


@pytest.fixture
def stack(image: str, tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Stack]]:
    """Brings the compose stack up (coordinator + 2 workers, mutual TLS); always torn down."""
    made: list[Stack] = []

    def up(settings: dict[str, str]) -> Stack:
        if not COMPOSE.exists():
            pytest.fail(f"no podman-compose at {COMPOSE}: {HOW}")
        workdir = tmp_path / "compose"
        workdir.mkdir()
        for name in ("docker-compose.yml", "settings.yaml"):
            shutil.copy(REPO / name, workdir / name)
        for name in ("runs", "data"):
            (workdir / name).mkdir()
        # The credentials as the docs say: hogwild certs, every certificate naming `hogwild`.
        run([str(HOGWILD), "certs", "--out", str(workdir / "secrets"), "--hosts", "hogwild"], 120)
        env = {**os.environ, "HOST_UID": str(os.getuid()), "HOST_GID": str(os.getgid()),
               "HOGWILD_WORKERS": "2"}
        stack = Stack(workdir, f"hwtest{os.getpid()}x{len(made)}", env)
        _write_override(stack, settings)
        made.append(stack)
        stack.compose("up", "-d", "--no-build")
        return stack

    yield up
    for stack in made:
        stack.remove()
        left = subprocess.run(["podman", "ps", "-a", "-q", "--filter",
                               f"label=io.podman.compose.project={stack.project}"],
                              capture_output=True, text=True, timeout=60, check=False).stdout
        assert not left.split(), f"containers of {stack.project} left behind: {left}"


def test_compose_stack_trains_over_mutual_tls(stack: Callable[[dict[str, str]], Stack]) -> None:
    s = stack({})
    # The run ends by itself: the coordinator stops the workers and every container exits 0.
    codes = {service: s.wait_exit(service, 300) for service in s.names}
    logs = {service: s.logs(service) for service in s.names}
    assert codes == dict.fromkeys(s.names, 0), logs
    for service in s.names:
        assert TLS in logs[service], logs[service]
    for service in ("worker", "worker-2"):
        assert REGISTERED.search(logs[service]), logs[service]
    metrics = check_outputs(s.workdir / "runs", workers=2)
    assert metrics["stop_reason"] != "SIGTERM"  # it ended by itself
    assert metrics["dropped_workers"] == []


def test_a_worker_container_stopped_mid_run_rejoins(
        stack: Callable[[dict[str, str]], Stack]) -> None:
    # A run long enough for the fault (its time budget only bounds it: the test ends it with
    # SIGTERM once the worker is back); no early stop; peers give up on a silent one in 2 s.
    s = stack({"HOGWILD_EPOCHS": "1000000", "HOGWILD_TIME_BUDGET": "240",
               "HOGWILD_PATIENCE": "0", "HOGWILD_EVAL_INTERVAL": "0.5",
               "HOGWILD_BARRIER_TIMEOUT": "2", "HOGWILD_RPC_TIMEOUT": "2"})
    s.wait_log("coordinator", PROGRESS_ROW, 180)
    # Every service's compose healthcheck passes (each dials its own port with mutual TLS).
    for service in s.names:
        check = s.healthy(service)
        assert check.returncode == 0, (service, s.health[service], check.stdout, check.stderr)
    wid = int(s.wait_log("worker-2", REGISTERED, 60)[0].group(1))

    # `podman stop`: SIGTERM through the init process; the worker leaves the run under way.
    run(["podman", "stop", "--time", "30", s.names["worker-2"]], 120)
    assert s.state("worker-2") == ("exited", 143), s.logs("worker-2")[-4000:]
    assert s.state("coordinator")[0] == "running"
    # The same container again: the same address, a new process, which rejoins.
    run(["podman", "start", s.names["worker-2"]], 120)
    rejoined = re.compile(rf"worker {wid} rejoined at round (\d+)")
    first = int(s.wait_log("coordinator", rejoined, 180)[0].group(1))
    s.wait_log("worker-2", REGISTERED, 60, count=2)
    # Training goes on past the round it came back at, then an operator ends the run.
    deadline = time.monotonic() + 120
    while max([int(m.group(1)) for m in PROGRESS_ROW.finditer(s.logs("coordinator"))],
              default=0) <= first + 2:
        assert time.monotonic() < deadline, s.logs("coordinator")[-4000:]
        time.sleep(0.5)
    assert s.healthy("worker-2").returncode == 0
    run(["podman", "stop", "--time", "60", s.names["coordinator"]], 180)

    codes = {service: s.wait_exit(service, 120) for service in s.names}
    assert codes == dict.fromkeys(s.names, 0), {k: s.logs(k)[-3000:] for k in s.names}
    metrics = check_outputs(s.workdir / "runs", workers=2)
    assert metrics["stop_reason"] == "SIGTERM"
