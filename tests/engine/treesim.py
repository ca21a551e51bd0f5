"""A tree of TreeLinks nodes without a network, for the levelling tests: messages go FIFO per
edge and are delivered in a random order, workers die at chosen moments and each node
learns of a death at its own time. The async and sync runs (test_tree_levelling*.py) add
how their nodes train, send and take a message in."""

from __future__ import annotations

import functools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hogwild.cluster.worker.inbox import PeerStatus
from hogwild.engine.tree import Flush, TreeLinks
from hogwild.engine.treeshape import (
    COORDINATOR,
    ancestors,
    between,
    children,
    live_children,
    live_parent,
    parent,
    same_side,
)

DIM = 40


@dataclass
class Msg:
    indices: np.ndarray
    values: np.ndarray
    round: int
    covers: dict[int, int] | None = None
    applied: dict[int, int] | None = None
    resent: bool = False
    resync_cut: int | None = None


@dataclass
class Node:
    me: int
    tree: TreeLinks
    peers: dict[int, PeerStatus]
    w: np.ndarray = field(default_factory=lambda: np.zeros(DIM))
    round: int = 0
    waiting: bool = False
    alive: bool = True
    known_dead: set[int] = field(default_factory=set)


def _same_side(me: int, k: int, a: int, b: int) -> bool:
    return same_side(me, a, b, k)


class TreeSim:
    """n workers under a root (id -1, which trains nothing: the coordinator's place)."""

    sync = False

    def __init__(self, n: int, k: int, seed: int) -> None:
        self.n, self.k = n, k
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.nodes: dict[int, Node] = {}
        for me in [COORDINATOR, *range(n)]:
            nbrs = ([] if me == COORDINATOR else [parent(me, k)]) + children(me, k, n)
            tree = TreeLinks(nbrs, functools.partial(_same_side, me, k))
            tree.parent = None if me == COORDINATOR else parent(me, k)
            tree.me = None if me == COORDINATOR or self.sync else me
            tree.track(DIM)
            self.nodes[me] = Node(me, tree, {x: PeerStatus(x, "") for x in nbrs})
        self.queues: dict[tuple[int, int], deque[Msg]] = {}
        self.notices: list[tuple[int, int]] = []  # (node, dead) not yet noticed

    # ------------------------------------------------------------ the variants'

    def send(self, sender: int, f: Flush) -> None:
        self.put(sender, f.neighbour, Msg(f.indices, np.asarray(f.values, dtype=np.float64),
                                          f.round, f.covers, f.applied,
                                          resync_cut=f.resync_cut))

    def after(self, node: Node) -> None:
        """What goes out after an arrival or a death (the node's due messages)."""

    def hand_over(self, node: Node, old: int, new: int, heard: PeerStatus | None,
                  old_sent: int) -> None:
        """The parent died: what this node sends its new parent again."""
        raise NotImplementedError

    def take(self, node: Node, sender: int, msg: Msg) -> None:
        """A message from a neighbour, levelled already if it was a resync."""
        raise NotImplementedError

    def may_train(self, node: Node) -> bool:
        return node.alive

    # ------------------------------------------------------------------ shared

    def put(self, sender: int, receiver: int, msg: Msg) -> None:
        self.queues.setdefault((sender, receiver), deque()).append(msg)

    def own_delta(self, node: Node) -> None:
        node.round += 1
        idx = np.sort(self.nprng.choice(DIM, 4, replace=False)).astype(np.int32)
        val = self.nprng.standard_normal(4)
        np.add.at(node.w, idx, val)
        node.tree.own(idx, val)

    def train(self, node: Node) -> None:
        raise NotImplementedError

    def die(self, me: int) -> None:
        self.nodes[me].alive = False
        for node in self.nodes.values():
            if node.alive and me in node.tree.neighbours:
                self.notices.append((node.me, me))

    def bury(self, node: Node, dead: list[int]) -> None:
        """As TreeRelay.bury."""
        fresh = [d for d in dead if d not in node.known_dead]
        if not fresh:
            return
        tree = node.tree
        old_parent = tree.parent
        old_sent = tree.sent_round.get(old_parent, 0) if old_parent is not None else 0
        heard = node.peers.get(old_parent) if old_parent is not None else None
        node.known_dead.update(fresh)
        if node.me == COORDINATOR:
            new_parent = None
            now = live_children(COORDINATOR, self.k, self.n, node.known_dead)
        else:
            new_parent = live_parent(node.me, self.k, node.known_dead)
            now = [new_parent, *live_children(node.me, self.k, self.n, node.known_dead)]
        gone = [x for x in tree.neighbours if x not in now]
        added = [y for y in now if y not in tree.neighbours]
        for y in added:
            tree.adopt(y, [x for x in gone if tree.same_side(x, y)], orphan=y != new_parent,
                       sync=self.sync)
            node.peers[y] = PeerStatus(y, "")
        for x in gone:
            tree.remove(x)
            node.peers.pop(x, None)
        if new_parent is not None and old_parent is not None and new_parent != old_parent:
            tree.parent = new_parent
            self.hand_over(node, old_parent, new_parent, heard, old_sent)
        for y in added:
            if not self.sync:  # a new edge: see TreeLinks.greet
                self.send(node.me, tree.greet(y, node.round))
            resync = tree.take_resync(y, node.round, self.sync)
            if resync is not None:
                self.send(node.me, resync)
            if not self.nodes[y].alive:  # it will find out, as by silence
                self.notices.append((node.me, y))
        self.after(node)

    def deliver(self, sender: int, receiver: int) -> None:
        msg = self.queues[(sender, receiver)].popleft()
        node = self.nodes[receiver]
        tree = node.tree
        if not node.alive or sender in node.known_dead:
            return
        if sender not in tree.neighbours:
            # A sender further up or down the heap path routes around the dead between.
            gap = between(receiver, sender, self.k)
            assert gap is not None, (sender, receiver)
            self.bury(node, gap)
        if sender not in tree.neighbours:
            return
        if msg.resync_cut is not None and sender == tree.parent:
            assert tree.view is not None
            change = tree.view.level(msg.resync_cut, [(msg.indices, msg.values)])
            assert change is not None, "a resync with nothing frozen"
            tree.view.settle()
            msg.indices, msg.values = change
        self.take(node, sender, msg)
        self.after(node)

    def notice(self, pick: int) -> None:
        who, dead = self.notices.pop(pick)
        if self.nodes[who].alive:
            self.bury(self.nodes[who], [dead])

    def step(self, train: bool) -> bool:
        """One random event; False when nothing was left to do."""
        if self.notices and self.rng.random() < 0.05:
            self.notice(self.rng.randrange(len(self.notices)))
            return True
        edges = [e for e, q in self.queues.items() if q]
        ready = [w for w in range(self.n) if self.may_train(self.nodes[w])] if train else []
        if ready and (not edges or self.rng.random() < 0.3):
            self.train(self.nodes[self.rng.choice(ready)])
            return True
        if edges:
            self.deliver(*self.rng.choice(edges))
            return True
        if self.notices:
            self.notice(len(self.notices) - 1)
            return True
        return False

    def survivors(self) -> list[Node]:
        return [self.nodes[w] for w in range(self.n) if self.nodes[w].alive]

    def level_plainly(self) -> None:
        """Each resync added as an ordinary message (the control of the tests)."""
        for node in self.nodes.values():
            view = node.tree.view
            assert view is not None
            view.level = _as_plain(view.level)  # type: ignore[method-assign]


def _as_plain(level: Callable[..., Any]) -> Callable[..., Any]:
    def plain(cut: int, world: Any) -> Any:
        level(cut, [])  # counted as levelled, nothing taken away
        (idx, val), = world
        return idx, val
    return plain


def deaths(sim: TreeSim, rng: random.Random, count: int, span: int) -> dict[int, int]:
    """``count`` workers, an interior one first, often on one path, at times close together
    (events within ``span``)."""
    interior = [w for w in range(sim.n) if children(w, sim.k, sim.n)]
    first = rng.choice(interior)
    path = [first, *ancestors(first, sim.k)]
    picked = [first]
    while len(picked) < count:
        pool = [w for w in path if w not in picked]
        if not pool or rng.random() < 0.5:
            pool = [w for w in range(sim.n) if w not in picked]
        picked.append(rng.choice(pool))
    times = sorted(rng.sample(range(span // 5, span - span // 5), count))
    if rng.random() < 0.5:  # one right after another
        times = [times[0] + i * rng.choice([1, 3, 10]) for i in range(count)]
    return dict(zip(times, picked, strict=True))


def off_root(sim: TreeSim) -> float:
    """The largest difference of a survivor's model from the root's."""
    root = sim.nodes[COORDINATOR].w
    assert np.any(root != 0)
    return max(float(np.max(np.abs(s.w - root))) for s in sim.survivors())
