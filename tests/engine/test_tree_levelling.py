"""Topology tree, async, without a network: many nodes of TreeLinks exchange messages in a
random order (FIFO per edge, like a gRPC stream), workers die at random times (interior
ones, several on one path, one right after another), and once everything is delivered every
survivor's model equals the root's. Re-sent messages, per-origin counts and the orphans'
levelling (engine/treeview.py) are what make that hold; the real nodes wrap these same
TreeLinks with gRPC, locks and a numba kernel."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hogwild.cluster.worker.inbox import PeerStatus
from hogwild.engine.tree import AppliedCounts, Flush
from hogwild.engine.treeshape import COORDINATOR

from .treesim import Msg, Node, TreeSim, deaths, off_root


class AsyncTreeSim(TreeSim):
    """Every node sends what it owes at once. The root tells re-sent messages it holds apart
    by per-origin counts, as the coordinator does (AppliedCounts), and sends the applied
    counts down with everything."""

    def __init__(self, n: int, k: int, seed: int) -> None:
        super().__init__(n, k, seed)
        self.counts = AppliedCounts()
        self.taken = 0

    def send(self, sender: int, f: Flush) -> None:
        if sender == COORDINATOR:
            f.applied = self.counts.prefix()
        super().send(sender, f)

    def after(self, node: Node) -> None:
        for f in node.tree.forward(node.round):
            self.send(node.me, f)

    def train(self, node: Node) -> None:
        self.own_delta(node)
        self.after(node)

    def hand_over(self, node: Node, old: int, new: int, heard: PeerStatus | None,
                  old_sent: int) -> None:
        """As worker/tree_async.resend_async."""
        node.tree.orphaned(sync=False)
        for u in node.tree.resend():
            self.put(node.me, new, Msg(u.indices, u.values, u.round, u.covers, resent=True))

    def take(self, node: Node, sender: int, msg: Msg) -> None:
        tree = node.tree
        covers = (msg.covers or {}).items()
        if node.me == COORDINATOR:
            self.taken += 1
            held = self.counts.take(sender, self.taken, 0, 1, covers, msg.resent, False)
        else:
            held = msg.resent and tree.held(sender, covers)
        if held:
            tree.resent_known += 1
            return
        np.add.at(node.w, msg.indices, msg.values)
        tree.heard(sender, covers, (msg.applied or {}).items())
        tree.received(sender, msg.indices, msg.values, msg.round)

    def run(self, steps: int, when: dict[int, int]) -> None:
        for t in range(steps):
            if t in when:
                self.die(when[t])
            self.step(train=True)
        while self.step(train=False):
            pass


def _run(seed: int, plain: bool = False) -> tuple[AsyncTreeSim, dict[int, int]]:
    rng = random.Random(1000 + seed)
    n, k = rng.choice([(7, 2), (15, 2), (13, 3), (31, 2)])
    sim = AsyncTreeSim(n, k, seed)
    if plain:
        sim.level_plainly()
    when = deaths(sim, rng, rng.choice([1, 2, 3]), 1500)
    sim.run(1500, when)
    return sim, when


@pytest.mark.parametrize("seed", range(30))
def test_every_survivor_ends_equal_to_the_root(seed: int) -> None:
    sim, when = _run(seed)
    assert off_root(sim) <= 1e-9, (sim.n, sim.k, when)


def test_without_levelling_an_orphan_would_differ() -> None:
    """The same runs with each resync applied as an ordinary message (the orphan keeps what
    it got through its dead parent and adds the dead edge's sums on top): some survivor
    ends off the root, so the equality above is the levelling's doing."""
    off = sum(off_root(_run(seed, plain=True)[0]) > 1e-9 for seed in range(10))
    assert off >= 5, off


def test_a_63_worker_tree_with_four_deaths_ends_level() -> None:
    """Six levels deep (fan-out 2): four deaths, the first interior ones on one path."""
    rng = random.Random(7)
    sim = AsyncTreeSim(63, 2, 7)
    when = deaths(sim, rng, 4, 4000)
    sim.run(4000, when)
    assert sum(node.tree.caught_up for node in sim.nodes.values()) >= 2
    assert off_root(sim) <= 1e-9, when
