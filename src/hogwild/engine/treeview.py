"""Topology tree: what crossed each edge, summed, so that an orphan is brought level with the global model.

When a worker dies, each of its children (an *orphan*) re-attaches to its nearest live
ancestor P. Through the dead worker the orphan had got some of the world's contributions
and not others: what P sent the dead one and it never passed down, what its other children
sent it and it passed up but not down, and (two dead levels up) anything of the kind above
it. Counting messages cannot tell those apart; sums can:

* P keeps, per child edge, the sum of everything that crossed it: what P sent down it and
  what P applied from it (:class:`EdgeSums`). Everything the dead subtree contributed that
  reached the rest of the world went up that edge; everything the rest of the world
  contributed that reached the dead subtree went down it. So ``X`` = that sum is the dead
  edge's whole world, each contribution once, and ``k``, the orphan's own count carried by
  the dead edge's last message up, says which of the orphan's own messages X holds.
* The orphan keeps one running sum: its own messages up plus everything it applied from
  its parents (:class:`OrphanView`). When its parent dies it freezes that sum and the own
  messages not yet vouched for. Once P's X arrives (one message, marked ``resync``), the
  parent side of its model should be X less its own messages 1..k; it holds the frozen
  parent-side sum, so it applies the difference

      delta = X - own(1..k) - parent side = X - frozen + own(k+1..)

  and owes it to its own children, like any message from its parent. What reached it
  through the dead worker but not the rest of the world (the dead worker's own last work)
  is taken out again; what the dead worker's other children sent again to P (their re-sent
  messages, not held by P) reaches it through P as for anyone.

Sync runs do the same, with rounds for counts: the dead edge's sums up held the orphan's
messages labelled up to the last round heard from the dead one, and the resync is labelled
with the last round sent to it, which it vouches for.

This costs one model-sized float64 vector per child edge at a parent (the coordinator
included) and one at every worker, in tree runs; the catch-up is one message of at most the
model's size per orphan. There is no window of kept messages to fall out of.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger("hogwild.worker")

Sparse = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]


# One of a node's own messages up: (its count on the edge, async; its round, sync), sum.
OwnMessage = tuple[int, npt.NDArray[np.int32], npt.NDArray[np.float64]]


def own_part(cut: int, sync: bool) -> str:
    """How a resync's cut reads in the log."""
    return f"messages of rounds up to {cut}" if sync else f"messages 1-{cut}"


def sparse_of(dense: npt.NDArray[np.float64]) -> Sparse:
    """The non-zero entries of ``dense`` as (ascending int32 indices, float64 values)."""
    idx = np.flatnonzero(dense).astype(np.int32)
    return idx, dense[idx].astype(np.float64, copy=True)


def _add(into: npt.NDArray[np.float64], indices: npt.NDArray[Any],
         values: npt.NDArray[Any]) -> None:
    # Received indices are range-checked, not checked unique: add.at sums repeats as the
    # model's own apply does.
    if indices.shape[0]:
        np.add.at(into, indices, np.asarray(values, dtype=np.float64))


class EdgeSums:
    """Per child edge, the sum of everything that crossed it, both ways (float64).
    Thread-safe: at the coordinator the state adds what came up while the relay adds what
    went down."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._sums: dict[int, npt.NDArray[np.float64]] = {}
        self._lock = threading.Lock()

    def add(self, edge: int, indices: npt.NDArray[Any], values: npt.NDArray[Any]) -> None:
        with self._lock:
            s = self._sums.get(edge)
            if s is None:
                s = self._sums[edge] = np.zeros(self.dim, dtype=np.float64)
            _add(s, indices, values)

    def world(self, edge: int) -> Sparse:
        """Everything that crossed ``edge`` (the resync message for its orphans)."""
        with self._lock:
            s = self._sums.get(edge)
            return sparse_of(s) if s is not None else (
                np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64))

    def forget(self, edge: int) -> None:
        with self._lock:
            self._sums.pop(edge, None)


@dataclass
class Resync:
    """What a parent sends an orphan adopted around its dead child ``dead``: ``world``,
    everything that crossed the edge to the dead one, and ``cut``: the orphan's own
    messages up to it are in ``world`` (async: its count the dead edge's messages up
    carried; sync: the last round heard from the dead, whose sums up held the orphan's
    messages labelled up to it)."""

    dead: int
    cut: int
    world: Sparse


class OrphanView:
    """A worker's running sum of its own messages up and what it applied from its parents,
    and, once its parent died, that sum frozen until the new parent's resync arrives."""

    def __init__(self, dim: int) -> None:
        self.sum = np.zeros(dim, dtype=np.float64)
        self._frozen: tuple[npt.NDArray[np.float64], list[OwnMessage], int | None] | None = None
        self.lost = 0      # own messages past the cut let go unvouched: lost everywhere

    def add(self, indices: npt.NDArray[Any], values: npt.NDArray[Any]) -> None:
        """An own message up, or a message from the parent (as applied)."""
        _add(self.sum, indices, values)

    def freeze(self, unvouched: Sequence[OwnMessage], sent_up: int | None) -> None:
        """The parent died: keep the sum as it is now, with the own messages up not yet
        vouched for (the new parent's cut may fall among them) and, async, the count of own
        messages sent so far (they are numbered without gaps: one missing among them was let
        go). A later death replaces it: the next parent's world holds whatever the one
        before would have sent."""
        self._frozen = (self.sum.copy(), list(unvouched), sent_up)

    def level(self, cut: int, world: Iterable[tuple[npt.NDArray[np.int32], npt.NDArray[Any]]]
              ) -> Sparse | None:
        """The change that brings the parent side of this worker's model level with a
        resync's ``world`` (its parts) and ``cut``; None if nothing is frozen (not an
        orphan: the caller applies nothing). Pure: :meth:`settle` commits it."""
        if self._frozen is None:
            return None
        frozen, unvouched, sent_up = self._frozen
        delta = -frozen
        for idx, val in world:
            _add(delta, idx, val)
        held = set()
        for index, indices, values in unvouched:
            if cut < index and (sent_up is None or index <= sent_up):
                _add(delta, indices, values)
                held.add(index)
        missing = 0 if sent_up is None else sent_up - cut - len(held)
        if missing > 0:
            # Let go past the bound, never vouched for and not in the dead edge's sums: in
            # no model but this one's, which the difference now leaves them out of too.
            self.lost += missing
            log.warning("tree: %d own message(s) to the dead parent were let go unconfirmed "
                        "and never reached the new parent: lost, here as in the global model",
                        missing)
        return sparse_of(delta)

    def settle(self) -> None:
        """The resync was applied: nothing is frozen any more."""
        self._frozen = None
