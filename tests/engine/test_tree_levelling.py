"""Topology tree, async, without a network: many nodes of TreeLinks exchange messages in a
random order (FIFO per edge, like a gRPC stream), workers die at random times (interior
ones, several on one path, one right after another), and once everything is delivered every
survivor's model equals the root's. Re-sent messages, per-origin counts and the orphans'
levelling (engine/treeview.py) are what make that hold; the real nodes wrap these same
TreeLinks with gRPC, locks and a numba kernel."""

from __future__ import annotations

import functools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from hogwild.engine.tree import AppliedCounts, Flush, TreeLinks
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
    w: np.ndarray = field(default_factory=lambda: np.zeros(DIM))
    round: int = 0
    alive: bool = True
    known_dead: set[int] = field(default_factory=set)


class TreeSim:
    """n workers under a root (id -1, which trains nothing: the coordinator's place). The
    root tells re-sent messages it holds apart by per-origin counts, as the coordinator does
    (AppliedCounts), and sends the applied counts down with everything."""

    def __init__(self, n: int, k: int, seed: int) -> None:
        self.n, self.k = n, k
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.nodes: dict[int, Node] = {}
        for me in [COORDINATOR, *range(n)]:
            nbrs = ([] if me == COORDINATOR else [parent(me, k)]) + children(me, k, n)
            tree = TreeLinks(nbrs, functools.partial(_same_side, me, k))
            tree.parent = None if me == COORDINATOR else parent(me, k)
            tree.me = None if me == COORDINATOR else me
            tree.track(DIM)
            self.nodes[me] = Node(me, tree)
        self.queues: dict[tuple[int, int], deque[Msg]] = {}
        self.notices: list[tuple[int, int]] = []  # (node, dead) not yet noticed
        self.counts = AppliedCounts()
        self.taken = 0

    # ------------------------------------------------------------------ sending

    def send(self, sender: int, f: Flush) -> None:
        applied = self.counts.prefix() if sender == COORDINATOR else f.applied
        self.queues.setdefault((sender, f.neighbour), deque()).append(
            Msg(f.indices, np.asarray(f.values, dtype=np.float64), f.round, f.covers,
                applied, resync_cut=f.resync_cut))

    def forward(self, node: Node) -> None:
        for f in node.tree.forward(node.round):
            self.send(node.me, f)

    # ----------------------------------------------------------------- behaviour

    def train(self, node: Node) -> None:
        node.round += 1
        idx = np.sort(self.nprng.choice(DIM, 4, replace=False)).astype(np.int32)
        val = self.nprng.standard_normal(4)
        np.add.at(node.w, idx, val)
        node.tree.own(idx, val)
        self.forward(node)

    def die(self, me: int) -> None:
        self.nodes[me].alive = False
        for node in self.nodes.values():
            if node.alive and me in node.tree.neighbours:
                self.notices.append((node.me, me))

    def bury(self, node: Node, dead: list[int]) -> None:
        """As WorkerNode._tree_bury, async."""
        fresh = [d for d in dead if d not in node.known_dead]
        if not fresh:
            return
        tree = node.tree
        old_parent = tree.parent
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
                       sync=False)
        for x in gone:
            tree.remove(x)
        if new_parent is not None and new_parent != old_parent:
            tree.parent = new_parent
            tree.orphaned(sync=False)
            for u in tree.resend():
                self.queues.setdefault((node.me, new_parent), deque()).append(
                    Msg(u.indices, u.values, u.round, u.covers, resent=True))
        for y in added:
            self.send(node.me, tree.greet(y, node.round))
            resync = tree.take_resync(y, node.round, sync=False)
            if resync is not None:
                self.send(node.me, resync)
            if not self.nodes[y].alive:  # it will find out, as by silence
                self.notices.append((node.me, y))

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
        covers = (msg.covers or {}).items()
        if receiver == COORDINATOR:
            self.taken += 1
            held = self.counts.take(sender, self.taken, 0, 1, covers, msg.resent, False)
        else:
            held = msg.resent and tree.held(sender, covers)
        if held:
            tree.resent_known += 1
            return
        np.add.at(node.w, msg.indices, msg.values)
        tree.heard(sender, (msg.covers or {}).items(), (msg.applied or {}).items())
        tree.received(sender, msg.indices, msg.values, msg.round)
        self.forward(node)

    # ---------------------------------------------------------------------- run

    def step(self, train: bool) -> bool:
        """One random event; False when nothing was left to do."""
        if self.notices and self.rng.random() < 0.1:
            who, dead = self.notices.pop(self.rng.randrange(len(self.notices)))
            if self.nodes[who].alive:
                self.bury(self.nodes[who], [dead])
            return True
        edges = [e for e, q in self.queues.items() if q]
        live = [w for w in range(self.n) if self.nodes[w].alive]
        if train and (not edges or self.rng.random() < 0.3):
            self.train(self.nodes[self.rng.choice(live)])
            return True
        if edges:
            self.deliver(*self.rng.choice(edges))
            return True
        if self.notices:
            who, dead = self.notices.pop()
            if self.nodes[who].alive:
                self.bury(self.nodes[who], [dead])
            return True
        return False

    def run(self, steps: int, deaths: dict[int, int]) -> None:
        for t in range(steps):
            if t in deaths:
                self.die(deaths[t])
            self.step(train=True)
        while self.step(train=False):
            pass

    def survivors(self) -> list[Node]:
        return [self.nodes[w] for w in range(self.n) if self.nodes[w].alive]


def _same_side(me: int, k: int, a: int, b: int) -> bool:
    return same_side(me, a, b, k)


def _deaths(sim: TreeSim, rng: random.Random, count: int, steps: int) -> dict[int, int]:
    """``count`` workers, interior ones first, often on one path, at times close together."""
    interior = [w for w in range(sim.n) if children(w, sim.k, sim.n)]
    first = rng.choice(interior)
    path = [first, *ancestors(first, sim.k)]
    picked = [first]
    while len(picked) < count:
        pool = [w for w in path if w not in picked]
        if not pool or rng.random() < 0.5:
            pool = [w for w in range(sim.n) if w not in picked]
        picked.append(rng.choice(pool))
    times = sorted(rng.sample(range(steps // 5, steps - steps // 5), count))
    if rng.random() < 0.5:  # one right after another
        times = [times[0] + i * rng.choice([1, 3, 10]) for i in range(count)]
    return dict(zip(times, picked, strict=True))


@pytest.mark.parametrize("seed", range(30))
def test_every_survivor_ends_equal_to_the_root(seed: int) -> None:
    rng = random.Random(1000 + seed)
    n, k = rng.choice([(7, 2), (15, 2), (13, 3), (31, 2)])
    sim = TreeSim(n, k, seed)
    steps = 1500
    deaths = _deaths(sim, rng, rng.choice([1, 2, 3]), steps)
    sim.run(steps, deaths)
    root = sim.nodes[COORDINATOR].w
    assert np.any(root != 0)
    for node in sim.survivors():
        np.testing.assert_allclose(node.w, root, rtol=0, atol=1e-9,
                                   err_msg=f"worker {node.me}, n={n} k={k} deaths {deaths}")


def test_without_levelling_an_orphan_would_differ() -> None:
    """The same runs with each resync applied as an ordinary message (the orphan keeps what
    it got through its dead parent and adds the dead edge's sums on top): some survivor
    ends off the root, so the equality above is the levelling's doing."""
    off = 0
    for seed in range(10):
        rng = random.Random(1000 + seed)
        n, k = rng.choice([(7, 2), (15, 2), (13, 3), (31, 2)])
        sim = TreeSim(n, k, seed)
        for node in sim.nodes.values():
            assert node.tree.view is not None
            node.tree.view.level = _as_plain(node.tree.view.level)  # type: ignore[method-assign]
        steps = 1500
        sim.run(steps, _deaths(sim, rng, rng.choice([1, 2, 3]), steps))
        root = sim.nodes[COORDINATOR].w
        off += any(not np.allclose(s.w, root, rtol=0, atol=1e-9) for s in sim.survivors())
    assert off >= 5, off


def _as_plain(level: Any) -> Any:
    def plain(cut: int, world: Any) -> Any:
        level(cut, [])  # counted as levelled, nothing taken away
        (idx, val), = world
        return idx, val
    return plain


def test_a_63_worker_tree_with_four_deaths_ends_level() -> None:
    """Six levels deep (fan-out 2): four deaths, the first interior ones on one path."""
    rng = random.Random(7)
    sim = TreeSim(63, 2, 7)
    steps = 4000
    deaths = _deaths(sim, rng, 4, steps)
    sim.run(steps, deaths)
    root = sim.nodes[COORDINATOR].w
    assert sum(node.tree.caught_up for node in sim.nodes.values()) >= 2
    for node in sim.survivors():
        np.testing.assert_allclose(node.w, root, rtol=0, atol=1e-9,
                                   err_msg=f"worker {node.me}, deaths {deaths}")
