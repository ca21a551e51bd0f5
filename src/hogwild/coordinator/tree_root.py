"""Topology tree: the coordinator is the root and relays between its children as a star would.

Its children send it their subtrees' sums (applied to the global model by RunState, like any
delta) and each gets the sum of the other children's (:class:`StarRelay`, same sync barrier,
finals, keys and sender id). When a child dies, its live children re-attach here
(``live_children`` of the coordinator around the dead): they are adopted as soon as the
death is known, and what a dead child had sent is never relayed to its own subtree, which
contributed it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from hogwild.coordinator.relay import _EMPTY, StarRelay
from hogwild.coordinator.state import RunState
from hogwild.protocol.codec import DecodedDelta
from hogwild.worker.tree import COORDINATOR, between, children, live_children

log = logging.getLogger("hogwild.coordinator")


class TreeRoot(StarRelay):
    """The root of the tree: a star relay over the coordinator's (live) children."""

    def __init__(self, state: RunState, workers: dict[int, str], dim: int, mode: str,
                 barrier_timeout: float, rpc_timeout: float, chunk_bytes: int,
                 open_channel: Callable[[int, str], grpc.Channel], fanout: int,
                 half: bool = False, period: float = 0.05) -> None:
        self.fanout = fanout
        self.n = len(workers)
        self.addresses = dict(workers)
        top = {w: workers[w] for w in children(COORDINATOR, fanout, self.n)}
        super().__init__(state, top, dim, mode, barrier_timeout, rpc_timeout, chunk_bytes,
                         open_channel, half=half, period=period)

    def _adopt(self) -> None:
        """(Holding the relay's lock.) The live children of dead children are children now."""
        dead = {r.worker_id for r in self.state.workers.values() if r.dead}
        if not dead:
            return
        fresh = [c for c in live_children(COORDINATOR, self.fanout, self.n, dead)
                 if c not in self._pending]
        for c in fresh:
            self._pending[c] = _EMPTY
            self._round[c] = 0
            self._final[c] = False
            self._examples[c] = 0
            log.warning("tree: worker %d re-attached to the coordinator", c)
        if fresh:
            # A new dict: closing and counting iterate the old one undisturbed.
            self.destinations = {**self.destinations, **{
                c: self._destination(c, self.addresses[c]) for c in fresh}}

    def offer(self, delta: DecodedDelta, complete: bool, version: int = 0) -> None:
        with self._cond:
            self._adopt()
        super().offer(delta, complete, version)

    def _live(self) -> list[int]:
        self._adopt()
        return super()._live()

    def _own_side(self, wid: int) -> list[int]:
        """Its own pending sum and those of the dead workers on its heap path, whose sums
        held its subtree's contributions."""
        return [s for s in self._pending
                if s == wid or between(s, wid, self.fanout) is not None]
