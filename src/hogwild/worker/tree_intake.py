"""Topology tree: a delta from a tree neighbour taken in, held whole, told apart if re-sent, owed on."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from hogwild.protocol.codec import DecodedDelta
from hogwild.worker.plan import RunPlan
from hogwild.worker.tree_async import tree_heard

if TYPE_CHECKING:
    from hogwild.worker.node import WorkerNode


def take_tree_delta(node: WorkerNode, plan: RunPlan, delta: DecodedDelta,
                    limit: int | None) -> bool:
    """(The node's tree lock held.) Take in ``delta`` from a tree neighbour; True if it was a
    duplicate. A message in parts is held until its last part is in, then taken part by
    part (protocol/wholeparts.py: a dead child's unfinished message is never summed, so the
    orphans' re-sends are not summed twice); Busy, with nothing taken, if it does not fit."""
    whole = node.whole_parts
    for sender in whole.senders():  # a dropped neighbour's unfinished messages: never summed
        if node.inbox.dropped(sender):
            whole.forget(sender)
    if whole.holds(delta) or node.inbox.seen(delta.key):
        return True
    whole.room(delta)
    parts = whole.add(delta)
    if parts is None:
        return False
    if len(parts) > 1:
        try:
            node.inbox.room(delta.header.worker_id,
                            sum(int(p.values.shape[0]) for p in parts))
        except Exception:
            for p in parts:  # held again: the sender retries this part
                if p is not delta:
                    whole.add(p)
            raise
    duplicate = False
    for part in parts:
        duplicate = _take(node, plan, part, limit)
    return duplicate


def _take(node: WorkerNode, plan: RunPlan, delta: DecodedDelta, limit: int | None) -> bool:
    tree = node.tree
    assert tree is not None
    h, sync = delta.header, plan.mode == "sync"
    # Sync: an orphan's re-sent message that its dead parent passed on here already counts
    # (seq, round) but is neither applied nor owed on again (TreeLinks.arrived).
    held = (tree.known(h.worker_id, h.round) if sync else
            h.resent and tree.held(h.worker_id, h.covers))
    if not node.inbox.offer(dataclasses.replace(
            delta, indices=delta.indices[:0], values=delta.values[:0], dense=False)
            if held else delta, limit):
        return True
    if sync and tree.arrived(h.worker_id, h.round, delta.indices, delta.values):
        return False
    if not sync and tree_heard(tree, h, held):
        return False
    tree.received(h.worker_id, delta.indices, delta.values, h.round)
    # On at once (no hop waits for a round boundary), once the destinations are open;
    # before, it stays owed for the first exchange.
    if plan.mode == "async" and node.destinations:
        for f in tree.forward(node.rounds):
            node._tree_put(f)
    return False
