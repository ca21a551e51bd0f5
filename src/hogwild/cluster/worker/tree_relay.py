"""Topology tree: a worker's links to its neighbours, what each is owed, re-routing around the dead."""

from __future__ import annotations

import functools
import logging
from typing import Protocol

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.wire.wholeparts import WholeParts
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.outbound import Outbound
from hogwild.cluster.worker.phase import COORDINATOR_ID
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.shared import Counters, Signals
from hogwild.cluster.worker.tree_async import resend_async
from hogwild.engine.tree import Flush, TreeLinks
from hogwild.engine.treeshape import between, live_children, live_parent, same_side
from hogwild.errors import ClusterError, StaleOrUnknown

log = logging.getLogger("hogwild.worker")


class RelayHost(Protocol):
    """What the relay reads and changes on the worker (the node; configure replaces its
    inbox, and the destinations are replaced whole when one changes), and how it drops a
    dead neighbour."""

    inbox: Inbox
    destinations: dict[int, Destination]
    outbound: Outbound

    def drop_peer(self, pid: int, round_: int, reason: str) -> None: ...


class TreeRelay:
    """This worker's place in the topology tree: its links (``tree``, None outside a tree),
    the workers known dead, and the messages it owes its parent and children."""

    def __init__(self, node: RelayHost, signals: Signals, counters: Counters,
                 coordinator_address: str, peer_addresses: dict[int, str]) -> None:
        self.node = node
        self.signals = signals
        self.counters = counters
        self.coordinator_address = coordinator_address
        self.peer_addresses = peer_addresses  # a rejoined peer's new address (announcements)
        self.tree: TreeLinks | None = None  # what each tree neighbour is owed (tree_lock)
        self.dead: set[int] = set()         # workers known dead: the layout routes around them
        # A child's multi-part message, held until whole (protocol/wholeparts).
        self.whole_parts = WholeParts()

    def configure(self, plan: RunPlan) -> None:
        """The links of this worker's place in the tree (none outside a tree)."""
        self.tree = None
        if plan.topology != "tree":
            return
        tree = TreeLinks(self.neighbours(plan), functools.partial(
            _same_side, plan.worker_id, plan.tree_fanout), plan.first_round - 1)
        tree.parent = self.parent(plan)
        tree.me, tree.keep_rounds = plan.worker_id, plan.staleness
        tree.track(plan.dim)
        self.tree = tree

    def check_sender(self, plan: RunPlan, worker_id: int) -> None:
        """Deltas and heartbeats from the parent and the children only (the caller's key
        checked already). A sender further up or down this worker's heap path vouches that
        the workers in between died (it routes around them): they are dropped here too and
        it becomes a neighbour, so both ends of a re-attached edge agree whichever noticed
        the death first."""
        with self.signals.tree_lock:
            if self.tree is None or worker_id in self.tree.neighbours:
                return
        relative = -1 if worker_id == COORDINATOR_SENDER_ID else worker_id
        gap = between(plan.worker_id, relative, plan.tree_fanout)
        if gap is None or relative in self.dead:
            raise StaleOrUnknown(f"worker {worker_id}: not a tree neighbour of worker "
                                 f"{plan.worker_id}")
        self.bury(plan, gap, f"worker {worker_id} re-attached around it")

    def neighbours(self, plan: RunPlan) -> dict[int, str]:
        """Parent (the coordinator under its sender id) and children, around the dead."""
        k, n = plan.tree_fanout, len(plan.peers) + 1
        up = live_parent(plan.worker_id, k, self.dead)
        out = ({COORDINATOR_SENDER_ID: self.coordinator_address} if up < 0
               else {up: self.peer_addresses.get(up, plan.peers[up])})
        for c in live_children(plan.worker_id, k, n, self.dead):
            out[c] = self.peer_addresses.get(c, plan.peers[c])
        return out

    def parent(self, plan: RunPlan) -> int:
        """The live parent's sender id (the coordinator's under its own)."""
        up = live_parent(plan.worker_id, plan.tree_fanout, self.dead)
        return COORDINATOR_SENDER_ID if up < 0 else up

    def destination(self, neighbour: int) -> Destination | None:
        """Where messages to a tree neighbour go (None before the destinations are open)."""
        return self.node.destinations.get(
            COORDINATOR_ID if neighbour == COORDINATOR_SENDER_ID else neighbour)

    def bury(self, plan: RunPlan, dead: list[int], reason: str) -> None:
        """Workers known dead: drop them and re-attach around them (nearest live ancestor
        and descendants); a new neighbour is owed what the dead one it replaces never got."""
        node, counters = self.node, self.counters
        with self.signals.exchange_lock, self.signals.tree_lock:
            fresh = [w for w in dead if w not in self.dead]
            if not fresh or self.tree is None:
                return
            old_parent = self.parent(plan)
            old_sent = self.tree.sent_round.get(old_parent, 0)
            self.dead.update(fresh)
            tree, k = self.tree, plan.tree_fanout
            now = self.neighbours(plan)
            gone = [x for x in tree.neighbours if x not in now]
            added = [y for y in now if y not in tree.neighbours]
            # The new neighbours are waited for before the dead stop being: the training
            # threads pass the staleness gate on their own, and with no live neighbour in
            # between they would run ahead unbounded, labelling the next message with a round
            # the new neighbour must refuse as further ahead than a peer can be.
            for y in added:
                node.inbox.add(y, now[y])
            for w in fresh:
                node.drop_peer(w, counters.rounds, reason)
            fresh_dests: dict[int, Destination] = {}
            for y in added:
                address = now[y]
                # A child in place of a dead child is levelled (TreeLinks.take_resync).
                child = y != self.parent(plan)
                tree.adopt(y, [x for x in gone if tree.same_side(x, y)], orphan=child,
                           sync=plan.mode == "sync")
                if y != COORDINATOR_SENDER_ID and node.destinations:
                    fresh_dests[y] = node.outbound.peer_destination(plan, y, address)
            stale = []
            for x in gone:
                tree.remove(x)
                if x in node.destinations:
                    stale.append(node.destinations[x])
            if node.destinations:
                # A new dict, so a thread iterating the old one is not disturbed.
                node.destinations = {**{d: v for d, v in node.destinations.items()
                                        if d not in gone}, **fresh_dests}
            new_parent = self.parent(plan)
            if new_parent != old_parent and tree.parent == old_parent:
                self.hand_over(plan, tree, old_parent, old_sent, new_parent)
            sync = plan.mode == "sync"
            if node.destinations:
                # After the re-sent messages: the new parent takes a re-sent message as held
                # or not by its count, which a later message on the edge would raise.
                for y in added:
                    if not sync:  # a new edge: see TreeLinks.greet
                        self.put(tree.greet(y, counters.rounds))
                    resync = tree.take_resync(y, counters.rounds, sync)  # see engine/treeview
                    if resync is not None:
                        self.put(resync)
        for dest in stale:
            dest.abandon()
        up = live_parent(plan.worker_id, k, self.dead)
        kids = live_children(plan.worker_id, k, len(plan.peers) + 1, self.dead)
        log.warning("tree: re-attached around worker(s) %s: parent %s, children %s",
                    ", ".join(map(str, fresh)), "coordinator" if up < 0 else up,
                    ", ".join(map(str, kids)) or "none")

    def hand_over(self, plan: RunPlan, tree: TreeLinks, old: int, old_sent: int,
                  new: int) -> None:
        """(Both locks held.) The parent died: what this node sent it that it had not
        passed on goes again, to the new parent. Sync: each message it cannot yet vouch
        for goes alone under its round; the new parent (the coordinator: TreeRoot; a
        worker: TreeLinks.known) takes one labelled up to the last round it heard from the
        dead parent as held already rather than sum it twice. What this node got through
        the dead parent is levelled by the new parent's resync (engine/treeview.py). The
        labels on the new edge go on from the old one's."""
        tree.parent = new
        if plan.mode != "sync":
            # Async: every message the coordinator's counts do not cover yet goes again,
            # alone, marked re-sent and with the counts it first carried; the new parent
            # applies it unless those say it holds it (TreeLinks.held, TreeRoot.check_round).
            resend_async(tree, self.destination(new), self.counters, old, new)
            return
        heard = self.node.inbox.snapshot().get(old)
        if heard is not None:
            tree.passed(heard.round)  # what its last messages vouched for went past it
        tree.orphaned(sync=True)  # levelled by the new parent's resync (engine/treeview.py)
        # The new parent takes a message labelled up to the last round it heard from the
        # dead parent as held already (at most one this node sent it): nothing new may go
        # under a round sent.
        tree.sent_round[new] = max(tree.sent_round.get(new, 0), old_sent)
        replays, tree.retained = tree.retained, []
        dest = self.destination(new)
        if dest is None:  # not running yet: nothing was sent to anyone
            return
        for label, idx, val in replays:
            dest.put_delta(OutgoingDelta(label, False, self.counters.examples, idx, val,
                                         apart=True))
            self.counters.deltas_sent += 1
            tree.retained.append((label, idx, val))  # kept until the new parent vouches
        if replays:
            log.warning("tree: re-sent %d message(s) (rounds %s) to %s that worker %d had "
                        "not passed on", len(replays), ", ".join(str(r[0]) for r in replays),
                        "the coordinator" if new == COORDINATOR_SENDER_ID else f"worker {new}",
                        old)

    def flush(self, plan: RunPlan, round_: int, finished: bool) -> None:
        """Queue every message due (what each neighbour is owed)."""
        assert self.tree is not None
        with self.signals.tree_lock:
            # Under the lock that owing happens under: a label (or a final) never runs ahead
            # of the sums it vouches for.
            for f in self.tree.due(round_, finished, self.node.inbox.snapshot(),
                                   plan.mode == "sync"):
                self.put(f)

    def forward(self) -> None:
        """(The tree lock held; async.) What arrived goes on at once (no hop waits for a
        round boundary), once the destinations are open; before, it stays owed for the
        first exchange."""
        assert self.tree is not None
        if self.node.destinations:
            for f in self.tree.forward(self.counters.rounds):
                self.put(f)

    def put(self, f: Flush) -> None:
        """Queue one message due to a neighbour."""
        dest = self.destination(f.neighbour)
        if dest is None:  # a bug: what was taken would be lost
            raise ClusterError(f"tree: no destination for neighbour {f.neighbour}")
        dest.put_delta(OutgoingDelta(f.round, f.final, self.counters.examples, f.indices,
                                     f.values, covers=f.covers, applied=f.applied,
                                     resync_cut=f.resync_cut,
                                     apart=f.resync_cut is not None))
        self.counters.deltas_sent += 1


def _same_side(me: int, k: int, a: int, b: int) -> bool:
    """tree.same_side with the coordinator under its sender id."""
    return same_side(me, -1 if a == COORDINATOR_SENDER_ID else a,
                     -1 if b == COORDINATOR_SENDER_ID else b, k)
