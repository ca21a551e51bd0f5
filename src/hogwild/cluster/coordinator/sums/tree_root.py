"""Topology tree: the coordinator is the root and relays between its children as a star would.

Its children send it their subtrees' sums (applied by the run state's GlobalModel, like any
delta) and each gets the sum of the other children's (:class:`StarRelay`, same sync barrier,
finals, keys and sender id). When a child dies, its live children re-attach here
(``live_children`` of the coordinator around the dead): they are adopted as soon as the
death is known, and what a dead child had sent is never relayed to its own subtree, which
contributed it: the orphans are levelled instead (below).

A child's death costs no contribution. Upwards, its orphans re-send what they had sent it
that may not have gone further (sync: TreeLinks.retained, each message under its own round;
async: what the applied counts do not cover). What the dead child had passed on already is
known here (sync: a round at most the dead child's last complete one here; async: by the
counts) and is not summed again, so the model gets each contribution once. Downwards, each
orphan is levelled: it is sent everything that crossed the dead child's edge, both ways,
with which of its own messages that holds, and sets the part of its model that came from its
parents to it (engine/treeview.py), so it misses nothing that went through the dead child
and holds nothing twice. What the dead child trained itself and never sent is all that is
lost.

A worker that registers again (restarted, or refused after a freeze) comes back as one more
point of this relay, a leaf of the coordinator configured as a star worker: its place in the
heap stays routed around (its old neighbours keep it dead, its old children stay adopted), so
no edge of the tree changes under way. It gets everybody's sums through the coordinator, and
everybody gets its deltas the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import EMPTY, Sparse, StarRelay
from hogwild.cluster.transport.sender import OutgoingDelta
from hogwild.cluster.wire.codec import DecodedDelta, DeltaHeader
from hogwild.engine.sparse import merge_sparse
from hogwild.engine.tree import AppliedCounts
from hogwild.engine.treeshape import COORDINATOR, ancestors, between, children, live_children
from hogwild.engine.treeview import EdgeSums, Resync, own_part

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
        # Sync orphans: the last round complete here from the dead child they came through
        # (their messages up to it are in the model already: known if sent again).
        self._via: dict[int, int] = {}
        self.replays_known = 0    # re-sent message parts the model held already
        # Async: which messages up the model holds, per origin worker, is kept by the state
        # (AppliedCounts), which checks a re-sent message against them and records an
        # applied one's in the critical section of the apply: no message can be summed
        # between the check and the record. Told to everyone in the aggregates.
        if mode != "sync":
            state.model.tree_counts = AppliedCounts()
        self.resent_applied = 0   # async: re-sent messages the model did not hold yet
        # Levelling orphans (engine/treeview.py): per child edge the sum of the aggregates
        # sent down it (the state sums what came up it, in the apply's critical section),
        # and (async) the counts an adopted edge's world holds from the dead one's.
        state.model.tree_sums = EdgeSums(dim)
        self._down_sums = EdgeSums(dim)
        self._inherited: dict[int, dict[int, int]] = {}
        self.resyncs_sent = 0

    def _adopt(self) -> None:
        """(Holding the relay's lock.) The live children of dead children are children now
        (a worker taken back counts as dead in the layout: its children stay here)."""
        roster = self.state.roster
        dead = {r.worker_id for r in roster.workers.values() if r.dead} | roster.detached
        if not dead:
            return
        fresh = [c for c in live_children(COORDINATOR, self.fanout, self.n, dead)
                 if c not in self._pending]
        resyncs: list[tuple[int, Resync]] = []
        for c in fresh:
            self._pending[c] = EMPTY
            self._round[c] = self._before_first
            self._final[c] = False
            self._examples[c] = 0
            # The nearest dead point of this relay it came through (a worker taken back is
            # a new incarnation: what its old one passed on is not told apart).
            through = [a for a in ancestors(c, self.fanout)
                       if a in self._round and a not in self.state.roster.detached]
            if self.mode == "sync" and through:
                # (A dead point adopted around an earlier death holds what that one's
                # sums held: its resync.)
                x = through[0]
                self._via[c] = max(self._round[x], self._via.get(x, self._before_first))
            if through:
                resyncs.append((c, self._resync(c, through[0])))
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
                # to the orphan at once (sync orphans by their resync, below, which holds
                # what crossed the dead edge; async ones by an empty greeting before it).
                for c in fresh:
                    if c in self._via:
                        continue
                    empty = OutgoingDelta(
                        self._sent_round, False, sum(self._examples.values()),
                        *EMPTY, applied=self.applied_counts())
                    self._stamp(c, empty)
                    self.destinations[c].put_delta(empty)
                    self.aggregates += 1
            for c, r in resyncs:  # after the greeting, which tells the orphan its parent died
                resync = OutgoingDelta(max(self._sent_round, self._before_first), False,
                                       sum(self._examples.values()), *r.world,
                                       applied=self.applied_counts(), apart=True,
                                       resync_cut=r.cut)
                self._stamp(c, resync)
                self.destinations[c].put_delta(resync)
                self.aggregates += 1
                self.resyncs_sent += 1
                log.info("tree: worker %d adopted around dead worker %d: sent it everything "
                         "that crossed that edge (%d entries; its own %s among them)", c,
                         r.dead, r.world[0].shape[0], own_part(r.cut, self.mode == "sync"))

    def check_round(self, worker_id: int, round_: int, header: DeltaHeader | None = None
                    ) -> bool:
        """As the star relay's; also, a worker of the tree that sends here routes around
        its ancestors: they died (as its own neighbours would conclude, see
        TreeRelay.check_sender), whether or not their silence was noticed here yet.
        Refused instead, the orphan left the run to register again. True for an orphan's
        re-sent message that reached the model through its dead parent."""
        self._vouched(worker_id)
        super().check_round(worker_id, round_)
        with self._cond:
            if self.mode != "sync":
                # Async: the state tells a re-sent message held already (its dead parent
                # passed it on) under its own lock, with the apply (AppliedCounts).
                return False
            cut = self._via.get(worker_id)
            return cut is not None and round_ <= cut

    def _vouched(self, wid: int) -> None:
        """Drop the ancestors ``wid`` routes around, and adopt the orphans (see check_round)."""
        roster = self.state.roster
        if not 0 <= wid < self.n or wid in roster.detached:
            return
        with self._cond:
            alive = [a for a in ancestors(wid, self.fanout)
                     if a in roster.workers and not roster.workers[a].dead
                     and a not in roster.detached]
            for a in alive:
                log.warning("tree: worker %d sends to the coordinator around worker %d: "
                            "dropping it", wid, a)
                roster.mark_dead(a, f"worker {wid} re-attached to the coordinator around it")
            # Also when the death was known already: adopted (and told apart, _via) before
            # the state applies the orphan's first message.
            self._adopt()

    def offer(self, delta: DecodedDelta, complete: bool, version: int = 0) -> None:
        h = delta.header
        with self._cond:
            self._adopt()
            if self.mode != "sync":
                if h.resent and self.state.model.tree_applied(
                        lambda a: a.take_skipped((h.worker_id, h.seq, h.part)), False):
                    if complete:
                        self.replays_known += 1
                        self._round[h.worker_id] = max(self._round[h.worker_id], h.round)
                    self._cond.notify_all()
                    return
                if complete and h.resent and not self._done:
                    self.resent_applied += 1
            cut = self._via.get(h.worker_id)
            if cut is not None and not self._done and h.round <= cut:
                # In the model through the dead parent (check_round), and in the orphan's
                # resync: relayed to nobody again.
                self.replays_known += 1
                if complete:
                    self._round[h.worker_id] = max(self._round[h.worker_id], h.round)
                self._cond.notify_all()
                return
            super().offer(delta, complete, version)

    def _stamp(self, wid: int, aggregate: OutgoingDelta) -> None:
        self._down_sums.add(wid, aggregate.indices, aggregate.values)

    def _resync(self, orphan: int, dead: int) -> Resync:
        """(Holding the relay's lock; ``dead`` is dead in the state, which takes nothing
        more from it.) What levels ``orphan``, adopted around ``dead``: everything that
        crossed the edge to the dead one, and which of the orphan's own messages that holds
        (sync: those of rounds up to the dead one's last here; async: its count that edge
        carried; an edge adopted around an earlier death starts with that one's counts:
        its resync held that world)."""
        world = merge_sparse(*self._up_world(dead), *self._down_sums.world(dead))
        if self.mode == "sync":
            return Resync(dead, self._via[orphan], world)
        seen = self._inherited.get(dead, {})
        for o, c in self._counts(lambda a: a.edge_counts(dead)).items():
            seen[o] = max(seen.get(o, 0), c)
        self._inherited[orphan] = dict(seen)
        return Resync(dead, seen.get(orphan, 0), world)

    def _up_world(self, dead: int) -> Sparse:
        """What the model took from ``dead``: all of it, since the state refuses a dead
        sender's messages in the critical section that sums an accepted one."""
        sums = self.state.model.tree_sums
        return sums.world(dead) if sums is not None else EMPTY

    def recovery(self) -> dict[str, Any]:
        """The coordinator's side of the recovery of a dead interior worker's orphans: how
        many adopted (sync), re-sent message parts taken as known (the dead worker had
        passed them on), orphans levelled; async: re-sent messages applied, and per worker
        its messages up the model holds."""
        with self._cond:
            out: dict[str, Any] = {
                "orphans_adopted": len(self._via), "resent_known": self.replays_known,
                "orphans_caught_up": self.resyncs_sent}
            if self.mode != "sync":
                out["resent_applied"] = self.resent_applied
                out["applied_up"] = {str(o): c for o, c in self._counts(AppliedCounts.tops).items()}
                # How many of them: the largest count unless one in between is missing.
                out["applied_count"] = {
                    str(o): c for o, c in self._counts(AppliedCounts.totals).items()}
            return out

    def _counts(self, view: Callable[[AppliedCounts], dict[int, int]]) -> dict[int, int]:
        """Async: ``view`` of the per-origin counts the model holds (none in sync)."""
        none: dict[int, int] = {}
        return self.state.model.tree_applied(view, none)

    def applied_counts(self) -> dict[int, int] | None:
        """Async: per origin, the messages up the model holds without a gap, which every
        message down carries; None in sync mode."""
        return self._counts(AppliedCounts.prefix) if self.mode != "sync" else None

    def _live(self) -> list[int]:
        self._adopt()
        return super()._live()

    def _own_side(self, wid: int) -> list[Sparse]:
        """Its own pending sum and those of the dead workers on its heap path, whose sums
        held its subtree's contributions (also what a worker taken back had sent before it
        died). A worker taken back, a leaf now, has only its own, old and new."""
        detached = self.state.roster.detached
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
            self._adopt()  # its orphans came through its old incarnation (see _via)
            self.state.roster.detach(wid)
            old = self._pending.get(wid, EMPTY)
            if old[0].size:
                self._ghosts[wid] = merge_sparse(*self._ghosts.get(wid, EMPTY), *old)
            self._pending[wid] = EMPTY
            self._examples.setdefault(wid, 0)
            return super().take_back(wid, first_round)
