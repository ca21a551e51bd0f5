"""Outgoing messages of one worker: one FIFO queue and one thread per destination.

Training and exchange threads only enqueue; a slow or dead peer delays nobody else. A message
is retried (same seq: the receiver ignores duplicates) on UNAVAILABLE / DEADLINE_EXCEEDED until
``give_up_after`` seconds of failures, then the destination is declared down (callback) and
its queue is discarded. A rejection (INVALID_ARGUMENT, FAILED_PRECONDITION) is logged and the
message dropped: retrying cannot help.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from hogwild.worker.timing import Timers

log = logging.getLogger("hogwild.worker")

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNKNOWN}


class Destination:
    """A FIFO of (rpc, message) to one address, sent by its own thread."""

    def __init__(self, name: str, dest_id: int, address: str, stub_factory: Callable[[Any], Any],
                 rpc_timeout: float, give_up_after: float,
                 on_down: Callable[[int, str], None], timers: Timers | None = None) -> None:
        self.name = name
        self.dest_id = dest_id
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.stub = stub_factory(self.channel)
        self.rpc_timeout = rpc_timeout
        self.give_up_after = give_up_after
        self.on_down = on_down
        self.timers = timers if timers is not None else Timers()
        # Timer name: peers are summed together, the coordinator apart.
        self._kind = "coordinator" if dest_id < 0 else "peer"
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, Any]] = deque()
        self._closing = False
        self._busy = False
        self.down = False
        self.acked: dict[str, int] = {}
        self.rejected = 0
        self.bytes_sent = 0
        self._thread = threading.Thread(target=self._run, name=f"send-{name}", daemon=True)
        self._thread.start()

    def put(self, rpc: str, message: Any) -> None:
        """Queue ``stub.<rpc>(message)``; ignored once the destination is down."""
        with self._cond:
            if self.down or self._closing:
                return
            self._queue.append((rpc, message))
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
        self.channel.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing and not self._queue:
                    return
                rpc, message = self._queue.popleft()
                self._busy = True
            try:
                self._deliver(rpc, message)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

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
                code = exc.code()
                if code not in _RETRYABLE:
                    self.rejected += 1
                    # Once is enough in the log: a dropped sender is rejected every time.
                    level = logging.ERROR if self.rejected == 1 else logging.DEBUG
                    log.log(level, "%s rejected %s: %s %s", self.name, rpc, code.name,
                            exc.details())
                    return
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    log.warning("%s at %s unreachable (%s); retrying for up to %.1fs",
                                self.name, self.address, code.name, self.give_up_after)
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
