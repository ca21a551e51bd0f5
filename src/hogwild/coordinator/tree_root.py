"""Topology tree: the coordinator is the root and relays between its children as a star would.

Its children send it their subtrees' sums (applied to the global model by RunState, like any
delta) and each gets the sum of the other children's (:class:`StarRelay`, same sync barrier,
finals, keys and sender id). When a child dies, its live children re-attach here
(``live_children`` of the coordinator around the dead): they are adopted as soon as the
death is known, and what a dead child had sent is never relayed to its own subtree, which
contributed it (async; sync orphans get the rest of it, below).

Sync, a child's death costs no contribution: its orphans re-send what they had sent it and
it had not passed on (TreeLinks.retained), each message under its own round. Only the first
may be one the global model holds already (the dead child passed it on, then died before
telling them): its round is at most the dead child's last complete one here, so it is taken
as known (RunState applies nothing of it) and the model gets each contribution once. That
first round also says what the orphan last heard complete from the dead child: the rest
(the sums of the last aggregates, TOTALS_KEPT of them, less the orphan's own part) is sent
to it, so it misses nothing that went through the dead child either. What the dead child
trained itself and never sent is all that is lost.

A worker that registers again (restarted, or refused after a freeze) comes back as one more
point of this relay, a leaf of the coordinator configured as a star worker: its place in the
heap stays routed around (its old neighbours keep it dead, its old children stay adopted), so
no edge of the tree changes under way. It gets everybody's sums through the coordinator, and
everybody gets its deltas the same way.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from hogwild.coordinator.relay import _EMPTY, Sparse, StarRelay
from hogwild.coordinator.state import RunState
from hogwild.engine.sparse import merge_sparse
from hogwild.engine.tree import DOWN_KEPT, AppliedCounts
from hogwild.engine.treeshape import COORDINATOR, ancestors, between, children, live_children
from hogwild.protocol.codec import DecodedDelta, DeltaHeader
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
        # Sync orphans: the last round complete here from the dead child they came through
        # (their messages up to it are in the model already), the round each last heard
        # complete from it (from its first message here), its messages the model held
        # already (round, sum), and those whose missing rounds were sent.
        self._via: dict[int, int] = {}
        self._behind: dict[int, int] = {}
        self._ref: dict[int, list[tuple[int, Sparse]]] = {}
        self._caught: set[int] = set()
        self.replays_known = 0    # re-sent message parts the model held already
        self.catch_up_missed = 0  # rounds an orphan missed that were no longer kept (lost)
        # Async: per origin worker, how many of its messages to its parent the model holds
        # (from the counts every message up carries; told to everyone in the aggregates),
        # and the parts of re-sent messages it held already (sender, seq, part), which
        # check_round told the state not to apply and offer leaves out of the sums.
        # Async: which messages up the model holds, per origin worker, is kept by the state
        # (AppliedCounts), which checks a re-sent message against them and records an
        # applied one's in the critical section of the apply: no message can be summed
        # between the check and the record. Told to everyone in the aggregates.
        if mode != "sync":
            state.tree_counts = AppliedCounts()
        self.resent_applied = 0   # async: re-sent messages the model did not hold yet
        # Async, downwards: per child, the aggregates sent it (a count, and the last
        # DOWN_KEPT of them), and the orphans adopted around a dead child not yet caught up
        # (the dead child, its kept aggregates, how many it was sent): each reports how far
        # it got through the dead one and is sent the rest (TreeLinks.catch_up_async).
        self._down_sent: dict[int, int] = {}
        self._down_log: dict[int, deque[tuple[int, Sparse]]] = {}
        self._async_via: dict[int, tuple[int, list[tuple[int, Sparse]], int]] = {}
        self.async_caught = 0

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
            # The nearest dead point of this relay it came through (a worker taken back is
            # a new incarnation: what its old one passed on is not told apart).
            through = [a for a in ancestors(c, self.fanout)
                       if a in self._round and a not in self.state.detached]
            if self.mode == "sync" and through:
                self._via[c] = self._round[through[0]]
            elif through:
                x = through[0]
                self._async_via[c] = (x, list(self._down_log.get(x, ())),
                                      self._down_sent.get(x, 0))
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
                # to the orphan at once, empty (async: what the dead parent held is lost to
                # its subtree, as anything else it had not forwarded; sync: _catch_up).
                for c in fresh:
                    # Sync: one round less, vouching for nothing it may lack (its first
                    # message says what it lacks; _catch_up sends it); it tells the orphan
                    # that its parent died, if it does not know yet.
                    label = self._sent_round - (1 if c in self._via else 0)
                    empty = OutgoingDelta(
                        max(label, self._before_first), False, sum(self._examples.values()),
                        *_EMPTY, applied=self._applied_counts())
                    self._stamp(c, empty)
                    self.destinations[c].put_delta(empty)
                    self.aggregates += 1

    def check_round(self, worker_id: int, round_: int, header: DeltaHeader | None = None
                    ) -> bool:
        """As the star relay's; also, a worker of the tree that sends here routes around
        its ancestors: they died (as its own neighbours would conclude, see
        WorkerNode._check_tree_sender), whether or not their silence was noticed here yet.
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
        if not 0 <= wid < self.n or wid in self.state.detached:
            return
        with self._cond:
            alive = [a for a in ancestors(wid, self.fanout)
                     if a in self.state.workers and not self.state.workers[a].dead
                     and a not in self.state.detached]
            for a in alive:
                log.warning("tree: worker %d sends to the coordinator around worker %d: "
                            "dropping it", wid, a)
                self.state.mark_dead(a, f"worker {wid} re-attached to the coordinator "
                                        "around it")
            # Also when the death was known already: adopted (and told apart, _via) before
            # the state applies the orphan's first message.
            self._adopt()

    def offer(self, delta: DecodedDelta, complete: bool, version: int = 0) -> None:
        h = delta.header
        with self._cond:
            self._adopt()
            if self.mode != "sync":
                if h.orphaned and h.part == h.parts - 1:
                    self._catch_up_async(h.worker_id, h.orphan_heard)
                if h.resent and self.state.take_tree_skipped((h.worker_id, h.seq, h.part)):
                    if complete:
                        self.replays_known += 1
                        self._round[h.worker_id] = max(self._round[h.worker_id], h.round)
                    self._cond.notify_all()
                    return
                if complete and h.resent and not self._done:
                    self.resent_applied += 1
            cut = self._via.get(h.worker_id)
            if cut is not None and not self._done:
                self._behind.setdefault(h.worker_id, h.round - 1)
                if h.round <= cut:  # in the model through the dead parent (check_round)
                    self.replays_known += 1
                    self._ref.setdefault(h.worker_id, []).append(
                        (h.round, (delta.indices, np.asarray(delta.values, dtype=np.float64))))
                    if complete:
                        self._round[h.worker_id] = max(self._round[h.worker_id], h.round)
                        self._catch_up(h.worker_id)
                    self._cond.notify_all()
                    return
                if h.worker_id not in self._caught:
                    self._catch_up(h.worker_id)
            super().offer(delta, complete, version)

    def _stamp(self, wid: int, aggregate: OutgoingDelta) -> None:
        if self.mode == "sync":
            return
        index = self._down_sent[wid] = self._down_sent.get(wid, 0) + 1
        aggregate.down_index = index
        self._down_log.setdefault(wid, deque(maxlen=DOWN_KEPT)).append(
            (index, (aggregate.indices, np.asarray(aggregate.values, dtype=np.float64))))

    def _catch_up_async(self, wid: int, heard: int) -> None:
        """(Holding the relay's lock.) Async: orphan ``wid`` reports that its dead parent's
        sums held the aggregates sent the dead one up to count ``heard``: the ones after
        (sums of the other subtrees, nothing of its own) are sent it now; those no longer
        kept are counted and logged."""
        entry = self._async_via.pop(wid, None)
        if entry is None or self._done:
            return
        dead, kept, sent = entry
        idx, val = _EMPTY
        since = [(i, piece) for i, piece in kept if i > heard]
        for _, piece in since:
            idx, val = merge_sparse(idx, val, *piece)
        first = kept[0][0] if kept else sent + 1
        lost = max(0, min(first, sent + 1) - heard - 1)
        if lost:
            self.catch_up_missed += lost
            log.warning("tree: worker %d missed %d aggregate(s) sent to its dead parent %d, "
                        "which are no longer kept here: what they carried is lost to it",
                        wid, lost, dead)
        dest = self.destinations.get(wid)
        if since and dest is not None:
            aggregate = OutgoingDelta(self._sent_round, False, sum(self._examples.values()),
                                      idx, val, applied=self._applied_counts())
            self._stamp(wid, aggregate)
            dest.put_delta(aggregate)
            self.aggregates += 1
        self.async_caught += 1
        log.info("tree: worker %d had got %d of the %d aggregate(s) sent to its dead parent "
                 "%d; sent the %d since", wid, heard, sent, dead, len(since))

    def _catch_up(self, wid: int) -> None:
        """(Holding the relay's lock.) Send orphan ``wid`` what it missed of the rounds
        after the last one it heard complete from its dead parent: the totals of the
        aggregates since (kept: TOTALS_KEPT), less its own messages among them; its own
        message summed in what is still pending is left out of its next aggregate."""
        if wid in self._caught:
            return
        self._caught.add(wid)
        behind = self._behind.get(wid, self._sent_round)
        kept = {r: t for r, t in self._totals}
        idx, val = _EMPTY
        lost = [r for r in range(behind + 1, self._sent_round + 1) if r not in kept]
        for r, (t_idx, t_val) in kept.items():
            if r > behind:
                idx, val = merge_sparse(idx, val, t_idx, t_val)
        later = _EMPTY
        for r, (o_idx, o_val) in self._ref.pop(wid, []):
            if r <= self._sent_round:
                idx, val = merge_sparse(idx, val, o_idx, -o_val)
            else:
                later = merge_sparse(*later, o_idx, -o_val)
        if later[0].size:
            self._extra[wid] = merge_sparse(*self._extra.get(wid, _EMPTY), *later)
        if lost:
            self.catch_up_missed += len(lost)
            log.warning("tree: worker %d missed rounds %s through its dead parent, which "
                        "are no longer kept here: what they carried is lost to it", wid,
                        ", ".join(map(str, lost)))
        if behind < self._sent_round:
            dest = self.destinations.get(wid)
            if dest is not None:
                dest.put_delta(OutgoingDelta(self._sent_round, False,
                                             sum(self._examples.values()), idx, val))
                self.aggregates += 1
        log.info("tree: worker %d last heard round %d complete through its dead parent; "
                 "sent the %d round(s) since", wid, behind, self._sent_round - behind)

    def recovery(self) -> dict[str, Any]:
        """The coordinator's side of the recovery of a dead interior worker's orphans: how
        many adopted, re-sent message parts taken as known (the dead worker had passed them
        on), orphans caught up, and rounds an orphan missed that were no longer kept; async:
        re-sent messages applied, and per worker its messages up the model holds."""
        with self._cond:
            out: dict[str, Any] = {
                "orphans_adopted": len(self._via), "resent_known": self.replays_known,
                "orphans_caught_up": len(self._caught) + self.async_caught,
                "catch_up_missed": self.catch_up_missed}
            if self.mode != "sync":
                out["resent_applied"] = self.resent_applied
                out["applied_up"] = {
                    str(o): c for o, c in self.state.tree_applied(AppliedCounts.tops).items()}
                # How many of them: the largest count unless one in between is missing.
                out["applied_count"] = {
                    str(o): c for o, c in self.state.tree_applied(AppliedCounts.totals).items()}
            return out

    def _applied_counts(self) -> dict[int, int] | None:
        return self.state.tree_applied(AppliedCounts.prefix) if self.mode != "sync" else None

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
        if wid in self._via:
            # A sync orphan: its part of its dead parent's sums (pending, or a ghost if the
            # parent was taken back) is known from its re-sent messages and left out alone
            # (_catch_up); the rest of them is owed to it.
            return [self._pending[wid]]
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
            self.state.detach(wid)
            old = self._pending.get(wid, _EMPTY)
            if old[0].size:
                self._ghosts[wid] = merge_sparse(*self._ghosts.get(wid, _EMPTY), *old)
            self._pending[wid] = _EMPTY
            self._examples.setdefault(wid, 0)
            return super().take_back(wid, first_round)
