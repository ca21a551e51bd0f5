"""Topology tree, sync: a worker that adopts the orphan of a dead child (a death below the
coordinator's children) takes the orphan's re-sent messages that the dead child had passed
on as known (not summed twice) and owes the orphan what went through the dead child and
never reached it."""

from __future__ import annotations

import numpy as np

from hogwild.engine.tree import EDGE_ROUNDS_KEPT, TreeLinks
from hogwild.engine.treeshape import same_side

DIM = 8
UP = -1  # the parent of worker 0 (the coordinator, as a neighbour id here)


class Peer:
    def __init__(self, round_: int) -> None:
        self.round, self.dropped, self.settled = round_, False, False


def _sparse(entries: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    idx = np.array(sorted(entries), np.int32)
    return idx, np.array([entries[i] for i in sorted(entries)], np.float64)


def _dense(idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    out = np.zeros(DIM)
    np.add.at(out, idx, val)
    return out


def _worker_0() -> TreeLinks:
    """Worker 0 of 7, fan-out 2: parent the coordinator, children 2 and 3; 6 is 2's child."""
    links = TreeLinks([UP, 2, 3], lambda a, b: same_side(0, a, b, 2))
    links.parent = UP
    return links


def _two_rounds(links: TreeLinks) -> None:
    """Rounds 1 and 2 at worker 0: from the parent {1: r}, from 2 its own {2: r} and 6's
    {6: r} summed, from 3 {3: r}, its own {0: r}; every message due goes."""
    for r in (1, 2):
        links.received(UP, *_sparse({1: float(r)}), r)
        links.received(2, *_sparse({2: float(r), 6: float(r)}), r)
        links.received(3, *_sparse({3: float(r)}), r)
        links.own(*_sparse({0: float(r)}))
        links.due(r, False, {UP: Peer(r), 2: Peer(r), 3: Peer(r)}, sync=True)


def _adopt_6_for_dead_2(links: TreeLinks) -> None:
    links.adopt(6, [2], orphan=True)
    links.remove(2)


def test_the_orphan_of_a_dead_child_resends_nothing_twice_and_gets_what_it_missed() -> None:
    """6 heard round 1 complete from 2, which passed 6's round 2 up and died before passing
    round 2 down: 6's re-sent round 2 is known (owed to nobody) and 6 is owed round 2 as 2
    had it (what 0 sent it, and what 2 sent up less 6's own part)."""
    links = _worker_0()
    _two_rounds(links)
    _adopt_6_for_dead_2(links)
    assert links.known(6, 2)
    assert links.arrived(6, 2, *_sparse({6: 2.0}))
    assert links.resent_known == 1 and links.catch_up_missed == 0
    assert not links.owed(UP) and not links.owed(3)
    # 6's next message is new: owed up and to 3 as usual, not back to 6.
    assert not links.known(6, 3) and not links.arrived(6, 3, *_sparse({6: 3.0}))
    links.received(6, *_sparse({6: 3.0}), 3)
    np.testing.assert_array_equal(_dense(*links.take(UP)), _dense(*_sparse({6: 3.0})))
    got = _dense(*links.take(6))
    # Round 2 as 2 had it: the parent's {1: 2} and 3's {3: 2}, 0's own {0: 2}, 2's own {2: 2};
    # not 6's own {6: 2} (nor its round 3).
    np.testing.assert_array_equal(got, _dense(*_sparse({0: 2.0, 1: 2.0, 2: 2.0, 3: 2.0})))


def test_an_orphan_that_heard_every_round_is_owed_nothing_more() -> None:
    links = _worker_0()
    _two_rounds(links)
    _adopt_6_for_dead_2(links)
    # Its first message is round 3: it heard round 2 complete from 2.
    assert not links.arrived(6, 3, *_sparse({6: 3.0}))
    assert 6 not in links.orphans
    assert not links.owed(6)


def test_rounds_no_longer_kept_are_counted() -> None:
    links = _worker_0()
    for r in range(1, EDGE_ROUNDS_KEPT + 3):
        links.received(2, *_sparse({2: 1.0}), r)
        links.due(r, False, {UP: Peer(r), 2: Peer(r), 3: Peer(r)}, sync=True)
    _adopt_6_for_dead_2(links)
    # It last heard round 0 and re-sends every round (all held here already); once the last
    # known one is in, it is caught up, less the 2 oldest rounds, no longer kept.
    for r in range(1, EDGE_ROUNDS_KEPT + 3):
        assert links.arrived(6, r, *_sparse({6: 1.0}))
    assert links.catch_up_missed == 2 and 6 not in links.orphans
