"""Topology tree, sync, without a network: the nodes of TreeLinks train in rounds behind a
barrier (every tree neighbour's round in) and exchange messages in a random order (FIFO per
edge); workers die at random moments, each node learning of a death at its own time (as by
a barrier timeout). Once every survivor has trained its last round and everything is
delivered, every survivor's model equals the root's: the orphans' re-sent messages count
once (known by round) and their resync levels them (engine/treeview.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hogwild.cluster.worker.inbox import PeerStatus
from hogwild.engine.rules import barrier_ready
from hogwild.engine.treeshape import COORDINATOR

from .treesim import Msg, Node, TreeSim, deaths, off_root

ROUNDS = 40


class SyncTreeSim(TreeSim):
    """Every node sends what is due (TreeLinks.due) after each arrival and each round; the
    root's round is its slowest child's, as the coordinator's aggregate of round R waits
    for every child's round R."""

    sync = True

    def after(self, node: Node) -> None:
        if node.me == COORDINATOR:
            own = min((s.round for s in node.peers.values()), default=0)
        else:
            own = node.round
        for f in node.tree.due(own, False, node.peers, sync=True):
            self.send(node.me, f)

    def train(self, node: Node) -> None:
        self.own_delta(node)
        node.waiting = True
        self.after(node)

    def may_train(self, node: Node) -> bool:
        if not node.alive or node.round >= ROUNDS:
            return False
        if node.waiting and barrier_ready(node.round, node.peers):
            node.waiting = False
        return not node.waiting

    def hand_over(self, node: Node, old: int, new: int, heard: PeerStatus | None,
                  old_sent: int) -> None:
        """As TreeRelay.hand_over, sync."""
        tree = node.tree
        if heard is not None:
            tree.passed(heard.round)  # what its last messages vouched for went past it
        tree.orphaned(sync=True)
        tree.sent_round[new] = max(tree.sent_round.get(new, 0), old_sent)
        for label, idx, val in tree.retained:
            self.put(node.me, new, Msg(idx, val, label))

    def take(self, node: Node, sender: int, msg: Msg) -> None:
        status = node.peers[sender]
        status.round = max(status.round, msg.round)
        if not node.tree.known(sender, msg.round):
            np.add.at(node.w, msg.indices, msg.values)
            node.tree.received(sender, msg.indices, msg.values, msg.round)

    def run(self, when: dict[int, int]) -> None:
        t = 0
        while self.step(train=True):
            if t in when:
                self.die(when[t])
            t += 1
            assert t < 200_000, "stalled"


def _run(seed: int, plain: bool = False) -> tuple[SyncTreeSim, dict[int, int]]:
    rng = random.Random(2000 + seed)
    n, k = rng.choice([(7, 2), (15, 2), (13, 3)])
    sim = SyncTreeSim(n, k, seed)
    if plain:
        sim.level_plainly()
    when = deaths(sim, rng, rng.choice([1, 2, 3]), 1500)
    sim.run(when)
    return sim, when


@pytest.mark.parametrize("seed", range(20))
def test_every_sync_survivor_ends_equal_to_the_root(seed: int) -> None:
    sim, when = _run(seed)
    assert all(node.round == ROUNDS for node in sim.survivors()), when
    assert off_root(sim) <= 1e-9, (sim.n, sim.k, when)


def test_without_levelling_a_sync_orphan_would_differ() -> None:
    """The same runs with each resync added as an ordinary message: some survivor ends off
    the root in most of them."""
    off = sum(off_root(_run(seed, plain=True)[0]) > 1e-9 for seed in range(10))
    assert off >= 5, off
