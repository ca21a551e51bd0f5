"""Outgoing messages of one process: one FIFO queue and one thread per destination.

A worker sends through it, and so does the coordinator as a star's hub or a tree's root.

Training and exchange threads only enqueue; a slow or dead peer delays nobody else. A message
is retried (same seq: the receiver ignores duplicates) on UNAVAILABLE / DEADLINE_EXCEEDED until
``give_up_after`` seconds of failures, then the destination is declared down (callback) and
its queue is discarded. A rejection (INVALID_ARGUMENT, FAILED_PRECONDITION) is logged and the
message dropped: retrying cannot help.

The queue is bounded. With ``coalesce`` on, a delta queued behind a slow send is not queued
again: it is summed into the delta still waiting (deltas are additive, so the receiver ends
with the same sum), which is re-encoded with a fresh seq when its turn comes. So at most one
delta waits per destination and draining never takes more than one send. The float32 rounding
of a summed delta is kept and added to the next sum or to the final delta (which sends what
is left of it on its own), so nothing is lost to rounding; the deltas between go out as the
exchange thread encoded them. A newer progress report replaces a queued older one; heartbeats
are only queued when the queue is empty.

Sequence numbers are per destination: each one numbers the deltas it sends 1, 2, 3, ... (all
parts of a delta share one), whatever was summed or sent elsewhere, so every receiver sees a
gap-free stream from this sender and its bounded dedup window (protocol/sequence.py) can
refuse any jump.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hogwild.cluster.transport.health import LIVENESS
from hogwild.cluster.transport.timing import Timers
from hogwild.engine.sparse import merge_sparse

log = logging.getLogger("hogwild.worker")

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNKNOWN}
# Messages whose newest copy says all the older ones said: a queued one is replaced.
_REPLACEABLE = {"ReportProgress"}

# (indices, float32 values, round, final, examples) -> the messages of one delta (a new seq).
Encoder = Callable[[npt.NDArray[np.int32], npt.NDArray[np.floating[Any]], int, bool, int],
                  list[Any]]


@dataclass
class OutgoingDelta:
    """One delta waiting for its destination: its messages as encoded by the exchange thread
    (shared by every destination), or, once other deltas were summed into it, only its
    coordinates (float64 sums), encoded when it is sent."""

    round: int
    final: bool
    examples: int
    indices: npt.NDArray[np.int32]
    values: npt.NDArray[np.floating[Any]]
    messages: list[Any] | None = None
    merged: int = 1
    # Sent on its own, under its own round, even to a coalescing destination: a tree node's
    # re-sent message, whose round tells its new parent what it holds already.
    apart: bool = False
    # Tree, async (engine/tree.py): per origin, its messages to its parent this one holds
    # with the earlier ones on the edge; a re-sent message; the coordinator's applied counts.
    covers: dict[int, int] | None = None
    resent: bool = False
    applied: dict[int, int] | None = None
    # Tree, async: a resync to a child adopted around a dead one (engine/treeview.py),
    # the child's own count the dead edge carried. Sent apart, never summed with another.
    resync_cut: int | None = None

    def absorb(self, other: OutgoingDelta) -> None:
        """Sum ``other`` (a later delta) into this one."""
        self.indices, self.values = merge_sparse(self.indices, self.values, other.indices,
                                                 other.values)
        # Counts only grow along an edge: the sum holds what the later one says.
        self.covers = _newest(self.covers, other.covers)
        self.applied = _newest(self.applied, other.applied)
        self.round = max(self.round, other.round)
        self.final = self.final or other.final
        self.examples = max(self.examples, other.examples)
        self.messages = None
        self.merged += other.merged


def _newest(a: dict[int, int] | None, b: dict[int, int] | None) -> dict[int, int] | None:
    """Two (origin -> count) maps merged, the larger count of each origin kept."""
    if a is None or b is None:
        return b if a is None else a
    return {o: max(a.get(o, 0), b.get(o, 0)) for o in a.keys() | b.keys()}


def _mark(messages: list[Any], delta: OutgoingDelta) -> None:
    """Carry ``delta``'s tree bookkeeping on each of its parts (Delta fields 15-17, 22-23)."""
    if (delta.covers is None and delta.applied is None and not delta.resent
            and delta.resync_cut is None):
        return
    for m in messages:
        for origin, count in sorted((delta.covers or {}).items()):
            m.covers.add(origin=origin, count=count)
        for origin, count in sorted((delta.applied or {}).items()):
            m.applied.add(origin=origin, count=count)
        m.resent = delta.resent
        if delta.resync_cut is not None:
            m.resync, m.resync_cut = True, delta.resync_cut


def wire_values(values: npt.NDArray[np.floating[Any]], half: bool
                ) -> npt.NDArray[np.floating[Any]]:
    """``values`` rounded to the wire type: float32, or float16 clipped to its range (the
    excess, like the rounding, is left for the caller's residual)."""
    if not half:
        return values.astype(np.float32)
    limit = float(np.finfo(np.float16).max)
    clipped: npt.NDArray[np.floating[Any]] = np.clip(values, -limit, limit).astype(np.float16)
    return clipped


class Destination:
    """A FIFO of (rpc, message) to one address, sent by its own thread."""

    def __init__(self, name: str, dest_id: int, address: str, stub_factory: Callable[[Any], Any],
                 rpc_timeout: float, give_up_after: float,
                 on_down: Callable[[int, str], None], timers: Timers | None = None,
                 coalesce: bool = False, encoder: Encoder | None = None,
                 open_channel: Callable[[str], grpc.Channel] = grpc.insecure_channel,
                 on_rejected: Callable[[int, str, Any, str], None] | None = None,
                 half: bool = False) -> None:
        self.name = name
        self.dest_id = dest_id
        self.address = address
        self.channel = open_channel(address)  # credentials, token and sender key included
        # Connect (TCP, TLS) now rather than at the first message: one health check, whose
        # answer nobody waits for. (A connectivity watch would do it too, but a channel
        # closed while one runs takes 0.1-0.2 s to close.)
        self._connecting = health_pb2_grpc.HealthStub(self.channel).Check.future(
            health_pb2.HealthCheckRequest(service=LIVENESS), timeout=rpc_timeout)
        self.stub = stub_factory(self.channel)
        self.rpc_timeout = rpc_timeout
        self.give_up_after = give_up_after
        self.on_down = on_down
        self.on_rejected = on_rejected
        self.timers = timers if timers is not None else Timers()
        # Timer name: peers are summed together, the coordinator apart.
        self._kind = "coordinator" if dest_id < 0 else "peer"
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, Any]] = deque()
        self.coalesce = coalesce and encoder is not None
        self.encoder = encoder
        self.half = half                             # summed deltas travel as float16
        self._waiting: OutgoingDelta | None = None   # queued, not yet taken by the thread
        self._residual: OutgoingDelta | None = None  # float32 rounding of the last sum
        self.deltas_merged = 0
        self._closing = False
        self._busy = False
        self.down = False
        self.acked: dict[str, int] = {}
        self.seq = 0                                 # last seq this destination sent
        self.rejected = 0
        self.bytes_sent = 0
        self._thread = threading.Thread(target=self._run, name=f"send-{name}", daemon=True)
        self._thread.start()

    @property
    def residual(self) -> OutgoingDelta | None:
        """The float32 rounding of the last summed delta, owed to the next send or the final
        one (None: nothing owed)."""
        return self._residual

    def put(self, rpc: str, message: Any) -> None:
        """Queue ``stub.<rpc>(message)``; ignored once the destination is down."""
        with self._cond:
            if self.down or self._closing:
                return
            if rpc in _REPLACEABLE:
                for k, (queued, _) in enumerate(self._queue):
                    if queued == rpc:
                        self._queue[k] = (rpc, message)
                        return
            self._queue.append((rpc, message))
            self._cond.notify_all()

    def put_delta(self, delta: OutgoingDelta) -> None:
        """Queue a delta, or (coalescing) sum it into the one still waiting to be sent."""
        t0 = time.perf_counter()
        with self._cond:
            if self.down or self._closing:
                return
            if self.coalesce and self._waiting is not None and not (
                    delta.apart or self._waiting.apart):
                self._waiting.absorb(delta)
                if self._residual is not None:  # re-encoded anyway: the rounding goes along
                    self._waiting.absorb(self._residual)
                    self._residual = None
                self.deltas_merged += 1
                self.timers.add(f"coalesce:{self._kind}", time.perf_counter() - t0)
                return
            if self._residual is not None and delta.final:
                # The rounding of an earlier sum waits for the next sum or the final delta:
                # summed into every delta, it made each one a merge and a new encoding here
                # (about 2 ms a round for a dense delta of 47k weights) for ever after.
                residual, self._residual = self._residual, None
                residual.absorb(delta)
                delta = residual
            self._queue.append(("PushDelta", delta))
            if self.coalesce:
                self._waiting = delta  # (one apart takes nothing in: see above)
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (1 if self._busy else 0)

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued so far was sent (or the destination went down)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._queue or self._busy) and not self.down:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.2))
            return True

    def close(self, timeout: float) -> None:
        """Flush (bounded), stop the thread, close the channel."""
        self.flush(timeout)
        with self._cond:
            self._closing = True
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout=max(0.1, self.rpc_timeout))
        self._connecting.cancel()
        self.channel.close()

    def abandon(self) -> None:
        """Drop everything queued and stop at once (no flush): what is queued must not arrive."""
        with self._cond:
            self._closing = True
            self._queue.clear()
            self._waiting = self._residual = None
            self._cond.notify_all()
        self._connecting.cancel()
        self.channel.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing and not self._queue:
                    return
                rpc, message = self._queue.popleft()
                if message is self._waiting:
                    self._waiting = None  # from now on a new delta queues behind this one
                self._busy = True
            try:
                if isinstance(message, OutgoingDelta):
                    # Messages encoded here are this destination's own; others may be shared.
                    shared = message.messages is not None
                    for part in self._numbered(self._encode(message), copy=shared):
                        self._deliver(rpc, part)
                else:
                    self._deliver(rpc, message)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _encode(self, delta: OutgoingDelta) -> list[Any]:
        """The messages of ``delta``: as encoded, or its float32 sum (the rounding kept for
        the next delta; the last delta sends it right after itself)."""
        if delta.messages is not None:
            return delta.messages
        assert self.encoder is not None
        val32 = wire_values(delta.values, self.half)
        rest = delta.values - val32.astype(np.float64)
        left = np.flatnonzero(rest)
        final_now = delta.final and left.shape[0] == 0
        messages = self.encoder(delta.indices, val32, delta.round, final_now, delta.examples)
        if left.shape[0]:
            residual = OutgoingDelta(delta.round, delta.final, delta.examples,
                                     delta.indices[left], rest[left], merged=0)
            if delta.final:
                messages += self.encoder(residual.indices, residual.values.astype(np.float32),
                                         delta.round, True, delta.examples)
            else:
                with self._cond:
                    if self._waiting is not None and not self._waiting.apart:
                        self._waiting.absorb(residual)
                    elif self._residual is not None:
                        self._residual.absorb(residual)
                    else:
                        self._residual = residual
        _mark(messages, delta)
        return messages

    def _numbered(self, messages: list[Any], copy: bool) -> list[Any]:
        """``messages`` under this destination's next sequence numbers (a new seq at every
        part 0); ``copy``: number copies, since other destinations share these messages
        (0.2 ms per MiB)."""
        numbered = []
        for message in messages:
            if message.part == 0:
                self.seq += 1
            if copy:
                original, message = message, type(message)()
                message.CopyFrom(original)
            message.seq = self.seq
            numbered.append(message)
        return numbered

    def _deliver(self, rpc: str, message: Any) -> None:
        first_failure: float | None = None
        backoff = 0.05
        while True:
            with self._cond:
                if self._closing or self.down:
                    return
            t0 = time.perf_counter()
            try:
                getattr(self.stub, rpc)(message, timeout=self.rpc_timeout)
            except grpc.RpcError as exc:
                self.timers.add(f"rpc_failed:{rpc}:{self._kind}", time.perf_counter() - t0)
                with self._cond:
                    if self._closing:  # abandoned: the channel was closed under this call
                        return
                code = exc.code()
                if code not in _RETRYABLE:
                    self.rejected += 1
                    # Once is enough in the log: a dropped sender is rejected every time.
                    level = logging.ERROR if self.rejected == 1 else logging.DEBUG
                    log.log(level, "%s rejected %s: %s %s", self.name, rpc, code.name,
                            exc.details())
                    if self.on_rejected is not None:
                        self.on_rejected(self.dest_id, rpc, code, exc.details() or "")
                    return
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    # RESOURCE_EXHAUSTED: it answers but holds too much of ours already.
                    how = ("busy" if code == grpc.StatusCode.RESOURCE_EXHAUSTED
                           else "unreachable")
                    log.warning("%s at %s %s (%s); retrying for up to %.1fs", self.name,
                                self.address, how, code.name, self.give_up_after)
                if now - first_failure >= self.give_up_after:
                    self._mark_down(f"{code.name} for {now - first_failure:.1f}s")
                    return
                time.sleep(min(backoff, max(0.0, self.give_up_after - (now - first_failure))))
                backoff = min(backoff * 2, 1.0)
                continue
            self.timers.add(f"rpc:{rpc}:{self._kind}", time.perf_counter() - t0)
            self.acked[rpc] = self.acked.get(rpc, 0) + 1
            self.bytes_sent += message.ByteSize()
            return

    def _mark_down(self, why: str) -> None:
        with self._cond:
            if self.down:
                return
            self.down = True
            self._queue.clear()
            self._cond.notify_all()
        log.error("%s at %s is down: %s", self.name, self.address, why)
        self.on_down(self.dest_id, why)
