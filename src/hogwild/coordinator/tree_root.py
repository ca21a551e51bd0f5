"""Topology tree: the coordinator is the root and relays between its children as a star would.

Its children send it their subtrees' sums (applied to the global model by RunState, like any
delta) and each gets the sum of the other children's (:class:`StarRelay`, same sync barrier,
finals, keys and sender id). When a child dies, its live children re-attach here
(``live_children`` of the coordinator around the dead): they are adopted as soon as the
death is known, and what a dead child had sent is never relayed to its own subtree, which
contributed it.

A worker that registers again (restarted, or refused after a freeze) comes back as one more
point of this relay, a leaf of the coordinator configured as a star worker: its place in the
heap stays routed around (its old neighbours keep it dead, its old children stay adopted), so
no edge of the tree changes under way. It gets everybody's sums through the coordinator, and
everybody gets its deltas the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
import numpy as np
import numpy.typing as npt

from hogwild.coordinator.relay import _EMPTY, Sparse, StarRelay
from hogwild.coordinator.state import RunState
from hogwild.engine.sparse import merge_sparse
from hogwild.engine.tree import COORDINATOR, between, children, live_children
from hogwild.protocol.codec import DecodedDelta
from hogwild.worker.sender import OutgoingDelta

log = logging.getLogger("hogwild.coordinator")


class TreeRoot(StarRelay):
    """The root of the tree: a star relay over the coordinator's (live) children."""

    def __init__(self, state: RunState, workers: dict[int, str], dim: int, mode: str,
                 barrier_timeout: float, rpc_timeout: float, chunk_bytes: int,
                 open_channel: Callable[[int, str], grpc.Channel], fanout: int,
                 half: bool = False, period: float = 0.05, first_round: int = 1) -> None:
        self.fanout = fanout
        self.n = len(workers)
        self.addresses = dict(workers)
        top = {w: workers[w] for w in children(COORDINATOR, fanout, self.n)}
        super().__init__(state, top, dim, mode, barrier_timeout, rpc_timeout, chunk_bytes,
                         open_channel, half=half, period=period, first_round=first_round)

    def _adopt(self) -> None:
        """(Holding the relay's lock.) The live children of dead children are children now
        (a worker taken back counts as dead in the layout: its children stay here)."""
        dead = {r.worker_id for r in self.state.workers.values() if r.dead} | self.state.detached
        if not dead:
            return
        fresh = [c for c in live_children(COORDINATOR, self.fanout, self.n, dead)
                 if c not in self._pending]
        for c in fresh:
            self._pending[c] = _EMPTY
            self._round[c] = self._before_first
            self._final[c] = False
            self._examples[c] = 0
            log.warning("tree: worker %d re-attached to the coordinator", c)
        if fresh:
            # A new dict: closing and counting iterate the old one undisturbed.
            self.destinations = {**self.destinations, **{
                c: self._destination(c, self.addresses[c]) for c in fresh}}
            if self._sent_round > self._before_first:  # an aggregate went out already
                # An orphan may wait for a round the dead parent got from here and never
                # passed on (sync: its sender thread had it queued when it died; async: the
                # orphan's staleness bound), while this relay waits for the orphan's next
                # round or has nothing new to send: the round already sent is vouched for
                # to the orphan at once, empty (what the dead parent held is lost to its
                # subtree, as anything else it had not forwarded).
                for c in fresh:
                    self.destinations[c].put_delta(OutgoingDelta(
                        self._sent_round, False, sum(self._examples.values()), *_EMPTY))
                    self.aggregates += 1

    def offer(self, delta: DecodedDelta, complete: bool, version: int = 0) -> None:
        with self._cond:
            self._adopt()
        super().offer(delta, complete, version)

    def _live(self) -> list[int]:
        self._adopt()
        return super()._live()

    def _own_side(self, wid: int) -> list[Sparse]:
        """Its own pending sum and those of the dead workers on its heap path, whose sums
        held its subtree's contributions (also what a worker taken back had sent before it
        died). A worker taken back, a leaf now, has only its own, old and new."""
        detached = self.state.detached
        if wid in detached:
            return [self._pending[wid], *([self._ghosts[wid]] if wid in self._ghosts else [])]
        # A worker taken back is no longer on anybody's side: its new sums go to everyone.
        own = [p for s, p in self._pending.items()
               if s == wid or (s not in detached and between(s, wid, self.fanout) is not None)]
        return own + [g for x, g in self._ghosts.items()
                      if between(x, wid, self.fanout) is not None]

    def take_back(self, wid: int, first_round: int) -> tuple[int, npt.NDArray[np.float64]]:
        """A worker registered again: one more point of this relay (a leaf of the
        coordinator). What it sent before it died stays owed to all but its old subtree."""
        with self._cond:  # re-entered by the star relay's take_back, in one critical section
            self.state.detach(wid)
            old = self._pending.get(wid, _EMPTY)
            if old[0].size:
                self._ghosts[wid] = merge_sparse(*self._ghosts.get(wid, _EMPTY), *old)
            self._pending[wid] = _EMPTY
            self._examples.setdefault(wid, 0)
            return super().take_back(wid, first_round)
