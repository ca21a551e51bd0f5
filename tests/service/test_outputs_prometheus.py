"""/metrics served from a process's state: its own registry, read at each scrape, behind a token and TLS."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.transport.certs import Bundle, write_bundle
from hogwild.config import Settings
from hogwild.errors import ConfigError
from hogwild.outputs.history import EvalHistory
from hogwild.outputs.prometheus import (
    COUNTER,
    Metric,
    MetricsServer,
    coordinator_reader,
    serve_metrics,
)

pytest.importorskip("prometheus_client")


def _scrape(server: MetricsServer) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _state(rounds: int, examples: int) -> RunState:
    state = RunState(2, run_id="abc")
    a = state.roster.register("127.0.0.1:1001", 1)
    b = state.roster.register("127.0.0.1:1002", 1)
    state.roster.progress("abc", a, rounds, examples, 0.5, False, 1)
    state.roster.progress("abc", b, rounds - 1, examples, 0.5, False, 0)
    state.roster.mark_dead(b, "test")
    return state


def _serve(state: RunState, history: EvalHistory) -> MetricsServer:
    settings = Settings(bind_host="127.0.0.1", metrics_port=0)
    server = serve_metrics(settings, "coordinator",
                           coordinator_reader(state, lambda: history, lambda: None),
                           {"run_id": state.run_id})
    assert server is not None
    return server


def test_two_servers_in_one_process_report_their_own_state(tmp_path: Path) -> None:
    history = EvalHistory(tmp_path)
    history.begin()
    first, second = _serve(_state(7, 100), history), _serve(_state(3, 40), history)
    try:
        assert first.port != second.port and first.port > 0
        one, two = _scrape(first), _scrape(second)
        assert one["hogwild_coordinator_rounds_total"] == 7
        assert one["hogwild_coordinator_examples_total"] == 200
        assert two["hogwild_coordinator_rounds_total"] == 3
        assert one["hogwild_coordinator_workers_live"] == 1
        assert one["hogwild_coordinator_workers_dropped"] == 1
        assert one["hogwild_coordinator_worker_drops_total"] == 1
        # No evaluation yet: no loss to report (rather than a made-up 0).
        assert "hogwild_coordinator_validation_loss" not in one
        # Read at each scrape: a new evaluation shows at once.
        history.add({"val_loss": 0.25, "val_accuracy": 0.875})
        again = _scrape(first)
        assert again["hogwild_coordinator_validation_loss"] == 0.25
        assert again["hogwild_coordinator_validation_accuracy"] == 0.875
        assert again["hogwild_coordinator_evaluations_total"] == 1
    finally:
        first.close()
        second.close()


def test_off_by_default() -> None:
    assert Settings().metrics_port is None
    assert serve_metrics(Settings(), "worker", list) is None


def test_a_port_in_use_is_one_error_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(bind_host="127.0.0.1", metrics_port=port)
        with pytest.raises(ConfigError) as err:
            serve_metrics(settings, "worker", list)
    assert "metrics_port" in str(err.value) and str(port) in str(err.value)


def test_port_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigError, match="metrics_port"):
        Settings().replace(metrics_port=70000)


# --- metrics_token_file and metrics_tls ----------------------------------------------------


def _fetch(url: str, token: str | None = None, scheme: str = "Bearer",
           context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of one GET, 401 included."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


class _Counting:
    """A reader that counts its scrapes: a refused request must not reach it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> list[Metric]:
        self.calls += 1
        return [Metric(COUNTER, "rounds", "rounds", 5)]


def _token_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "metrics-token"
    path.write_text(text)
    return str(path)


def test_a_token_file_makes_every_request_carry_the_token(tmp_path: Path) -> None:
    reader = _Counting()
    settings = Settings(bind_host="127.0.0.1", metrics_port=0,
                        metrics_token_file=_token_file(tmp_path, "  s3cret-token\n"))
    server = serve_metrics(settings, "worker", reader)
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        for token, scheme in ((None, "Bearer"), ("wrong", "Bearer"), ("s3cret-tokenx", "Bearer"),
                              ("s3cret-token", "Basic"), ("", "Bearer")):
            status, headers, body = _fetch(url, token, scheme)
            assert status == 401, (token, scheme)
            assert headers["WWW-Authenticate"].startswith("Bearer")
            assert "hogwild" not in body.replace("hogwild metrics", "")
        assert reader.calls == 0  # the collector never ran for a refused request
        status, _, body = _fetch(url, "s3cret-token")
        assert status == 200 and "hogwild_worker_rounds_total 5.0" in body
        # The scheme is case-insensitive (RFC 7235).
        assert _fetch(url, "s3cret-token", "bearer")[0] == 200
        assert reader.calls == 2
    finally:
        server.close()


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_an_empty_token_file_is_refused_naming_the_key(tmp_path: Path, text: str) -> None:
    settings = Settings(bind_host="127.0.0.1", metrics_port=0,
                        metrics_token_file=_token_file(tmp_path, text))
    with pytest.raises(ConfigError, match="metrics_token_file") as err:
        serve_metrics(settings, "worker", list)
    assert "empty" in str(err.value)


def test_an_unreadable_or_unsendable_token_is_refused_naming_the_key(tmp_path: Path) -> None:
    missing = Settings(bind_host="127.0.0.1", metrics_port=0,
                       metrics_token_file=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="metrics_token_file.*nowhere"):
        serve_metrics(missing, "worker", list)
    spaced = missing.replace(metrics_token_file=_token_file(tmp_path, "two words"))
    with pytest.raises(ConfigError, match="metrics_token_file.*printable ASCII"):
        serve_metrics(spaced, "worker", list)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return write_bundle(tmp_path_factory.mktemp("certs"))


def _tls_settings(bundle: Bundle) -> Settings:
    return Settings().replace(bind_host="127.0.0.1", metrics_port=0, metrics_tls=True,
                              tls_ca=str(bundle.ca), tls_cert=str(bundle.cert("worker")),
                              tls_key=str(bundle.key("worker")),
                              metrics_token_file=str(bundle.token))


def test_metrics_over_https_with_the_process_certificate(bundle: Bundle) -> None:
    server = serve_metrics(_tls_settings(bundle), "worker", _Counting())
    assert server is not None
    try:
        assert server.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(bundle.ca))
        token = bundle.token.read_text().strip()
        status, _, body = _fetch(server.url, token, context=context)
        assert status == 200 and "hogwild_worker_rounds_total 5.0" in body
        assert _fetch(server.url, "wrong", context=context)[0] == 401
        # Plain HTTP to the TLS port gets no metrics.
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            _fetch(f"http://127.0.0.1:{server.port}/metrics", token)
        # A client that connects and never says anything holds its own thread only: the
        # handshake is not made on the thread that accepts.
        with socket.create_connection(("127.0.0.1", server.port)):
            started = time.monotonic()
            assert _fetch(server.url, token, context=context)[0] == 200
            assert time.monotonic() - started < 2.0
    finally:
        server.close()


def test_metrics_tls_without_a_certificate_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="metrics_tls"):
        Settings().replace(metrics_tls=True)
    # Settings built without the checks are refused by the server too, before it listens.
    with pytest.raises(ConfigError, match="metrics_tls"):
        serve_metrics(Settings(bind_host="127.0.0.1", metrics_port=0, metrics_tls=True),
                      "worker", list)


def test_hogwild_run_hands_the_metrics_security_to_every_process(bundle: Bundle) -> None:
    from hogwild.cluster.localrun.launcher import setting_flags

    settings = _tls_settings(bundle)
    for role in ("coordinator", "worker"):
        flags = setting_flags(settings, role)
        assert f"--metrics-token-file={bundle.token}" in flags
        assert "--metrics-tls=true" in flags


def _idle_and_trickling(port: int, idle: int, trickling: int) -> list[socket.socket]:
    """``idle`` connections that say nothing and ``trickling`` ones that have sent part of a
    request (and will send the rest a byte at a time, never finishing)."""
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
    for _ in range(trickling):
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        sockets.append(slow)
    return sockets


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.0)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False  # still open, nothing sent
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("tls", [False, True])
def test_a_scrape_is_answered_among_idle_and_trickling_clients(bundle: Bundle,
                                                               tls: bool) -> None:
    """20 idle and 5 trickling connections: a scrape (with and without a token, over HTTP and
    HTTPS) is answered while they stay connected, on the same single thread."""
    settings = (_tls_settings(bundle) if tls
                else Settings(bind_host="127.0.0.1", metrics_port=0))
    reader = _Counting()
    server = serve_metrics(settings, "worker", reader)
    assert server is not None
    context = ssl.create_default_context(cafile=str(bundle.ca)) if tls else None
    token = bundle.token.read_text().strip() if tls else None
    crowd = _idle_and_trickling(server.port, 20, 5)
    try:
        time.sleep(0.2)
        for s in crowd[20:]:
            s.sendall(b"X")  # a byte more: no deadline per read would ever fire
        status, _, body = _fetch(server.url, token, context=context)
        assert status == 200 and "hogwild_worker_rounds_total 5.0" in body
        if tls:
            assert _fetch(server.url, "wrong", context=context)[0] == 401
        assert reader.calls == 1
        assert server.evicted == 0  # room for all of them: nobody was closed
    finally:
        for s in crowd:
            s.close()
        server.close(linger=False)


def test_when_full_the_oldest_idle_client_is_closed_for_a_scrape(
        caplog: pytest.LogCaptureFixture) -> None:
    from hogwild.outputs.metrics_http import MAX_CLIENTS

    server = serve_metrics(Settings(bind_host="127.0.0.1", metrics_port=0), "worker",
                           _Counting())
    assert server is not None
    # Five more than fit: the five oldest are closed as the newest connect.
    crowd = _idle_and_trickling(server.port, MAX_CLIENTS + 5, 0)
    try:
        time.sleep(0.3)
        assert server.evicted == 5
        assert _fetch(server.url)[0] == 200  # room made: one more of the oldest closed
        assert server.evicted == 6
        time.sleep(0.1)
        closed = [_closed_by_server(s) for s in crowd]
        assert closed[:6] == [True] * 6, "the oldest idle clients make room"
        assert not any(closed[6:]), "a newer client was closed"
    finally:
        for s in crowd:
            s.close()
        server.close(linger=False)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


def test_a_client_that_never_finishes_is_closed_at_the_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hogwild.outputs import metrics_http

    monkeypatch.setattr(metrics_http, "REQUEST_SECONDS", 0.5)
    server = serve_metrics(Settings(bind_host="127.0.0.1", metrics_port=0), "worker",
                           _Counting())
    assert server is not None
    slow = _idle_and_trickling(server.port, 0, 1)[0]
    try:
        slow.settimeout(10.0)
        # A byte every 0.1 s: each read is quick, the request never whole.
        closed = False
        for _ in range(100):
            try:
                slow.sendall(b"X")
            except OSError:
                closed = True
                break
            slow.settimeout(0.1)
            try:
                if slow.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed = True
                break
        assert closed, "a trickling client was never closed"
        assert server.timed_out == 1
    finally:
        slow.close()
        server.close(linger=False)


def test_request_lines_are_logged_escaped(caplog: pytest.LogCaptureFixture) -> None:
    server = serve_metrics(Settings(bind_host="127.0.0.1", metrics_port=0), "worker",
                           _Counting())
    assert server is not None
    caplog.set_level("DEBUG", logger="hogwild.metrics")
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /\x1b[2J\x07evil HTTP/1.0\r\n\r\n")
            sock.settimeout(5.0)
            while sock.recv(4096):
                pass
    finally:
        server.close(linger=False)
    lines = [r.getMessage() for r in caplog.records if "evil" in r.getMessage()]
    assert lines and all("\x1b" not in line and "\x07" not in line for line in lines)
    assert any("\\x1b[2J\\x07evil" in line for line in lines)
