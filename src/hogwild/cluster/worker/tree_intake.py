"""Topology tree: a delta from a tree neighbour taken in, held whole, told apart if re-sent, owed on."""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

import numpy as np

from hogwild.cluster.wire.codec import DecodedDelta
from hogwild.cluster.wire.wholeparts import WholeParts
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.tree_async import tree_heard
from hogwild.engine.tree import Flush, TreeLinks

log = logging.getLogger("hogwild.worker")


class TreeIntakeHost(Protocol):
    """What taking in a tree neighbour's delta reads of the tree relay (tree_relay.py;
    configure replaces its links), and how it owes a message on."""

    whole_parts: WholeParts
    tree: TreeLinks | None

    def put(self, f: Flush) -> None: ...

    def forward(self) -> None: ...


def take_tree_delta(relay: TreeIntakeHost, inbox: Inbox, plan: RunPlan, delta: DecodedDelta,
                    limit: int | None) -> bool:
    """(The tree lock held.) Take in ``delta`` from a tree neighbour; True if it was a
    duplicate. A message in parts is held until its last part is in, then taken part by
    part (protocol/wholeparts.py: a dead child's unfinished message is never summed, so the
    orphans' re-sends are not summed twice); Busy, with nothing taken, if it does not fit."""
    whole = relay.whole_parts
    for sender in whole.senders():  # a dropped neighbour's unfinished messages: never summed
        if inbox.dropped(sender):
            whole.forget(sender)
    if whole.holds(delta) or inbox.seen(delta.key):
        return True
    whole.room(delta)
    parts = whole.add(delta)
    if parts is None:
        return False
    h = delta.header
    tree = relay.tree
    assert tree is not None
    levelled = None
    if h.resync and h.worker_id == tree.parent and tree.view is not None:
        # Not added: the parent side of the model is set to it (engine/treeview.py). The
        # difference travels in the last part; the others go in empty (their keys count).
        levelled = tree.view.level(h.resync_cut, [(p.indices, p.values) for p in parts])
    if len(parts) > 1 or levelled is not None:
        size = (sum(int(p.values.shape[0]) for p in parts) if levelled is None
                else int(levelled[0].shape[0]))
        try:
            inbox.room(h.worker_id, size)
        except Exception:
            for p in parts:  # held again: the sender retries this part
                if p is not delta:
                    whole.add(p)
            raise
    if h.resync and levelled is None:
        # Nothing frozen to level (this worker never saw its parent die): nothing of it
        # is applied, rather than a whole edge's sums added twice.
        log.warning("tree: a resync from worker %d with no dead parent to replace: "
                    "applied none of it", h.worker_id)
        parts = [_emptied(p) for p in parts]
    elif levelled is not None:
        assert tree.view is not None
        tree.view.settle()
        parts = [*(_emptied(p) for p in parts[:-1]),
                 dataclasses.replace(parts[-1], indices=levelled[0],
                                     values=levelled[1].astype(np.float32), dense=False)]
    duplicate = False
    for part in parts:
        duplicate = _take(relay, inbox, plan, part, limit)
    return duplicate


def _emptied(delta: DecodedDelta) -> DecodedDelta:
    return dataclasses.replace(delta, indices=delta.indices[:0], values=delta.values[:0],
                               dense=False)


def _take(relay: TreeIntakeHost, inbox: Inbox, plan: RunPlan, delta: DecodedDelta,
          limit: int | None) -> bool:
    tree = relay.tree
    assert tree is not None
    h, sync = delta.header, plan.mode == "sync"
    # Sync: an orphan's re-sent message that its dead parent passed on here already counts
    # (seq, round) but is neither applied nor owed on again (TreeLinks.known).
    held = (tree.known(h.worker_id, h.round) if sync else
            h.resent and tree.held(h.worker_id, h.covers))
    if not inbox.offer(_emptied(delta) if held else delta, limit):
        return True
    if sync and held:
        if h.part == h.parts - 1:
            tree.resent_known += 1
        return False
    if not sync and tree_heard(tree, h, held):
        return False
    tree.received(h.worker_id, delta.indices, delta.values, h.round)
    if plan.mode == "async":
        relay.forward()
    return False
