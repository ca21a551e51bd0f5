"""One worker's round sequence: apply, build, send, the barrier or the staleness gate, the final.

The cluster's worker (worker/roundloop.py) and the simulator's virtual workers (simulate.py)
both run this sequence; they differ only in how deltas travel and how they wait. The driver
talks to the network through two narrow ends:

* an :class:`Inbox`: the deltas that arrived and are not applied yet, and what is known of
  each peer's rounds and finals (``engine.rules.PeerView``);
* an :data:`Outbox`: "send this delta of round r (final or not)".

It never blocks. Each call returns what the caller does next (:class:`Next`): train the next
round, wait (for the sync barrier, or for a peer too far behind in async mode) and call
:meth:`RoundDriver.on_arrival` when something arrives, or send the final delta
(:meth:`RoundDriver.finish`). The simulator acts on it from its event loop; the cluster's
exchange thread blocks on its inbox where the driver says wait, with its own deadlines.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from hogwild.engine.round import Indices, RoundEngine, Values
from hogwild.engine.rules import PeerView, barrier_ready, lag, may_start

Part = tuple[Indices, Values]


class Inbox(Protocol):
    """What arrived from the network, as the driver sees it."""

    def peers(self) -> Mapping[int, PeerView]:
        """Each peer's highest complete round and whether it is settled."""

    def take(self) -> Sequence[Part]:
        """The deltas arrived and not yet applied, oldest first (removed from the inbox)."""


# Where the worker's own deltas go: send(round, final, indices, values), ``final`` for the
# last one (everything not sent yet).
Outbox = Callable[[int, bool, Indices, Values], None]


class Next(enum.Enum):
    """What the caller does after a driver call."""

    TRAIN = "train"        # start the next round
    BARRIER = "barrier"    # sync: wait for the peers' deltas of this round
    GATED = "gated"        # async: wait for a peer more than `staleness` rounds behind
    FINISH = "finish"      # the last round is done: call finish()
    DONE = "done"          # the final delta is sent

    @property
    def waiting(self) -> bool:
        return self in (Next.BARRIER, Next.GATED)


Timed = Callable[[str, float, int], None]


class RoundDriver:
    """The round sequence of one worker (not thread-safe: one caller at a time)."""

    def __init__(self, engine: RoundEngine, inbox: Inbox, outbox: Outbox, first_round: int,
                 max_rounds: int, timed: Timed | None = None) -> None:
        self.engine = engine
        self.inbox = inbox
        self.outbox = outbox
        self.max_rounds = max_rounds
        self.round = first_round - 1    # the last round trained (and sent)
        self.open = first_round         # sync: the highest round that may start
        self.state = Next.TRAIN
        self.max_staleness = 0
        self.timed = timed              # where the time goes (the cluster's timers)

    @property
    def applies_at_once(self) -> bool:
        """Whether an arriving delta is applied at once rather than at the next round
        boundary (async, unless a tree relays it: that waits for the boundary)."""
        rules = self.engine.rules
        return rules.mode == "async" and rules.topology != "tree"

    # ------------------------------------------------------------------ the sequence

    def on_round_trained(self, round_: int) -> Next:
        """Round ``round_`` is trained: apply what arrived, send the own delta, then go on.
        Raises ModelNotFinite (nothing is sent) when the weights diverged."""
        self.end_round(round_)
        return self.advance()

    def end_round(self, round_: int) -> None:
        """The first half of :meth:`on_round_trained`: apply what arrived, send own delta."""
        self.round = round_
        self.state = Next.TRAIN
        self.apply_arrived()
        self.max_staleness = max(self.max_staleness, lag(round_, self.inbox.peers()))
        self.send_own(round_, final=False)

    def on_arrival(self) -> Next | None:
        """Something arrived (a delta, a peer's round or final, a drop): apply it where
        deltas are applied at once; if this worker was waiting, go on (None: it was not)."""
        if self.applies_at_once:
            self.apply_arrived()
        return self.advance() if self.state.waiting else None

    def advance(self) -> Next:
        """Past the barrier (sync), to the end, or past the staleness gate (async)."""
        r = self.round
        if self.engine.rules.mode == "sync":
            if not barrier_ready(r, self.inbox.peers()):
                self.state = Next.BARRIER
                return self.state
            self.apply_arrived()
            self.open = r + 1
        if r >= self.max_rounds:
            self.state = Next.FINISH
        elif self.may_start(r + 1):
            self.state = Next.TRAIN
        else:
            self.state = Next.GATED
        return self.state

    def may_start(self, round_: int, peers: Mapping[int, PeerView] | None = None) -> bool:
        """Whether round ``round_`` may start now (the training threads' gate): sync, once
        the barrier before it is passed; async, unless a peer lags too far (``peers``: the
        inbox's, unless given)."""
        if self.engine.rules.mode == "sync":
            return round_ <= self.open
        return may_start(self.engine.rules, round_,
                         self.inbox.peers() if peers is None else peers)

    def unblocked(self, peers: Mapping[int, PeerView]) -> bool:
        """Whether what this worker waits for (the barrier, the gate) holds for ``peers``:
        a blocking caller waits on its inbox for this, then calls :meth:`on_arrival`."""
        if self.state is Next.BARRIER:
            return barrier_ready(self.round, peers)
        if self.state is Next.GATED:
            return may_start(self.engine.rules, self.round + 1, peers)
        return True

    def finish(self) -> Next:
        """Send the final delta (everything not sent yet) of the last round trained."""
        self.apply_arrived()
        self.send_own(self.round, final=True)
        self.state = Next.DONE
        return self.state

    def peers_settled(self, peers: Mapping[int, PeerView] | None = None) -> bool:
        """Every peer finished or was dropped: nothing more will arrive to wait for."""
        view = self.inbox.peers() if peers is None else peers
        return all(p.settled for p in view.values())

    # ------------------------------------------------------------------ the steps

    def apply_arrived(self) -> int:
        """Apply the deltas that arrived; returns how many."""
        parts = self.inbox.take()
        if parts:
            t0 = time.perf_counter()
            self.engine.apply(parts)
            if self.timed is not None:
                self.timed("apply", time.perf_counter() - t0, len(parts))
        self.engine.settle(self.inbox.peers())
        return len(parts)

    def send_own(self, round_: int, final: bool) -> None:
        """Build the delta of own changes of ``round_`` and hand it to the outbox."""
        t0 = time.perf_counter()
        indices, values = self.engine.build(round_, final, self.inbox.peers)
        if self.timed is not None:
            self.timed("build_delta", time.perf_counter() - t0, 1)
        self.outbox(round_, final, indices, values)
