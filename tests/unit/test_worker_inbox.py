"""The worker's inbox: where each peer's round starts."""

from __future__ import annotations

from hogwild.cluster.worker.inbox import Inbox


def test_peers_start_at_the_rounds_everyone_holds() -> None:
    # A resumed run's workers start after the checkpoint's round 41: its peers, and any
    # neighbour adopted later, count as done with it (a staleness bound then lets round 42
    # start; counted from 0 it waited for rounds nobody would send).
    inbox = Inbox({1: "a:1", 2: "a:2"}, rounds_done=41)
    inbox.add(3, "a:3")
    assert {pid: p.round for pid, p in inbox.snapshot().items()} == {1: 41, 2: 41, 3: 41}
    assert all(p.round == 0 for p in Inbox({1: "a:1"}).snapshot().values())
