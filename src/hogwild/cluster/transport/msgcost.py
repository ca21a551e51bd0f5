"""What a delta message costs on this machine, alone and in a sync round's burst.

``hogwild simulate --calibrate`` fits the simulator's cost model to it: a fixed cost per
message (``overhead``) and a cost per byte (``1 / bandwidth``), from the median round trip
of real ``PushDelta`` calls of a small and of a dense delta. The server is a real gRPC
server on 127.0.0.1 (a free port) whose handler decodes and checks each delta as a worker's
does, so the figure covers both ends of a message; plain text unless ``measure`` is given
the credentials of a process (then mutual TLS and the run token, as `hogwild run` uses).

A message timed alone is not what a run here pays: at the end of a sync round every worker
sends to each of its neighbours at once, and the processes share this machine's cores.
``measure_burst`` starts W worker processes and a coordinator process,
each with a real gRPC server whose handler decodes every delta (as a worker's intake does);
each round the workers pass a barrier together, then each sends a dense delta to every
destination at once (a thread per destination, as the cluster's senders do) and waits for
its peers' deltas of that round. Per worker and round it records when its own messages were
all acknowledged and when the last of its peers' arrived, decoded.

With ``busy`` processes spinning beside the burst, the run's training threads are stood in
for: on a machine they fill, every hop of a message waits for a core (2 workers on 2 cores:
the peer's delta in after 1.0 ms with the cores idle, 1.8-2.0 ms with them busy, 2.0-2.2 ms
in a real run).

For the simulator's single sender per node (engine/simulate.py: its messages one after the
other, then a latency in flight), the burst becomes two figures: ``sender`` = the time to
get all own messages acknowledged / their number, and ``latency`` = the last peer delta's
arrival less the sender's time for the peer messages that go first.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from hogwild.cluster.transport.security import Security
from hogwild.cluster.transport.serving import bind, new_server
from hogwild.cluster.wire import pb, pb_grpc
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.model.compression import wire_bytes

ROUND_TRIPS = 30  # per size: the median of this many calls


@dataclass(frozen=True)
class MessageCost:
    """The fitted cost of one message: ``overhead`` seconds plus bytes / ``bandwidth``."""

    overhead: float
    bandwidth: float
    small_seconds: float   # the median call of a small delta
    dense_seconds: float   # ... and of a dense one of ``dense_entries`` entries
    dense_entries: int


class _Sink(pb_grpc.WorkerServicer):
    """Decodes each delta as a worker's intake does, and counts them per round (a burst
    waits on the count)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.cond = threading.Condition()
        self.arrived: dict[int, int] = {}
        self.last: dict[int, float] = {}   # per round: when its latest delta was decoded

    def PushDelta(self, request: pb.Delta, context: Any) -> pb.Ack:
        decode_delta(request, self.dim)
        with self.cond:
            r = int(request.round)
            self.arrived[r] = self.arrived.get(r, 0) + 1
            self.last[r] = time.perf_counter()
            self.cond.notify_all()
        return pb.Ack()

    def wait_for(self, round_: int, count: int, timeout: float) -> float | None:
        """When the ``count``-th delta of ``round_`` arrived (None: not within ``timeout``)."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.arrived.get(round_, 0) >= count, timeout):
                return None
            return self.last[round_]


def _serve_sink(dim: int, security: Security, name: str) -> tuple[grpc.Server, _Sink, int]:
    """A started gRPC server on a free loopback port whose handler is a :class:`_Sink`."""
    sink = _Sink(dim)
    server = new_server(4, name, security)
    pb_grpc.add_WorkerServicer_to_server(sink, server)  # type: ignore[no-untyped-call]
    port = bind(server, "127.0.0.1", 0, security)
    server.start()
    return server, sink, port


def measure(dim: int, round_trips: int = ROUND_TRIPS,
            security: Security | None = None) -> MessageCost:
    """Time real PushDelta calls of a 16-entry and a ``dim``-entry delta over loopback
    (plain text, or with ``security``'s credentials on both ends)."""
    security = security if security is not None else Security()
    server, _, port = _serve_sink(dim, security, "calibrate")
    try:
        with _channel(security, f"127.0.0.1:{port}") as channel:
            push = pb_grpc.WorkerStub(channel).PushDelta  # type: ignore[no-untyped-call]
            rng = np.random.default_rng(0)
            small = _median_call(push, dim, 16, rng, round_trips)
            dense = _median_call(push, dim, dim, rng, round_trips)
    finally:
        server.stop(0)
    # Per byte of payload as the codec sends each (the full one travels dense).
    per_byte = max(0.0, (dense - small) / max(1, wire_bytes(dim, dim) - wire_bytes(16, dim)))
    return MessageCost(overhead=small, bandwidth=1.0 / per_byte if per_byte > 0 else 1e12,
                       small_seconds=small, dense_seconds=dense, dense_entries=dim)


def _channel(security: Security, address: str) -> grpc.Channel:
    return security.channel(address) if security.tls else grpc.insecure_channel(address)


def _median_call(push: Any, dim: int, entries: int, rng: np.random.Generator,
                 round_trips: int) -> float:
    idx = np.sort(rng.choice(dim, size=min(entries, dim), replace=False)).astype(np.int32)
    val = rng.normal(0.0, 1e-3, idx.size).astype(np.float32)
    times = []
    for seq in range(1, round_trips + 2):
        began = time.perf_counter()
        header = DeltaHeader(run_id="calibration", worker_id=0, round=seq, seq=seq, dim=dim)
        for message in encode_delta_parts(header, idx, val):
            push(message, timeout=10.0)
        if seq > 1:  # the first call opens the connection
            times.append(time.perf_counter() - began)
    return statistics.median(times)


# ---------------------------------------------------------------- a sync round's burst

BURST_ROUNDS = 20            # timed rounds (after one that opens the connections)
MAX_BURST_WORKERS = 8        # processes at most: past the cores, more only queue for them
START_TIMEOUT = 120.0   # seconds for the processes to start (imports, a server each)
ROUND_TIMEOUT = 30.0    # seconds a round may take before the measurement gives up


@dataclass(frozen=True)
class BurstCost:
    """A sync round's exchange among ``workers`` processes: medians over the rounds."""

    workers: int
    destinations: int     # messages each worker sends a round
    all_acked: float      # seconds until a worker's messages were all acknowledged
    peers_in: float       # ... until the last of its peers' deltas had arrived (0: no peer)
    dense_bytes: int      # one message's payload

    @property
    def sender(self) -> float:
        """A single sender's seconds per message that empties the burst as fast."""
        return self.all_acked / self.destinations

    @property
    def latency(self) -> float:
        """What the peers' deltas take beyond the sender's time for them (>= 0)."""
        if not self.peers_in:
            return 0.0
        return max(0.0, self.peers_in - (self.workers - 1) * self.sender)


def measure_burst(dim: int, workers: int, mesh: bool, rounds: int = BURST_ROUNDS,
                  busy: int = 0) -> BurstCost:
    """Time ``rounds`` sync round ends of ``workers`` worker processes (at most
    MAX_BURST_WORKERS) and a coordinator: in a ``mesh`` each worker sends to every peer and
    the coordinator, otherwise to the coordinator alone. Plain text over loopback. ``busy``
    processes spin beside them meanwhile, as a run's training threads keep its cores busy
    while its messages travel."""
    workers = max(1, min(workers, MAX_BURST_WORKERS))
    # spawn, not fork: the caller may have gRPC running, which a forked child cannot use
    ctx = multiprocessing.get_context("spawn")
    stop_spinning = ctx.Event()
    spinners = [ctx.Process(target=_spin, args=(stop_spinning,), daemon=True)
                for _ in range(max(0, busy))]
    ports: Any = ctx.Queue()
    results: Any = ctx.Queue()
    plans = [ctx.Queue() for _ in range(workers + 1)]
    barrier = ctx.Barrier(workers)
    procs = [ctx.Process(target=_member, args=(i, workers, dim, mesh, rounds, ports,
                                               plans[i], barrier, results), daemon=True)
             for i in range(workers + 1)]   # member `workers` is the coordinator
    for proc in [*spinners, *procs]:
        proc.start()
    try:
        table = dict(ports.get(timeout=START_TIMEOUT) for _ in procs)
        for plan in plans:
            plan.put(table)
        acked, peers_in = [], []
        for _ in range(workers):
            worker_acked, worker_in = results.get(timeout=START_TIMEOUT + rounds * ROUND_TIMEOUT)
            acked += worker_acked
            peers_in += worker_in
    finally:
        stop_spinning.set()
        for plan in plans:
            plan.put(None)  # the coordinator (and any member left) may stop
        for proc in [*procs, *spinners]:
            proc.join(10.0)
            if proc.is_alive():
                proc.kill()
    destinations = workers if mesh else 1
    return BurstCost(workers=workers, destinations=destinations,
                     all_acked=statistics.median(acked),
                     peers_in=statistics.median(peers_in) if peers_in else 0.0,
                     dense_bytes=wire_bytes(dim, dim))


def _spin(stop: Any) -> None:
    """Keep one core busy until ``stop`` (a training thread's share of the machine)."""
    while not stop.is_set():
        for _ in range(100_000):
            pass


def _member(me: int, workers: int, dim: int, mesh: bool, rounds: int, ports: Any, plan: Any,
            barrier: Any, results: Any) -> None:
    """One process of the burst: a worker (``me`` < workers) or the coordinator."""
    server, sink, port = _serve_sink(dim, Security(), "burst")
    ports.put((me, port))
    try:
        table = plan.get(timeout=START_TIMEOUT)
        if me == workers or table is None:
            plan.get()  # the coordinator only receives, until told to stop
            return
        targets = [p for p in table if p != me] if mesh else [workers]
        channels = [grpc.insecure_channel(f"127.0.0.1:{table[p]}") for p in targets]
        try:
            stubs = [pb_grpc.WorkerStub(c).PushDelta  # type: ignore[no-untyped-call]
                     for c in channels]
            results.put(_rounds(me, workers, dim, mesh, rounds, stubs, sink, barrier))
        finally:
            for channel in channels:
                channel.close()
        plan.get(timeout=START_TIMEOUT)
    finally:
        server.stop(0)


def _rounds(me: int, workers: int, dim: int, mesh: bool, rounds: int, stubs: list[Any],
            sink: _Sink, barrier: Any) -> tuple[list[float], list[float]]:
    """A worker's rounds: (seconds to all acknowledged, seconds to every peer's delta in)."""
    rng = np.random.default_rng(me)
    idx = np.arange(dim, dtype=np.int32)
    val = rng.normal(0.0, 1e-3, dim).astype(np.float32)
    peers = workers - 1 if mesh else 0
    acked, peers_in = [], []
    for r in range(1, rounds + 2):
        header = DeltaHeader(run_id="burst", worker_id=me, round=r, seq=r, dim=dim)
        messages = encode_delta_parts(header, idx, val)
        barrier.wait(ROUND_TIMEOUT)
        began = time.perf_counter()
        senders = [threading.Thread(target=_push, args=(stub, messages)) for stub in stubs]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        sent = time.perf_counter() - began
        if r > 1:  # the first round opens the connections
            acked.append(sent)
        if peers:
            last = sink.wait_for(r, peers, ROUND_TIMEOUT)
            if last is None:
                raise TimeoutError(f"burst round {r}: the peers' deltas did not all arrive")
            if r > 1:
                peers_in.append(max(0.0, last - began))
    return acked, peers_in


def _push(stub: Any, messages: list[Any]) -> None:
    for message in messages:
        stub(message, timeout=ROUND_TIMEOUT)
