"""Topology tree: the k-ary heap layout and the sums a node owes each of its tree neighbours.

Layout (k = ``tree_fanout``): the coordinator is the root; workers 0..k-1 are its children and
worker i's children are k(i+1) .. k(i+1)+k-1, so worker i's parent is ``i // k - 1`` (-1: the
coordinator). Every worker has one parent edge: n edges, depth about log_k(n).

When a worker dies, each of its live children re-attaches to its nearest live ancestor
(:func:`live_parent`; the coordinator at worst), computed by everyone from the layout and the
set of dead workers, so both ends of every new edge agree without a coordinator round-trip.

Routing is flooding on that tree: whatever a node learns from one neighbour (the sum that
neighbour's side of the tree produced) it owes to every other neighbour, and its own delta it
owes to all of them. On a tree this delivers every contribution to every node exactly once.
:class:`TreeLinks` keeps those debts per neighbour and says when each edge is due:

* sync: the message of round R goes to neighbour j once this node's own round-R delta is in
  and every other live neighbour has sent its round R (so it carries every contribution of
  rounds <= R from this side of the edge; an up-sum waits for the children, a down-sum for
  the parent and the siblings). One message per edge and direction per round: 2n in all.
* async: a sum goes on as soon as it arrives, and the own delta at every round boundary
  (a busy destination sums what queues behind it), so no hop waits for a round.
* the final message to j goes once this node has finished and every other neighbour sent its
  final (or was dropped): from then on nothing can arrive that j lacks.

No gRPC and no lock here: the worker node serialises access and moves the sums.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from hogwild.engine.sparse import merge_sparse

COORDINATOR = -1   # the root of the tree, as a parent index
# Sync: the messages sent to the parent that are kept until the parent's own messages say
# they went past it (see TreeLinks.retained). Two at most in a healthy run (the parent's round
# trails this node's by one at most); past this bound the oldest is let go, said once in the
# log and counted in ``retained_dropped``.
RETAINED_MAX = 8

log = logging.getLogger("hogwild.worker")

Sparse = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]


def parent(worker: int, k: int) -> int:
    """Worker ``worker``'s parent: a worker id, or -1 for the coordinator."""
    return worker // k - 1


def children(node: int, k: int, n: int) -> list[int]:
    """The children of ``node`` (a worker id, or -1 for the coordinator) among n workers."""
    first = k * (node + 1)
    return list(range(first, min(first + k, n)))


def depth(worker: int, k: int) -> int:
    """Edges between the coordinator and ``worker`` (1 for the coordinator's children)."""
    d = 1
    while (worker := parent(worker, k)) >= 0:
        d += 1
    return d


def height(n: int, k: int) -> int:
    """The depth of the deepest of n workers (0 without workers)."""
    return depth(n - 1, k) if n > 0 else 0


def live_parent(worker: int, k: int, dead: Iterable[int]) -> int:
    """The nearest ancestor of ``worker`` not in ``dead`` (-1: the coordinator)."""
    gone = set(dead)
    p = parent(worker, k)
    while p >= 0 and p in gone:
        p = parent(p, k)
    return p


def live_children(node: int, k: int, n: int, dead: Iterable[int]) -> list[int]:
    """The nearest descendants of ``node`` not in ``dead``: its children, a dead child
    replaced by its own live children (recursively), ascending."""
    gone = set(dead)
    found: list[int] = []
    todo = children(node, k, n)
    while todo:
        c = todo.pop()
        if c in gone:
            todo.extend(children(c, k, n))
        else:
            found.append(c)
    return sorted(found)


def ancestors(worker: int, k: int) -> list[int]:
    """The workers between ``worker`` and the coordinator, nearest first."""
    found = []
    while (worker := parent(worker, k)) >= 0:
        found.append(worker)
    return found


def between(a: int, b: int, k: int) -> list[int] | None:
    """The workers strictly between ``a`` and ``b`` on their heap path (-1 is the
    coordinator, everyone's ancestor) if one is an ancestor of the other; else None."""
    up_a, up_b = [*ancestors(a, k), -1] if a >= 0 else [], [*ancestors(b, k), -1] if b >= 0 else []
    if b in up_a:
        return up_a[:up_a.index(b)]
    if a in up_b:
        return up_b[:up_b.index(a)]
    return None


def same_side(me: int, a: int, b: int, k: int) -> bool:
    """Whether ``a`` and ``b`` (workers, or -1 for the coordinator) lie on the same side of
    ``me``: through its parent (both above it), or through one child (on one path below it).
    What came from one side is owed to the others only."""
    if a == b:
        return True
    up = [*ancestors(me, k), -1] if me >= 0 else []
    if a in up or b in up:
        return a in up and b in up
    return between(a, b, k) is not None and between(me, a, k) is not None


class _Status(Protocol):
    round: int

    @property
    def settled(self) -> bool: ...

    dropped: bool


@dataclass
class Flush:
    """One message due on an edge: what the node owes ``neighbour``, labelled ``round``."""

    neighbour: int
    round: int
    final: bool
    indices: npt.NDArray[np.int32]
    values: npt.NDArray[np.float64]


class TreeLinks:
    """The sums one node owes its tree neighbours and which edge is due when.

    ``neighbours`` are sender ids as the node's inbox knows them (the coordinator under its
    own sender id). Not thread-safe: the node holds a lock around it.
    """

    def __init__(self, neighbours: Iterable[int],
                 same_side: Callable[[int, int], bool] = operator.eq,
                 rounds_done: int = 0) -> None:
        """``rounds_done``: rounds every node holds already (a resumed run: the checkpoint's)."""
        self.same_side = same_side  # what a sender sent is not owed to its side
        self._owed: dict[int, list[tuple[npt.NDArray[np.int32], npt.NDArray[Any]]]] = {
            nbr: [] for nbr in neighbours}
        self.sent_round: dict[int, int] = dict.fromkeys(self._owed, rounds_done)
        self.closed: set[int] = set()    # final sent, or the neighbour was dropped
        # Sync: the parent (sender id) and the messages sent to it, (label, indices, values),
        # that no message of the parent vouches for yet. A parent's round-R message goes out
        # only once the root's round R did, which waited for the parent's own round R, sum
        # of this node's messages labelled <= R: those are past the parent then. Those not
        # are re-sent to the next parent if this one dies (see WorkerNode._tree_bury).
        self.parent: int | None = None
        self.retained: list[tuple[int, npt.NDArray[np.int32], npt.NDArray[np.float64]]] = []
        self.retained_dropped = 0

    @property
    def neighbours(self) -> list[int]:
        return list(self._owed)

    def adopt(self, nbr: int, like: Iterable[int]) -> None:
        """A new neighbour (it replaces the dead ones ``like`` on its side of the tree): it is
        owed what they were owed and never got."""
        chunks = [c for old in like for c in self._owed.get(old, [])]
        self._owed.setdefault(nbr, []).extend(chunks)
        self.sent_round.setdefault(nbr, 0)

    def remove(self, nbr: int) -> None:
        """A neighbour that died: nothing more is owed to it."""
        self._owed.pop(nbr, None)
        self.sent_round.pop(nbr, None)
        self.closed.discard(nbr)

    def own(self, indices: npt.NDArray[np.int32], values: npt.NDArray[Any]) -> None:
        """This node's own delta: owed to every neighbour."""
        self.received(None, indices, values)

    def received(self, sender: int | None, indices: npt.NDArray[np.int32],
                 values: npt.NDArray[Any]) -> None:
        """A sum from neighbour ``sender`` (or a neighbour that has died since): owed to every
        neighbour still open on another side."""
        if indices.shape[0] == 0:
            return
        for nbr, chunks in self._owed.items():
            if nbr not in self.closed and (sender is None or not self.same_side(nbr, sender)):
                chunks.append((indices, values))

    def owed(self, nbr: int) -> bool:
        return bool(self._owed.get(nbr))

    def take(self, nbr: int) -> Sparse:
        """What ``nbr`` is owed, summed (one sort of all the pieces), and forget it."""
        chunks, self._owed[nbr] = self._owed[nbr], []
        if not chunks:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64)
        idx = np.concatenate([c[0] for c in chunks]).astype(np.int32, copy=False)
        val = np.concatenate([np.asarray(c[1], dtype=np.float64) for c in chunks])
        return merge_sparse(idx, val, idx[:0], val[:0])

    def due(self, own_round: int, finished: bool, peers: Mapping[int, _Status],
            sync: bool) -> list[Flush]:
        """The messages due now (each edge's debt is taken). ``own_round``: the last round
        whose own delta is in; ``finished``: the final own delta is in; ``peers``: the inbox's
        view of every neighbour (round received complete, final, dropped)."""
        if sync and self.parent is not None and self.parent in peers:
            self.passed(peers[self.parent].round)
        out = []
        for nbr in self.neighbours:
            if nbr in self.closed:
                continue
            status = peers.get(nbr)
            if status is not None and status.dropped:
                self.closed.add(nbr)        # gone: nothing more goes to it
                self._owed[nbr] = []
                continue
            others = [peers[o] for o in self.neighbours if o != nbr and o in peers]
            final = finished and all(o.settled for o in others)
            if final:
                label = max(own_round, self.sent_round[nbr])
            elif sync:
                # Everything of rounds <= label from this side of the edge is in.
                bounds = [o.round for o in others if not o.settled]
                if not finished:
                    bounds.append(own_round)
                label = min(bounds)  # not empty: else the edge's final would be due
                if label <= self.sent_round[nbr]:
                    continue
            else:
                # async: every own round boundary; once finished, whatever arrived since
                label = max(own_round, self.sent_round[nbr])
                if finished and not self.owed(nbr):
                    continue
            idx, val = self.take(nbr)
            self.sent_round[nbr] = label
            if final:
                self.closed.add(nbr)
            if sync and nbr == self.parent:
                self._retain(label, idx, val)
            out.append(Flush(nbr, label, final, idx, val))
        return out

    def passed(self, parent_round: int) -> None:
        """Sync: the parent's messages vouch for its round ``parent_round``: what this node
        sent it labelled up to that round went past it (see ``retained``)."""
        self.retained = [r for r in self.retained if r[0] > parent_round]

    def _retain(self, label: int, idx: npt.NDArray[np.int32],
                val: npt.NDArray[np.float64]) -> None:
        self.retained.append((label, idx, val))
        if len(self.retained) > RETAINED_MAX:
            self.retained.pop(0)
            self.retained_dropped += 1
            if self.retained_dropped == 1:
                log.warning("tree: more than %d messages to the parent wait for it to vouch "
                            "for them; the oldest are no longer kept (lost if it dies now)",
                            RETAINED_MAX)

    def forward(self, own_round: int) -> list[Flush]:
        """async: whatever is owed now, to each open neighbour owed something (never final:
        finals wait for :meth:`due`)."""
        return [self.greet(nbr, own_round) for nbr in self.neighbours
                if nbr not in self.closed and self._owed[nbr]]

    def greet(self, nbr: int, own_round: int) -> Flush:
        """async: what ``nbr`` is owed now, labelled with this node's round (never final).
        Also the first message on a new edge, at once and even if nothing is owed: the round
        it vouches for lets a staleness bound at the other end go on (that end may be
        waiting for it while this node's own bound waits for that end: neither reaches a
        round boundary, where messages are otherwise due)."""
        idx, val = self.take(nbr)
        label = max(own_round, self.sent_round[nbr])
        self.sent_round[nbr] = label
        return Flush(nbr, label, False, idx, val)

    def settled(self, peers: Mapping[int, _Status]) -> bool:
        """Every neighbour sent its final (or was dropped) and got this node's final."""
        return all(nbr in self.closed and (nbr not in peers or peers[nbr].settled)
                   for nbr in self.neighbours)
