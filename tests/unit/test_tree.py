"""Topology tree: the heap layout (parent, children, depth, who is cut off by a death) and the
up/down sums (every node applies every other node's contribution exactly once)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from hogwild.engine.tree import TreeLinks
from hogwild.engine.treeshape import (
    COORDINATOR,
    ancestors,
    between,
    children,
    depth,
    height,
    live_children,
    live_parent,
    parent,
    same_side,
)


def test_layout_of_seven_workers_in_a_binary_tree() -> None:
    assert children(COORDINATOR, 2, 7) == [0, 1]
    assert children(0, 2, 7) == [2, 3]
    assert children(1, 2, 7) == [4, 5]
    assert children(2, 2, 7) == [6]
    assert children(3, 2, 7) == []
    assert [parent(w, 2) for w in range(7)] == [-1, -1, 0, 0, 1, 1, 2]
    assert [depth(w, 2) for w in range(7)] == [1, 1, 2, 2, 2, 2, 3]
    assert height(7, 2) == 3 and height(0, 2) == 0 and height(1, 4) == 1


@pytest.mark.parametrize("k", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [1, 2, 5, 16, 64, 100])
def test_every_worker_is_its_parents_child_once(n: int, k: int) -> None:
    seen = []
    for node in [COORDINATOR, *range(n)]:
        kids = children(node, k, n)
        assert len(kids) <= k
        for c in kids:
            assert parent(c, k) == node
        seen += kids
    assert sorted(seen) == list(range(n))  # a spanning tree: n edges, each worker once
    # depth is logarithmic: the coordinator plus full levels of k^d nodes
    assert height(n, k) == next(d for d in range(1, 64) if sum(k**i for i in range(1, d + 1)) >= n)


def test_re_attachment_goes_to_the_nearest_live_ancestor() -> None:
    # binary tree of 15: 0 -> 2,3; 2 -> 6,7; 6 -> 14
    assert live_parent(14, 2, dead=[6]) == 2
    assert live_parent(14, 2, dead=[6, 2]) == 0
    assert live_parent(14, 2, dead=[6, 2, 0]) == COORDINATOR
    assert live_children(0, 2, 15, dead=[2]) == [3, 6, 7]
    assert live_children(0, 2, 15, dead=[2, 6]) == [3, 7, 14]
    assert live_children(COORDINATOR, 2, 15, dead=[0]) == [1, 2, 3]


def test_heap_paths_and_sides() -> None:
    assert ancestors(14, 2) == [6, 2, 0] and ancestors(1, 2) == []
    assert between(14, 0, 2) == [6, 2] and sorted(between(0, 14, 2) or []) == [2, 6]
    assert between(14, -1, 2) == [6, 2, 0] and between(2, 6, 2) == []
    assert between(3, 4, 2) is None                # cousins: no path up or down
    # seen from worker 2 (parent 0, children 6 and 7)
    assert same_side(2, 0, -1, 2)                  # both above it
    assert same_side(2, 6, 14, 2)                  # both below, through child 6
    assert not same_side(2, 6, 7, 2)               # two children
    assert not same_side(2, 0, 6, 2)               # parent and child
    assert same_side(-1, 0, 6, 2) and not same_side(-1, 0, 1, 2)


# ----------------------------------------------------------- sums over a simulated tree


@dataclass
class _Peer:
    round: int = 0
    final: bool = False
    dropped: bool = False

    @property
    def settled(self) -> bool:
        return self.final or self.dropped


class _Node:
    """One node of the simulation: its links, its model, what it knows of its neighbours."""

    def __init__(self, me: int, neighbours: list[int], dim: int) -> None:
        self.me = me
        self.links = TreeLinks(neighbours)
        self.peers = {nbr: _Peer() for nbr in neighbours}
        self.model = np.zeros(dim)
        self.round = 0
        self.finished = False


def _sim_tree(n: int, k: int, dim: int) -> dict[int, _Node]:
    nodes = {COORDINATOR: _Node(COORDINATOR, children(COORDINATOR, k, n), dim)}
    for w in range(n):
        nodes[w] = _Node(w, [parent(w, k), *children(w, k, n)], dim)
    return nodes


def _own(w: int, r: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker w's hand-made round-r delta: its own coordinate (value 1.0) plus a shared one
    (value w + 1) that every worker touches."""
    return (np.array([0, 1 + (r - 1) * n + w], dtype=np.int32),
            np.array([float(w + 1), 1.0], dtype=np.float32))


def _pump(nodes: dict[int, _Node], sync: bool) -> int:
    """Deliver every due message once (in node order); the number delivered."""
    sent = 0
    for node in nodes.values():
        for f in node.links.due(node.round, node.finished, node.peers, sync):
            to = nodes[f.neighbour]
            to.model[f.indices] += f.values
            status = to.peers[node.me]
            status.round = max(status.round, f.round)
            status.final = status.final or f.final
            to.links.received(node.me, f.indices, f.values)
            sent += 1
    return sent


def _own_round(nodes: dict[int, _Node], r: int, n: int) -> None:
    for w in range(n):
        idx, val = _own(w, r, n)
        nodes[w].model[idx] += val
        nodes[w].links.own(idx, val)
        nodes[w].round = r


@pytest.mark.parametrize(("n", "k"), [(2, 2), (4, 2), (5, 2), (13, 3), (21, 4)])
def test_sync_rounds_apply_every_contribution_exactly_once(n: int, k: int) -> None:
    rounds = 3
    dim = 1 + rounds * n
    nodes = _sim_tree(n, k, dim)
    nodes[COORDINATOR].round = 10**9       # the root has nothing of its own to wait for
    for r in range(1, rounds + 1):
        _own_round(nodes, r, n)
        messages = 0
        while (m := _pump(nodes, sync=True)):
            messages += m
        # one message per edge and direction: 2n
        assert messages == 2 * n
        for w in range(n):
            # the barrier of round r is met: every neighbour vouched for round r ...
            assert all(p.round >= r for p in nodes[w].peers.values())
            # ... and every contribution of rounds <= r is applied, each once
            expect = np.zeros(dim)
            expect[0] = r * n * (n + 1) / 2
            expect[1:1 + r * n] = 1.0
            np.testing.assert_array_equal(nodes[w].model, expect)
        np.testing.assert_array_equal(nodes[COORDINATOR].model, nodes[0].model)
    for node in nodes.values():
        node.finished = True
    while _pump(nodes, sync=True):
        pass
    for node in nodes.values():
        assert node.links.settled(node.peers)


def test_async_and_a_dropped_leaf_keep_the_sums_exact() -> None:
    n, k, rounds = 5, 2, 4
    dim = 1 + rounds * n
    nodes = _sim_tree(n, k, dim)
    nodes[COORDINATOR].finished = True
    for r in range(1, rounds + 1):
        _own_round(nodes, r, n)
        _pump(nodes, sync=False)            # async: one pass, whatever is owed goes
    # leaf 4 (child of 1) dies after round 2's own delta went up
    for w in range(n):
        nodes[w].finished = True
    nodes[1].peers[4].dropped = True
    del nodes[4]
    while _pump(nodes, sync=False):
        pass
    for node in nodes.values():
        assert node.links.settled(node.peers)
    for w in range(4):
        np.testing.assert_array_equal(nodes[w].model, nodes[COORDINATOR].model)
    # each contribution applied once everywhere, the dead leaf's that left it included
    assert set(np.unique(nodes[0].model[1:])) <= {1.0}


def test_a_final_waits_for_every_other_neighbours_final() -> None:
    links = TreeLinks([COORDINATOR, 7, 8])
    peers = {COORDINATOR: _Peer(round=5), 7: _Peer(round=5, final=True), 8: _Peer(round=5)}
    links.own(np.array([1], dtype=np.int32), np.array([2.0], dtype=np.float32))
    out = {f.neighbour: f for f in links.due(5, True, peers, sync=True)}
    assert not any(f.final for f in out.values())
    peers[8].final = True
    out = {f.neighbour: f for f in links.due(5, True, peers, sync=True)}
    assert list(out) == [COORDINATOR] and out[COORDINATOR].final  # 7 and 8 wait for it
    peers[COORDINATOR].final = True
    out = {f.neighbour: f for f in links.due(5, True, peers, sync=True)}
    assert sorted(out) == [7, 8] and all(f.final for f in out.values())
    assert links.settled(peers)


def test_re_attachment_around_a_dead_interior_worker_keeps_the_sums_exact() -> None:
    """Worker 0 (children 2 and 3) dies at a round boundary; 2 and 3 re-attach to the
    coordinator, which adopts them: every survivor still applies every contribution once."""
    n, k, rounds = 5, 2, 4
    dim = 1 + rounds * n
    nodes = _sim_tree(n, k, dim)
    for w, node in nodes.items():
        node.links.same_side = lambda a, b, me=w: same_side(me, a, b, k)
    nodes[COORDINATOR].round = 10**9
    for r in (1, 2):
        _own_round(nodes, r, n)
        while _pump(nodes, sync=True):
            pass
    dead = nodes.pop(0)
    assert dead.links.neighbours == [COORDINATOR, 2, 3]
    root = nodes[COORDINATOR]
    root.peers[0].dropped = True
    for c in live_children(COORDINATOR, k, n, [0]):
        if c not in root.links.neighbours:
            root.links.adopt(c, [x for x in [0] if root.links.same_side(x, c)])
            root.peers[c] = _Peer()
    for c in (2, 3):
        node = nodes[c]
        node.peers[0].dropped = True
        node.links.remove(0)
        assert live_parent(c, k, [0]) == COORDINATOR
        node.links.adopt(COORDINATOR, [0])
        node.peers[COORDINATOR] = _Peer()
    for r in (3, 4):
        for w in (1, 2, 3, 4):
            idx, val = _own(w, r, n)
            nodes[w].model[idx] += val
            nodes[w].links.own(idx, val)
            nodes[w].round = r
        while _pump(nodes, sync=True):
            pass
    for w in (1, 2, 3, 4):
        np.testing.assert_array_equal(nodes[w].model, root.model)
    expect = np.zeros(dim)
    expect[1:1 + 2 * n] = 1.0                       # rounds 1-2: all five, worker 0 included
    for r in (3, 4):
        expect[[1 + (r - 1) * n + w for w in (1, 2, 3, 4)]] = 1.0
    expect[0] = 2 * 15 + 2 * (2 + 3 + 4 + 5)
    np.testing.assert_array_equal(root.model, expect)


def test_a_new_edge_is_greeted_at_once_with_what_is_owed_and_the_round() -> None:
    """async: after a re-attachment the first message on the new edge goes at once, empty
    if nothing is owed, so a staleness bound at the other end sees this node's round."""
    links = TreeLinks([0, 7])
    links.own(np.array([1], dtype=np.int32), np.array([2.0], dtype=np.float32))
    # The parent died before it got the own delta; the coordinator replaces it, owed what
    # 0 never got (adopted first, as the node does, then 0 is forgotten).
    links.adopt(COORDINATOR, [0])
    links.remove(0)
    first = links.greet(COORDINATOR, 12)
    assert (first.neighbour, first.round, first.final) == (COORDINATOR, 12, False)
    np.testing.assert_array_equal(first.indices, [1])
    np.testing.assert_array_equal(first.values, [2.0])
    assert links.greet(7, 12).indices.shape == (1,)  # 7 was owed the own delta too
    again = links.greet(7, 12)           # nothing owed now: still a message, with the round
    assert again.round == 12 and again.indices.shape == (0,)
    assert links.greet(COORDINATOR, 3).round == 12  # a label never goes back


def test_a_resumed_run_labels_from_the_checkpoint_round_on() -> None:
    # Every node holds rounds <= 5 already: nothing is due until a neighbour's round 6 is in,
    # and the first message says 6.
    links = TreeLinks([COORDINATOR, 7], rounds_done=5)
    peers = {COORDINATOR: _Peer(round=5), 7: _Peer(round=5)}
    links.own(np.array([1], dtype=np.int32), np.array([2.0], dtype=np.float32))
    assert links.due(6, False, peers, sync=True) == []
    peers[7].round = 6
    out = links.due(6, False, peers, sync=True)
    assert [(f.neighbour, f.round) for f in out] == [(COORDINATOR, 6)]
