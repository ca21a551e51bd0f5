"""Prometheus /metrics for the coordinator and the workers, read from their state at each scrape."""

from __future__ import annotations

import hmac
import logging
import math
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from hogwild.errors import ConfigError
from hogwild.settings.rules import check_metrics_tls

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from hogwild.config import Settings
    from hogwild.coordinator.state import RunState
    from hogwild.outputs.history import EvalHistory
    from hogwild.worker.node import WorkerNode

log = logging.getLogger("hogwild.metrics")

COUNTER, GAUGE = "counter", "gauge"


@dataclass(frozen=True)
class Metric:
    """One value of a scrape: its kind (counter or gauge), name (without the process's
    prefix, nor a counter's _total), help text and value (None: not known yet, left out)."""

    kind: str
    name: str
    help: str
    value: float | None


Reader = Callable[[], list[Metric]]


class _Collector:
    """Turns a reader's values into metric families when Prometheus scrapes: the counters
    stay where the process keeps them (no second copy to keep in step, nothing on the hot
    paths)."""

    def __init__(self, prefix: str, read: Reader, labels: Mapping[str, str]) -> None:
        self.prefix = prefix
        self.read = read
        self.labels = dict(labels)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        names, values = list(self.labels), list(self.labels.values())
        for m in self.read():
            if m.value is None or not math.isfinite(m.value):
                continue
            family = CounterMetricFamily if m.kind == COUNTER else GaugeMetricFamily
            metric = family(f"{self.prefix}_{m.name}", m.help, labels=names)
            metric.add_metric(values, float(m.value))
            yield metric


# A client gets this long to finish its TLS handshake, and then each read or write of its
# request: one that connects and stalls holds one thread for this long, never the server.
CLIENT_SECONDS = 10.0
# Clients answered at once: each holds a thread for up to CLIENT_SECONDS; more are closed at
# once rather than given threads without bound (a scraper needs one; a flood gets nothing).
MAX_CLIENTS = 8


class _QuietHandler(WSGIRequestHandler):
    timeout = CLIENT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        # Not one stderr line per scrape (the library's default): debug log only.
        log.debug("%s %s", self.address_string(), format % args)


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server that answers each client on a thread of its own, the TLS handshake
    included: done on the accepting thread (a listening socket wrapped in TLS), one client
    that never completes it would stop every scrape."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None
    refused_clients = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for this client if fewer than MAX_CLIENTS are being answered, else the
        connection is closed at once (the accepting thread never waits)."""
        if not self._slots.acquire(blocking=False):
            self.refused_clients += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CLIENT_SECONDS)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except OSError as exc:  # not TLS, a certificate it refused, too slow: nothing to answer
            log.debug("metrics: TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


class _Server6(_Server):
    address_family = socket.AF_INET6


_UNAUTHORIZED = b"401 unauthorized: /metrics wants the header Authorization: Bearer <token>\n"


def _require_token(app: WSGIApplication, token: str) -> WSGIApplication:
    """``app`` behind a bearer token: a request without the token gets 401 and never reaches
    ``app`` (no collector is read for it)."""
    expected = token.encode("ascii")

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        scheme, _, given = str(environ.get("HTTP_AUTHORIZATION", "")).strip().partition(" ")
        # WSGI headers are latin-1 text; compare bytes in constant time (compare_digest
        # refuses str that is not ASCII), and the scheme apart: it is no secret.
        match = hmac.compare_digest(given.strip().encode("latin-1", "replace"), expected)
        if match and scheme.lower() == "bearer":
            return app(environ, start_response)
        challenge = 'Bearer realm="hogwild metrics"'
        if given:
            challenge += ', error="invalid_token"'
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("Content-Length", str(len(_UNAUTHORIZED))),
                                            ("WWW-Authenticate", challenge)])
        return [_UNAUTHORIZED]

    return guarded


def _read_token(path: str) -> str:
    """The token in metrics_token_file, stripped; ConfigError naming the key when the file
    cannot be read, is empty, or holds what an HTTP header cannot carry."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError("metrics_token_file", f"cannot read {path}: "
                                                f"{exc.strerror or exc}") from None
    token = data.decode("utf-8", "replace").strip()
    if not token:
        raise ConfigError("metrics_token_file", f"{path} is empty")
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise ConfigError("metrics_token_file", f"{path}: the token must be printable ASCII "
                                                "without spaces (it travels in an HTTP header)")
    return token


def _tls_context(settings: Settings) -> ssl.SSLContext:
    """A server context with the process's own certificate; ConfigError naming the file that
    cannot be loaded."""
    check_metrics_tls({"metrics_tls": True, "tls_cert": settings.tls_cert,
                       "tls_key": settings.tls_key})
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for key, path in (("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key)):
        if not Path(path).is_file():
            raise ConfigError(key, f"cannot read {path} (metrics_tls)")
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("tls_cert", f"metrics_tls cannot load {settings.tls_cert} with "
                                      f"{settings.tls_key}: {exc}") from None
    return context


class MetricsServer:
    """A /metrics HTTP(S) server of its own registry (never the library's global one: two
    servers in one process, as in tests, stay apart)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str,
                 port: int, linger: float, scheme: str = "http") -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port
        self.linger = linger
        self.scheme = scheme

    @property
    def url(self) -> str:
        # A wildcard address is not one to dial: name this host instead.
        host = socket.gethostname() if self.host in ("", "0.0.0.0", "::") else self.host
        return f"{self.scheme}://{'[' + host + ']' if ':' in host else host}:{self.port}/metrics"

    def close(self, linger: bool = True) -> None:
        """Stop serving, after ``linger`` seconds (the setting) when asked: a scrape then
        still sees the final counters of a run that ended between two scrapes."""
        if linger and self.linger > 0:
            log.info("serving metrics %.0fs more (metrics_linger)", self.linger)
            time.sleep(self.linger)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)


def serve_metrics(settings: Settings, process: str, read: Reader,
                  labels: Mapping[str, str] | None = None) -> MetricsServer | None:
    """Serve ``read``'s metrics, named ``hogwild_<process>_*``, on bind_host:metrics_port,
    behind metrics_token_file's token and over HTTPS with metrics_tls; None when metrics_port
    is null. ConfigError naming the setting if the library is missing, the token or the
    certificate cannot be read, or the port cannot be bound: all before anything listens."""
    if settings.metrics_port is None:
        return None
    try:
        from prometheus_client import CollectorRegistry, make_wsgi_app
    except ImportError:
        raise ConfigError("metrics_port", "needs the prometheus-client package "
                                          "(pip install prometheus-client)") from None
    token = _read_token(settings.metrics_token_file) if settings.metrics_token_file else None
    tls = _tls_context(settings) if settings.metrics_tls else None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(f"hogwild_{process}", read, labels or {}))
    app = make_wsgi_app(registry)
    if token is not None:
        app = _require_token(app, token)
    host, port = settings.bind_host, settings.metrics_port
    try:
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        server = (_Server6 if family == socket.AF_INET6 else _Server)(
            (host.strip("[]"), port), _QuietHandler)
    except OSError as exc:
        raise ConfigError("metrics_port", f"cannot serve metrics on {host}:{port}: "
                                          f"{exc.strerror or exc}") from None
    server.set_app(app)
    server.tls = tls
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    served = MetricsServer(server, thread, host, int(server.server_port),
                           settings.metrics_linger, "https" if tls else "http")
    if token is None and not _loopback(host):
        log.warning("metrics at %s without a token (metrics_token_file): anyone who reaches "
                    "the port can read them", served.url)
    else:
        log.info("metrics at %s%s", served.url, "" if token is None else " (token required)")
    return served


def _loopback(host: str) -> bool:
    # Imported here: hogwild.protocol.serving loads grpc, which this module needs not.
    from hogwild.protocol.serving import is_loopback

    return is_loopback(host)


def coordinator_reader(state: RunState, history: Callable[[], EvalHistory],
                       relay: Callable[[], Any]) -> Reader:
    """The coordinator's metrics: the run state's counters, the newest evaluation, and what
    the relay (topology star or tree) sent. ``history`` and ``relay`` are asked at each scrape
    (the driver makes them as the run goes)."""

    def read() -> list[Metric]:
        c = state.counters()
        rows = history().rows.rows()
        last = rows[-1] if rows else {}
        sender = relay()
        return [
            Metric(COUNTER, "rounds", "highest round a worker reached", c["rounds"]),
            Metric(COUNTER, "examples", "training examples the workers processed "
                                        "(rate() of it: examples per second)", c["examples"]),
            Metric(COUNTER, "deltas_received", "delta messages applied to the global model",
                   c["deltas_received"]),
            Metric(COUNTER, "bytes_received", "bytes of delta values applied",
                   c["bytes_received"]),
            Metric(COUNTER, "duplicate_deltas", "delta messages received twice and ignored",
                   c["duplicates"]),
            Metric(COUNTER, "deltas_sent", "sums of deltas relayed to workers (topology star "
                                           "or tree)", sender.messages_sent() if sender else 0),
            Metric(COUNTER, "bytes_sent", "bytes relayed to workers",
                   sender.bytes_sent() if sender else 0),
            Metric(GAUGE, "staleness", "largest round gap between the live workers, or reported "
                                       "by one", c["staleness"]),
            Metric(COUNTER, "evaluations", "validation evaluations of the global model",
                   history().count),
            Metric(GAUGE, "validation_loss", "validation loss of the newest evaluation",
                   last.get("val_loss")),
            Metric(GAUGE, "validation_accuracy", "validation accuracy of the newest evaluation",
                   last.get("val_accuracy")),
            Metric(GAUGE, "workers_live", "registered workers not dropped", c["live"]),
            Metric(GAUGE, "workers_dropped", "workers dropped and not back", c["dead"]),
            Metric(COUNTER, "worker_drops", "times a worker was dropped", c["drops"]),
        ]

    return read


def worker_reader(node: Callable[[], WorkerNode]) -> Reader:
    """A worker's metrics, read from its current node (a worker that registers again gets a
    fresh one, whose counters start over: Prometheus takes that as a counter reset)."""

    def read() -> list[Metric]:
        n = node()
        sent = list(n.destinations.values())
        peers = n.inbox.snapshot()
        return [
            Metric(COUNTER, "rounds", "rounds this worker completed", n.rounds),
            Metric(COUNTER, "examples", "training examples processed (rate() of it: examples "
                                        "per second)", n.examples),
            Metric(COUNTER, "deltas_sent", "delta messages sent (to peers, the coordinator)",
                   n.deltas_sent),
            Metric(COUNTER, "bytes_sent", "bytes of delta messages sent",
                   sum(d.bytes_sent for d in sent)),
            Metric(COUNTER, "deltas_received", "peer delta messages applied",
                   sum(p.applied for p in peers.values())),
            Metric(COUNTER, "bytes_received", "bytes of peer delta values received",
                   n.inbox.bytes_received),
            Metric(GAUGE, "staleness", "largest round gap to a peer seen at an exchange",
                   n.max_staleness),
            Metric(GAUGE, "peers_dropped", "peers this worker dropped",
                   sum(1 for p in peers.values() if p.dropped)),
        ]

    return read
