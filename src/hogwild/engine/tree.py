"""Topology tree: the sums a node owes each of its tree neighbours (the layout is treeshape's).

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
from hogwild.engine.treeview import EdgeSums, OrphanView, Resync, own_part

# Sync: the messages sent to the parent that are kept until the parent's own messages say
# they went past it (see TreeLinks.retained). Two at most in a healthy run (the parent's round
# trails this node's by one at most); past this bound the oldest is let go, said once in the
# log and counted in ``retained_dropped``.
RETAINED_MAX = 8

# Async: a worker's messages to its parent are kept until the coordinator's applied counts
# (carried down in every message from the parent) cover them, for at least the staleness
# bound plus this many rounds (or this many rounds when unbounded), and beyond that while
# they hold no more than ASYNC_KEEP_BYTES; past both the oldest is let go, said once in the
# log and counted in ``retained_dropped``. (A round count alone lets go of messages whenever
# a busy coordinator's applied counts trail by more rounds than that, as on a loaded
# machine; they are lost if the parent then dies.)
ASYNC_SLACK_ROUNDS = 8
ASYNC_KEEP_BYTES = 64 << 20

log = logging.getLogger("hogwild.worker")

Sparse = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]


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
    # Async: to the parent, per origin the messages this one holds with the earlier ones on
    # the edge (this node's own count included); to a child, the coordinator's applied counts.
    covers: dict[int, int] | None = None
    applied: dict[int, int] | None = None
    # To a child adopted around a dead one, the resync (engine/treeview.py): which of the
    # child's own messages the dead edge's world holds; its values are that world.
    resync_cut: int | None = None


@dataclass
class Unconfirmed:
    """Async: one message this node sent its parent, not yet covered by the coordinator's
    applied count of this node (re-sent to the next parent if the parent dies)."""

    index: int              # this node's own count of messages to its parents, 1-based
    round: int
    covers: dict[int, int]
    indices: npt.NDArray[np.int32]
    values: npt.NDArray[np.float64]


def merge_counts(into: dict[int, int], counts: Iterable[tuple[int, int]]) -> None:
    """Per origin, the larger of two counts (counts only grow along an edge)."""
    for origin, count in counts:
        if count > into.get(origin, 0):
            into[origin] = count


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
        # are re-sent to the next parent if this one dies (see TreeRelay.bury).
        self.parent: int | None = None
        self.retained: list[tuple[int, npt.NDArray[np.int32], npt.NDArray[np.float64]]] = []
        self.retained_dropped = 0
        # Sync, per child: the last round heard from it; per child adopted around a dead
        # one, the last round heard from the dead (its re-sent messages labelled up to it
        # reached here through the dead: known, neither applied nor owed on again).
        self._heard: dict[int, int] = {}
        self.cuts: dict[int, int] = {}
        self.resent_known = 0     # re-sent messages taken as known (held through the dead)
        # Async, per origin worker: ``covers``, how many of its messages to its parent what
        # this node sent or owes its parent holds (from its children's messages, and its own
        # count ``me``); ``applied``, how many the coordinator applied, last heard from the
        # parent; ``unconfirmed``, this node's messages to its parent not yet applied there.
        # A re-sent message whose own count is covered here already is not applied again.
        self.me: int | None = None
        self.keep_rounds: int | None = None  # async: see ASYNC_SLACK_ROUNDS
        self.sent_up = 0
        self.covers: dict[int, int] = {}
        self.applied: dict[int, int] = {}
        self.unconfirmed: list[Unconfirmed] = []
        self.resent_applied = 0   # async: re-sent messages from a child applied here
        # Levelling orphans (engine/treeview.py, from :meth:`track`): per child edge the sum
        # of what crossed it and (async) the counts its messages up carried (an adopted edge
        # starts with the dead one's: its resync holds what that one did); this node's own
        # sum of its messages up and what it applied from its parents; the resyncs due to
        # children adopted around a dead one.
        self.edges: EdgeSums | None = None
        self.view: OrphanView | None = None
        self._edge_covers: dict[int, dict[int, int]] = {}
        self.resyncs: dict[int, Resync] = {}
        self.caught_up = 0        # resyncs sent to orphans

    @property
    def neighbours(self) -> list[int]:
        return list(self._owed)

    def adopt(self, nbr: int, like: Iterable[int], orphan: bool = False,
              sync: bool = True) -> None:
        """A new neighbour (it replaces the dead ones ``like`` on its side of the tree): it is
        owed what they were owed and never got. ``orphan``: a new child in place of a dead
        child, sent a resync (:meth:`take_resync`): everything that crossed the dead one's
        edge, with the part of it that is the orphan's own (sync: its messages labelled up
        to the last round heard from the dead, which are known here if it sends them again;
        async: its count on that edge). Sync, the new edge's labels go on from the dead
        one's: the resync vouches for the rounds sent to it, and what it was owed since is
        of later rounds."""
        like = list(like)
        chunks = [c for old in like for c in self._owed.get(old, [])]
        self._owed.setdefault(nbr, []).extend(chunks)
        self.sent_round.setdefault(nbr, 0)
        if not orphan or len(like) != 1 or self.edges is None:
            return
        x = like[0]
        if sync:
            # An edge adopted around an earlier death holds what that one's sums held.
            cut = self.cuts[nbr] = max(self._heard.get(x, 0), self.cuts.get(x, 0))
            self.sent_round[nbr] = max(self.sent_round[nbr], self.sent_round.get(x, 0))
        else:
            seen = self._edge_covers.get(x, {})
            cut = seen.get(nbr, 0)
            self._edge_covers[nbr] = dict(seen)
        self.resyncs[nbr] = Resync(x, cut, self.edges.world(x))

    def known(self, sender: int, label: int) -> bool:
        """Sync: whether a message from ``sender`` labelled ``label`` is one this node holds
        already: an orphan's re-sent message that its dead parent had passed on here (its
        round is at most the last one heard from the dead). Not to be applied nor owed on."""
        cut = self.cuts.get(sender)
        return cut is not None and label <= cut

    def remove(self, nbr: int) -> None:
        """A neighbour that died: nothing more is owed to it."""
        self._owed.pop(nbr, None)
        self._heard.pop(nbr, None)
        self.cuts.pop(nbr, None)
        self.resyncs.pop(nbr, None)
        self._edge_covers.pop(nbr, None)
        if self.edges is not None:
            self.edges.forget(nbr)
        self.sent_round.pop(nbr, None)
        self.closed.discard(nbr)

    def own(self, indices: npt.NDArray[np.int32], values: npt.NDArray[Any]) -> None:
        """This node's own delta: owed to every neighbour."""
        self.received(None, indices, values)

    def received(self, sender: int | None, indices: npt.NDArray[np.int32],
                 values: npt.NDArray[Any], label: int | None = None) -> None:
        """A sum from neighbour ``sender`` (or a neighbour that has died since): owed to every
        neighbour still open on another side. ``label``: its round (sync: a child's last
        one is the cut of its orphans, see :meth:`adopt`)."""
        if label is not None and sender is not None and sender != self.parent:
            self._heard[sender] = max(self._heard.get(sender, 0), label)
        if sender is not None and sender == self.parent and self.view is not None:
            self.view.add(indices, values)
        elif sender is not None and self.edges is not None:
            self.edges.add(sender, indices, values)
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
            out.append(self._book(Flush(nbr, label, final, idx, val), sync))
        return out

    def _book(self, f: Flush, sync: bool) -> Flush:
        """A message goes into its edge's sum (engine/treeview.py). Async: one to the parent
        is counted, labelled with what it covers and kept until the coordinator applied it;
        one to a child carries the applied counts."""
        if f.neighbour == self.parent:
            if self.view is not None:
                self.view.add(f.indices, f.values)
        elif self.edges is not None:
            self.edges.add(f.neighbour, f.indices, f.values)
        if sync or self.me is None:
            return f
        if f.neighbour == self.parent:
            self.sent_up += 1
            self.covers[self.me] = self.sent_up
            f.covers = dict(self.covers)
            self.unconfirmed.append(Unconfirmed(self.sent_up, f.round, f.covers, f.indices,
                                                np.asarray(f.values, dtype=np.float64)))
            self._bound(f.round)
            if f.final:
                log.info("tree: final message to the parent: %d message(s) up in all",
                         self.sent_up)
        else:
            f.applied = dict(self.applied)
        return f

    def _bound(self, newest: int) -> None:
        """Async: let go of the messages kept past the bound (see ASYNC_SLACK_ROUNDS and
        ASYNC_KEEP_BYTES)."""
        keep = (self.keep_rounds or 0) + ASYNC_SLACK_ROUNDS
        if not self.unconfirmed or self.unconfirmed[0].round >= newest - keep:
            return  # (a healthy run: the sizes are not even added up)
        held = sum(u.indices.nbytes + u.values.nbytes for u in self.unconfirmed)
        while (self.unconfirmed and self.unconfirmed[0].round < newest - keep
               and held > ASYNC_KEEP_BYTES):
            gone = self.unconfirmed.pop(0)
            held -= gone.indices.nbytes + gone.values.nbytes
            self.retained_dropped += 1
            if self.retained_dropped == 1:
                log.warning("tree: messages to the parent older than %d rounds and over %d "
                            "MiB are not yet applied by the coordinator; the oldest are no "
                            "longer kept (lost if the parent dies now)", keep,
                            ASYNC_KEEP_BYTES >> 20)

    def heard(self, sender: int, covers: Iterable[tuple[int, int]],
              applied: Iterable[tuple[int, int]]) -> None:
        """Async: the last part of a message from ``sender`` arrived (and is owed on under
        the same lock): a child's counts are held here now (and on its edge); the parent's
        says what the coordinator applied (this node's messages it covers are let go)."""
        if sender == self.parent:
            merge_counts(self.applied, applied)
            done = self.applied.get(self.me, 0) if self.me is not None else 0
            self.unconfirmed = [u for u in self.unconfirmed if u.index > done]
        else:
            covers = list(covers)
            merge_counts(self.covers, covers)
            merge_counts(self._edge_covers.setdefault(sender, {}), covers)

    def held(self, sender: int, covers: Iterable[tuple[int, int]]) -> bool:
        """Async: whether a message re-sent by ``sender`` (a child whose parent died) is
        held here already: the dead parent passed it on (its own count is covered)."""
        count = dict(covers).get(sender, 0)
        return 0 < count <= self.covers.get(sender, 0)

    def track(self, dim: int) -> None:
        """Keep the sums that level an orphan with the global model (see
        engine/treeview.py): one model-sized vector per child edge and one of its own."""
        self.edges = EdgeSums(dim)
        self.view = OrphanView(dim)

    def orphaned(self, sync: bool) -> None:
        """The parent died (sync: once what it vouched for is let go): freeze this node's
        sum until the new parent's resync (:meth:`OrphanView.level`) says what the parent
        side of its model should be, with this node's messages up that may not be in it."""
        if self.view is None:
            return
        if sync:
            self.view.freeze(self.retained, None)
        else:
            self.view.freeze([(u.index, u.indices, u.values) for u in self.unconfirmed],
                             self.sent_up)

    def take_resync(self, nbr: int, own_round: int, sync: bool) -> Flush | None:
        """The resync due to ``nbr``, adopted around a dead child (sent apart, as the first
        message on the new edge, after an async greeting); None if none is due. Sync, it is
        labelled with the last round sent to the dead: it vouches for those."""
        r = self.resyncs.pop(nbr, None)
        if r is None or nbr not in self._owed or nbr in self.closed:
            return None
        self.caught_up += 1
        log.info("tree: worker %d adopted around dead worker %d: sent it everything that "
                 "crossed that edge (%d entries; its own %s among them)", nbr, r.dead,
                 r.world[0].shape[0], own_part(r.cut, sync))
        label = self.sent_round[nbr] if sync else max(own_round, self.sent_round[nbr])
        self.sent_round[nbr] = label
        return self._book(Flush(nbr, label, False, *r.world, resync_cut=r.cut), sync)

    def resend(self) -> list[Unconfirmed]:
        """Async, the parent died: this node's messages the coordinator has not applied,
        oldest first (kept until it has: the next parent may die too)."""
        return list(self.unconfirmed)

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
        return self._book(Flush(nbr, label, False, idx, val), False)

    def settled(self, peers: Mapping[int, _Status]) -> bool:
        """Every neighbour sent its final (or was dropped) and got this node's final."""
        return all(nbr in self.closed and (nbr not in peers or peers[nbr].settled)
                   for nbr in self.neighbours)


class AppliedCounts:
    """Async, at the coordinator: per origin worker, which of its messages up the global
    model holds, as disjoint ranges of its counts (1-based, inclusive). Kept by RunState
    under its lock, in the critical section that applies a message: a re-sent message is
    taken as held and the counts of an applied one are recorded atomically with the apply,
    so no message of a dead parent can slip in between and get summed twice."""

    def __init__(self) -> None:
        self.ranges: dict[int, list[tuple[int, int]]] = {}

        # Per sender, the largest count of each origin its messages carried: a message
        # holds, per origin, the counts above the last one its edge carried.
        self._edge: dict[int, dict[int, int]] = {}
        self.skipped: set[tuple[int, int, int]] = set()   # (sender, seq, part) held already

    def highest(self, origin: int) -> int:
        spans = self.ranges.get(origin)
        return spans[-1][1] if spans else 0

    def holds(self, sender: int, covers: Iterable[tuple[int, int]]) -> bool:
        """Whether the message of ``sender`` with these counts is in the model already
        (its sender's own count is)."""
        count = dict(covers).get(sender, 0)
        return count > 0 and any(lo <= count <= hi for lo, hi in self.ranges.get(sender, ()))

    def take(self, sender: int, seq: int, part: int, parts: int,
             covers: Iterable[tuple[int, int]], resent: bool, known: bool) -> bool:
        """Part ``part`` of ``parts`` of a message of ``sender`` goes in: True if it is held
        already (re-sent, its count in the model: counted, not summed, noted in
        :attr:`skipped`), else ``known``; the message's counts are recorded at its last part."""
        covers = list(covers)
        if resent and self.holds(sender, covers):
            known = True
            self.skipped.add((sender, seq, part))
        if part == parts - 1:
            self.record(sender, covers, not known, resent)
        return known

    def take_skipped(self, key: tuple[int, int, int]) -> bool:
        """Whether :meth:`take` took part ``key`` (sender, seq, part) of a re-sent message
        as held already, not summed (said once per part)."""
        if key not in self.skipped:
            return False
        self.skipped.discard(key)
        return True

    def edge_counts(self, sender: int) -> dict[int, int]:
        """Per origin, the largest count ``sender``'s messages carried."""
        return dict(self._edge.get(sender, {}))

    def record(self, sender: int, covers: Iterable[tuple[int, int]], applied: bool,
               resent: bool = False) -> None:
        """The last part of a message from ``sender`` carrying ``covers`` went in
        (``applied``: summed now; else held already): what it holds is held."""
        edge = self._edge.setdefault(sender, {})
        for origin, count in covers:
            # Per origin, what its edge did not carry before (a new edge: what is not held
            # yet); messages queued together went as one. A re-sent message goes alone:
            # it holds one count of its sender's own.
            low = (count - 1 if resent and origin == sender
                   else edge.get(origin, self.highest(origin)))
            if applied and count > low:
                self._add(origin, low + 1, count)
            edge[origin] = max(edge.get(origin, 0), count)

    def _add(self, origin: int, lo: int, hi: int) -> None:
        spans = sorted([*self.ranges.get(origin, []), (lo, hi)])
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.ranges[origin] = merged

    def tops(self) -> dict[int, int]:
        """Per origin, the largest count held."""
        return {o: s[-1][1] for o, s in sorted(self.ranges.items()) if s}

    def prefix(self) -> dict[int, int]:
        """Per origin, the count up to which every message is held: what the aggregates
        tell the workers, which let go of what it covers (a message past a gap stays
        kept, to be re-sent if its parent dies)."""
        return {o: s[0][1] for o, s in sorted(self.ranges.items()) if s and s[0][0] == 1}

    def totals(self) -> dict[int, int]:
        """Per origin, how many of its counts are held (the largest one, without gaps)."""
        return {o: sum(b - a + 1 for a, b in s) for o, s in sorted(self.ranges.items())}
