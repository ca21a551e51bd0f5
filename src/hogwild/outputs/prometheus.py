"""Prometheus /metrics for the coordinator and the workers, read from their state at each scrape."""

from __future__ import annotations

import hmac
import logging
import math
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hogwild.base.hosts import is_loopback
from hogwild.errors import ConfigError
from hogwild.outputs.metrics_http import MetricsHTTPServer
from hogwild.settings.rules import check_metrics_tls

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from hogwild.cluster.coordinator.state import RunState
    from hogwild.cluster.worker.node import WorkerNode
    from hogwild.config import Settings
    from hogwild.outputs.history import EvalHistory

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

    def __init__(self, server: MetricsHTTPServer, host: str, port: int, linger: float,
                 scheme: str = "http") -> None:
        self._server = server
        self.host = host
        self.port = port
        self.linger = linger
        self.scheme = scheme

    @property
    def evicted(self) -> int:
        """Idle or slow clients closed to make room for another (see metrics_http)."""
        return self._server.evicted

    @property
    def timed_out(self) -> int:
        """Clients closed for not finishing a request in time (see metrics_http)."""
        return self._server.timed_out

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
        sock = _listen(host, port)
    except OSError as exc:
        raise ConfigError("metrics_port", f"cannot serve metrics on {host}:{port}: "
                                          f"{exc.strerror or exc}") from None
    server = MetricsHTTPServer(sock, app, tls)
    server.start()
    served = MetricsServer(server, host, server.server_port, settings.metrics_linger,
                           "https" if tls else "http")
    if token is None and not is_loopback(host):
        log.warning("metrics at %s without a token (metrics_token_file): anyone who reaches "
                    "the port can read them", served.url)
    else:
        log.info("metrics at %s%s", served.url, "" if token is None else " (token required)")
    return served


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (any address of the host's family for "")."""
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As HTTP servers do: a port whose last connections are in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock




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
        done = n.counters
        sent = list(n.destinations.values())
        peers = n.inbox.snapshot()
        return [
            Metric(COUNTER, "rounds", "rounds this worker completed", done.rounds),
            Metric(COUNTER, "examples", "training examples processed (rate() of it: examples "
                                        "per second)", done.examples),
            Metric(COUNTER, "deltas_sent", "delta messages sent (to peers, the coordinator)",
                   done.deltas_sent),
            Metric(COUNTER, "bytes_sent", "bytes of delta messages sent",
                   sum(d.bytes_sent for d in sent)),
            Metric(COUNTER, "deltas_received", "peer delta messages applied",
                   sum(p.applied for p in peers.values())),
            Metric(COUNTER, "bytes_received", "bytes of peer delta values received",
                   n.inbox.bytes_received),
            Metric(GAUGE, "staleness", "largest round gap to a peer seen at an exchange",
                   done.max_staleness),
            Metric(GAUGE, "peers_dropped", "peers this worker dropped",
                   sum(1 for p in peers.values() if p.dropped)),
        ]

    return read
