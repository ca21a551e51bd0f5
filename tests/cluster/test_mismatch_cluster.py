"""Real processes whose TLS or run token disagree: the worker stops at its first attempt with
one line naming the setting to fix (exit 2, as any bad setting), not after connect_timeout;
the coordinator writes one line per peer host for a token refused or a failed TLS handshake,
at most once a minute, and gRPC's per-handshake log lines stay out of both outputs."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from hogwild.cluster.transport.certs import Bundle, write_bundle

from .helpers import READY, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

# Longer than the test waits for a worker: a worker that retries until it gives up fails.
CONNECT_TIMEOUT = 90
WORKER_WAIT = 45
ERROR = re.compile(r"hogwild worker: error: setting '(\w+)': (.*)")
REFUSED = re.compile(r"refused calls from 127\.0\.0\.1: (.*)")
CLOSED = re.compile(r"connections from 127\.0\.0\.1 closed before their first call "
                    r"\((\d+) so far\): (.*)")
# The coordinator looks at the socket table once a second: its line comes within this.
CLOSED_WITHIN = 5.0


def _closed_lines(cluster: Cluster) -> list[re.Match[str]]:
    """The coordinator's lines about connections that failed before their first call, once
    the first has had CLOSED_WITHIN seconds to come."""
    assert cluster.coordinator is not None
    cluster.coordinator.wait_for(CLOSED, CLOSED_WITHIN)
    return [m for line in cluster.coordinator.lines if (m := CLOSED.search(line))]


def _tls(bundle: Bundle, role: str) -> dict[str, Any]:
    return {"tls_ca": str(bundle.ca), "tls_cert": str(bundle.cert(role)),
            "tls_key": str(bundle.key(role))}


def _coordinator(cluster: Cluster, tmp_path: Path, **settings: Any) -> str:
    coordinator = cluster.spawn("coordinator", "coordinator", {
        "bind_host": "127.0.0.1", "coordinator_port": 0, "workers": 1,
        "register_timeout": 200, "out_dir": str(tmp_path / "out"), "data_cache": False,
        **settings})
    cluster.coordinator = coordinator
    return f"127.0.0.1:{int(coordinator.wait_for(READY, 60).group(1))}"


def _refused_worker(cluster: Cluster, address: str, name: str,
                    **settings: Any) -> tuple[str, str]:
    """(setting named, the rest of the line) of a worker that must give up at once."""
    worker = cluster.spawn(name, "worker", {
        "bind_host": "127.0.0.1", "worker_port": 0, "coordinator_address": address,
        "connect_timeout": CONNECT_TIMEOUT, **settings})
    cluster.workers.append(worker)
    assert worker.wait(WORKER_WAIT) == 2, worker.output()
    errors = [m for line in worker.lines if (m := ERROR.search(line))]
    assert len(errors) == 1, worker.output()
    assert "Handshake failed" not in worker.output()
    return errors[0].group(1), errors[0].group(2)


def test_tls_on_one_side_or_another_ca(cluster: Cluster, tmp_path: Path) -> None:
    ours = write_bundle(tmp_path / "ours", ["127.0.0.1"])
    theirs = write_bundle(tmp_path / "theirs", ["127.0.0.1"])
    address = _coordinator(cluster, tmp_path, **_tls(ours, "coordinator"))

    key, line = _refused_worker(cluster, address, "plain", insecure=True)
    assert key == "tls_ca" and "serves mutual TLS and this worker plain text" in line, line
    assert "--tls-ca" in line
    # The coordinator's side: one line for the peer host, naming what to compare.
    closed = _closed_lines(cluster)
    assert len(closed) == 1, cluster.coordinator.output() if cluster.coordinator else ""
    assert "without TLS (insecure)" in closed[0].group(2) and "tls_ca" in closed[0].group(2)

    key, line = _refused_worker(cluster, address, "other-ca", **_tls(theirs, "worker"))
    assert key == "tls_ca" and "did not sign" in line and str(theirs.ca) in line, line

    # Our CA, but a certificate the coordinator's CA did not sign.
    mixed = {**_tls(theirs, "worker"), "tls_ca": str(ours.ca)}
    key, line = _refused_worker(cluster, address, "other-cert", **mixed)
    assert key == "tls_cert" and "refuses this worker's certificate" in line, line

    # The right credentials, dialling a name the coordinator's certificate does not carry.
    key, line = _refused_worker(cluster, address, "other-name", **_tls(ours, "worker"),
                                tls_server_name="elsewhere.example.org")
    assert key == "tls_server_name" and "elsewhere.example.org" in line, line

    assert cluster.coordinator is not None
    assert "Handshake failed" not in cluster.coordinator.output()
    # Four workers' failed handshakes within the minute: still the one line for their host.
    assert len(_closed_lines(cluster)) == 1, cluster.coordinator.output()


def test_tls_worker_against_plain_coordinator(cluster: Cluster, tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "certs", ["127.0.0.1"])
    address = _coordinator(cluster, tmp_path, insecure=True)
    key, line = _refused_worker(cluster, address, "tls", **_tls(bundle, "worker"))
    assert key == "tls_ca" and "serves plain text and this worker mutual TLS" in line, line
    assert "--insecure" in line
    closed = _closed_lines(cluster)
    assert len(closed) == 1 and "speaks TLS to this plain-text server" in closed[0].group(2), \
        cluster.coordinator.output() if cluster.coordinator else ""


def test_token_on_one_side_or_different(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("run-token-one\n")
    (tmp_path / "other").write_text("run-token-two\n")
    address = _coordinator(cluster, tmp_path, auth_token_file=str(tmp_path / "token"))

    key, line = _refused_worker(cluster, address, "none")
    assert key == "auth_token_file" and "requires a run token and this worker has none" in line
    key, line = _refused_worker(cluster, address, "wrong",
                                auth_token_file=str(tmp_path / "other"))
    assert key == "auth_token_file" and "another run token" in line, line
    # A second worker with the same wrong token: the coordinator's line is not repeated.
    _refused_worker(cluster, address, "wrong-again", auth_token_file=str(tmp_path / "other"))

    assert cluster.coordinator is not None
    refused = [m.group(1) for line in cluster.coordinator.lines
               if (m := REFUSED.search(line))]
    assert len(refused) == 2, cluster.coordinator.output()
    assert "no run token" in refused[0] and "other than this server's" in refused[1]
    assert all("auth_token_file" in line for line in refused)
    # Their handshakes passed (a token is checked on calls): no line for a failed one, after
    # the coordinator's next looks at the socket table.
    time.sleep(2.5)
    assert not any(CLOSED.search(line) for line in cluster.coordinator.lines)


def test_token_sent_to_a_coordinator_without_one(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("run-token-one\n")
    address = _coordinator(cluster, tmp_path)
    key, line = _refused_worker(cluster, address, "token",
                                auth_token_file=str(tmp_path / "token"))
    assert key == "auth_token_file" and "has no run token and this worker sends one" in line
    assert cluster.coordinator is not None
    refused = [m.group(1) for line in cluster.coordinator.lines
               if (m := REFUSED.search(line))]
    assert len(refused) == 1 and "this server has none" in refused[0], \
        cluster.coordinator.output()
