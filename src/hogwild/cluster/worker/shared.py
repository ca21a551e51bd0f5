"""A worker's shared locks, events and progress counters, handed to the roles that use them."""

from __future__ import annotations

import dataclasses
import threading


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
