"""Throwaway test hosts: Linux network namespaces joined by a bridge on a private subnet.

Each host is a namespace with its own loopback and one ``eth0`` (a veth pair whose other end
sits on a bridge inside a separate bridge namespace), so processes started in it see a machine
of their own with its own address. Nothing is attached to the root namespace: traffic on the
test subnet never leaves these namespaces. Names carry a random tag so concurrent runs never
collide, and :meth:`Network.close` kills every process left inside and deletes the namespaces.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Self

# A private block used only inside the namespaces built here.
DEFAULT_SUBNET = "10.213.0"
_IP_TIMEOUT = 20.0


def unavailable_reason() -> str | None:
    """Why namespaces cannot be built here (None when they can): root and iproute2 are needed."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "building network namespaces needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` command is not installed"
    probe = f"hwprobe{secrets.token_hex(3)}"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                              timeout=_IP_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`ip netns add` failed: {exc}"
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=_IP_TIMEOUT,
                   check=False)
    return None


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one iproute2 command with a deadline; raise with its stderr when ``check`` fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT,
                          check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


@dataclass
class Host:
    """One namespace with one address on the test subnet."""

    label: str
    namespace: str
    address: str
    bridge_port: str  # the veth end on the bridge, named inside the bridge namespace

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` wrapped so that it runs inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *command]


@dataclass
class Network:
    """A bridge namespace plus hosts; use as a context manager so it is always torn down."""

    subnet: str = DEFAULT_SUBNET
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)
    _bridge_ns: str = ""
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def __enter__(self) -> Self:
        self._bridge_ns = f"hw{self.tag}-br"
        ip("netns", "add", self._bridge_ns)
        ip("-n", self._bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self._bridge_ns, "link", "set", "br0", "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, label: str) -> Host:
        """A new namespace with ``eth0`` at the next free address, wired to the bridge."""
        index = len(self.hosts) + 1
        namespace = f"hw{self.tag}-{label}"
        port = f"p{index}"
        ip("netns", "add", namespace)
        ip("link", "add", "eth0", "netns", namespace, "type", "veth",
           "peer", "name", port, "netns", self._bridge_ns)
        ip("-n", self._bridge_ns, "link", "set", port, "master", "br0")
        ip("-n", self._bridge_ns, "link", "set", port, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        address = f"{self.subnet}.{index}"
        ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        host = Host(label, namespace, address, port)
        self.hosts[label] = host
        return host

    def cut(self, host: Host) -> None:
        """Take the host's link down on both ends: its packets stop, its processes live on."""
        ip("-n", host.namespace, "link", "set", "eth0", "down")
        ip("-n", self._bridge_ns, "link", "set", host.bridge_port, "down")

    def start(self, host: Host, command: Sequence[str], env: Mapping[str, str],
              log_path: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``command`` inside ``host`` with exactly ``env``; stdout+stderr go to a file."""
        log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        proc = subprocess.Popen(host.argv(command), env=dict(env), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, start_new_session=True)
        self._procs.append(proc)
        return proc

    def run(self, host: Host, command: Sequence[str], timeout: float,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a short command inside ``host`` and wait for it (with a deadline)."""
        return subprocess.run(host.argv(command), capture_output=True, text=True,
                              timeout=timeout, env=None if env is None else dict(env),
                              check=False)

    def close(self) -> None:
        """Stop every process started here or still inside a namespace, then delete all."""
        for proc in self._procs:
            _terminate(proc)
        namespaces = [h.namespace for h in self.hosts.values()]
        if self._bridge_ns:
            namespaces.append(self._bridge_ns)
        for namespace in namespaces:
            _kill_namespace_pids(namespace)
            ip("netns", "del", namespace, check=False)
        for log in self._logs:
            log.close()
        self.hosts.clear()
        self._procs.clear()
        self._logs.clear()
        self._bridge_ns = ""


def _terminate(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds; always reap."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_namespace_pids(namespace: str) -> None:
    """SIGKILL whatever still runs inside ``namespace`` (e.g. grandchildren of a test)."""
    listed = ip("netns", "pids", namespace, check=False)
    for token in listed.stdout.split():
        if token.isdigit():
            try:
                os.kill(int(token), signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if not ip("netns", "pids", namespace, check=False).stdout.strip():
            break
        time.sleep(0.05)
