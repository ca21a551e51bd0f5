"""A worker's shared locks, events, progress counters and stop state, handed to the roles that use them."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("hogwild.worker")


@dataclasses.dataclass(eq=False)
class Signals:
    """The locks and events the worker's roles share (never replaced during a node's life)."""

    # Guards the node's phase and its registration and run fields; every role waits on it
    # for a phase.
    cond: threading.Condition = dataclasses.field(default_factory=threading.Condition)
    # One exchange (roundloop.py), or one peer joining (announcements.py), or one tree
    # re-attachment (tree_relay.py), at a time.
    exchange_lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    # Guards the topology tree's links: RPC threads owe each arriving sum on as they accept
    # it (so a neighbour's final is never seen before what it vouches for is owed on), the
    # exchange thread takes what is due. Taken after exchange_lock, never before.
    tree_lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    started: threading.Event = dataclasses.field(default_factory=threading.Event)
    stop_requested: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    state_served: threading.Event = dataclasses.field(default_factory=threading.Event)


@dataclasses.dataclass(eq=False)
class Counters:
    """What the worker has done so far: reported to the coordinator and in its final state."""

    rounds: int = 0
    examples: int = 0
    deltas_sent: int = 0
    max_staleness: int = 0


class Ending:
    """Why and how the worker stops, set by whichever role sees the reason first: a Stop,
    SIGTERM, the last round, a failure, or having to register again."""

    def __init__(self, signals: Signals, wake: Callable[[], None]) -> None:
        self.signals = signals
        self.wake = wake  # wakes whoever waits on the inbox (configure replaces the inbox)
        self.stop_reason = ""
        self.leaving = False               # SIGTERM: finish without waiting for peers
        self.ended_by_coordinator = False  # a Stop (not a hand-over): the run is over
        self.fatal: str | None = None      # a failure the exchange thread raises
        # Why this worker must register again (the coordinator was lost, or its peers dropped
        # it while it was stalled); None while it is a member of the run.
        self.rejoin_reason: str | None = None
        self.abandoned = False             # leaving without sending anything more

    def request_stop(self, reason: str, leave: bool = False) -> None:
        """Finish at the next round boundary (Stop RPC, max rounds, SIGTERM with leave=True)."""
        if leave:
            self.leaving = True
        if not self.signals.stop_requested.is_set():
            self.stop_reason = reason
            log.info("stop requested: %s", reason)
        self.signals.stop_requested.set()
        with self.signals.cond:
            self.signals.cond.notify_all()
        self.wake()

    def leave_to_rejoin(self, reason: str) -> None:
        """Stop at once without sending anything more; serve() then registers again."""
        if self.rejoin_reason is not None:
            return
        self.rejoin_reason = reason
        self.abandoned = True
        log.warning("leaving the run to register again: %s", reason)
        self.request_stop(reason, leave=True)
