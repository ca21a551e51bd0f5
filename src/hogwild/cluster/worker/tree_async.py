"""Topology tree, async: re-sending what a dead parent may not have passed on, and telling re-sent messages held already apart."""

from __future__ import annotations

import logging

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.wire.codec import DeltaHeader
from hogwild.cluster.worker.shared import Counters
from hogwild.engine.tree import TreeLinks

log = logging.getLogger("hogwild.worker")


def resend_async(tree: TreeLinks, dest: Destination | None, counters: Counters, old: int,
                 new: int) -> None:
    """(The exchange and tree locks held.) The parent ``old`` died: send the new parent
    ``new`` (through ``dest``, None before the destinations are open) again every message
    the coordinator's applied count of this node does not cover, each alone under its
    round, with the counts it first carried, marked re-sent. They stay kept until the
    coordinator's counts cover them (``new`` may die too)."""
    tree.orphaned(sync=False)  # frozen until the new parent's resync levels it (engine/treeview.py)
    replays = tree.resend()
    if dest is None:  # not running yet: nothing was sent to anyone
        return
    for u in replays:
        dest.put_delta(OutgoingDelta(u.round, False, counters.examples, u.indices, u.values,
                                     apart=True, covers=u.covers, resent=True))
        counters.deltas_sent += 1
    where = "the coordinator" if new == COORDINATOR_SENDER_ID else f"worker {new}"
    if replays:
        log.warning("tree: re-sent %d message(s) (up-messages %d-%d) to %s that the "
                    "coordinator had not applied when worker %d died", len(replays),
                    replays[0].index, replays[-1].index, where, old)
    else:
        log.info("tree: nothing to re-send to %s: the coordinator had applied every "
                 "message sent to worker %d", where, old)
    if tree.retained_dropped:
        log.warning("tree: %d message(s) to the parent were let go past the bound before "
                    "worker %d died: what they carried is lost", tree.retained_dropped, old)


def tree_heard(tree: TreeLinks, h: DeltaHeader, held: bool) -> bool:
    """(The tree lock held.) Async bookkeeping of a message from a tree neighbour, taken
    into the inbox already; True if it is a re-sent message held here already (counted,
    neither applied nor owed on)."""
    if held:
        if h.part == h.parts - 1:
            tree.resent_known += 1
        return True
    if h.part == h.parts - 1:
        if h.resent:
            tree.resent_applied += 1
        tree.heard(h.worker_id, h.covers, h.applied)
    return False
