"""Topology tree, sync: a worker that adopts the orphan of a dead child (a death below the
coordinator's children) takes the orphan's re-sent messages that the dead child had passed
on as known (not summed twice) and owes the orphan what went through the dead child and
never reached it."""

from __future__ import annotations

import numpy as np

from hogwild.engine.tree import TreeLinks
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
    links.adopt(6, [2], orphan=True, sync=True)
    links.remove(2)


def test_the_orphan_of_a_dead_child_resends_nothing_twice_and_is_levelled() -> None:
    """6 heard round 1 complete from 2, which passed 6's round 2 up and died before passing
    round 2 down: 6's re-sent round 2 is known (owed to nobody), and 6 is sent everything
    that crossed 2's edge, labelled with the last round sent to 2, its own messages of
    rounds up to 2 among it."""
    links = _worker_0()
    links.track(DIM)
    _two_rounds(links)
    _adopt_6_for_dead_2(links)
    assert links.known(6, 2) and links.known(6, 1)
    resync = links.take_resync(6, 2, sync=True)
    assert resync is not None and (resync.round, resync.resync_cut) == (2, 2)
    # Up 2's edge: {2: r, 6: r}; down it: the parent's {1: r}, 3's {3: r}, 0's own {0: r}.
    np.testing.assert_array_equal(_dense(resync.indices, resync.values),
                                  _dense(*_sparse({0: 3.0, 1: 3.0, 2: 3.0, 3: 3.0, 6: 3.0})))
    assert links.take_resync(6, 2, sync=True) is None
    # 6's next message is new: owed up and to 3 as usual, not back to 6; labels on the new
    # edge go on from the dead one's.
    assert not links.known(6, 3)
    links.received(6, *_sparse({6: 3.0}), 3)
    np.testing.assert_array_equal(_dense(*links.take(UP)), _dense(*_sparse({6: 3.0})))
    assert not links.owed(6) and links.sent_round[6] == 2


def test_a_sync_orphan_is_levelled_with_its_new_parents_world() -> None:
    """6 under 2: it sent rounds 1-3 up; 2 sent it rounds 1 and 2 ({1: 1}, {2: 2}); 2's sums
    up held 6's rounds 1 and 2 when it died. Its new parent's world of 2's edge holds 6's
    rounds 1-2, its sibling's {3: 3} (passed up, never down) and {1: 1} (sent down to 2);
    2's own {2: 2} reached 6 and nobody else."""
    links = TreeLinks([2], lambda a, b: same_side(6, a, b, 2))
    links.parent = 2
    links.track(DIM)
    for r, j in enumerate([5, 6, 7], start=1):
        links.own(*_sparse({j: float(j)}))
        links.due(r, False, {2: Peer(r - 1)}, sync=True)
    links.received(2, *_sparse({1: 1.0}), 1)
    links.received(2, *_sparse({2: 2.0}), 2)
    links.passed(2)  # 2's round 2 vouched for 6's messages of rounds up to 2
    assert [label for label, _, _ in links.retained] == [3]
    links.orphaned(sync=True)
    assert links.view is not None
    change = links.view.level(2, [_sparse({1: 1.0, 3: 3.0, 5: 5.0, 6: 6.0})])
    assert change is not None
    np.testing.assert_array_equal(_dense(*change), _dense(*_sparse({2: -2.0, 3: 3.0})))


def test_an_orphan_adopted_around_a_dead_orphan_keeps_the_cut() -> None:
    """6 was adopted around 2 and was dead itself: its child 14 comes through 6's edge,
    which carried only 6's resync (2's world): 14's messages of rounds up to 2 are in it."""
    links = TreeLinks([UP, 2, 3], lambda a, b: same_side(0, a, b, 2))
    links.parent = UP
    links.track(32)
    _two_rounds(links)
    _adopt_6_for_dead_2(links)
    first = links.take_resync(6, 2, sync=True)
    assert first is not None
    links.adopt(14, [6], orphan=True, sync=True)
    links.remove(6)
    assert links.known(14, 2) and not links.known(14, 3)
    second = links.take_resync(14, 2, sync=True)
    assert second is not None and (second.round, second.resync_cut) == (2, 2)
    np.testing.assert_array_equal(second.values, first.values)
