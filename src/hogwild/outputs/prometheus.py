"""Prometheus /metrics for the coordinator and the workers, read from their state at each scrape."""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hogwild.errors import ConfigError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

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


class MetricsServer:
    """A /metrics HTTP server of its own registry (never the library's global one: two
    servers in one process, as in tests, stay apart)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str,
                 port: int, linger: float) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port
        self.linger = linger

    @property
    def url(self) -> str:
        # A wildcard address is not one to dial: name this host instead.
        host = socket.gethostname() if self.host in ("", "0.0.0.0", "::") else self.host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}/metrics"

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
    """Serve ``read``'s metrics, named ``hogwild_<process>_*``, on bind_host:metrics_port;
    None when metrics_port is null. ConfigError (naming metrics_port) if the library is
    missing or the port cannot be bound."""
    if settings.metrics_port is None:
        return None
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ConfigError("metrics_port", "needs the prometheus-client package "
                                          "(pip install prometheus-client)") from None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(f"hogwild_{process}", read, labels or {}))
    try:
        server, thread = start_http_server(settings.metrics_port, settings.bind_host,
                                           registry=registry)
    except OSError as exc:
        raise ConfigError("metrics_port", f"cannot serve metrics on "
                                          f"{settings.bind_host}:{settings.metrics_port}: "
                                          f"{exc.strerror or exc}") from None
    served = MetricsServer(server, thread, settings.bind_host, int(server.server_port),
                           settings.metrics_linger)
    log.info("metrics at %s", served.url)
    return served


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
