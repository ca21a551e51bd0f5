"""The round driver alone, over a fake inbox and outbox: the sync barrier, the async
staleness gate, the final delta."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from hogwild.engine.driver import Next, Part, RoundDriver
from hogwild.engine.round import ModelNotFinite, RoundEngine
from hogwild.engine.rules import ExchangeRules


@dataclass
class Peer:
    round: int = 0
    settled: bool = False


@dataclass
class FakeInbox:
    table: dict[int, Peer]
    queued: list[Part] = field(default_factory=list)

    def peers(self) -> dict[int, Peer]:
        return self.table

    def take(self) -> Sequence[Part]:
        items, self.queued = self.queued, []
        return items

    def arrive(self, peer: int, round_: int, index: int, value: float,
               final: bool = False) -> None:
        self.table[peer].round = round_
        self.table[peer].settled = self.table[peer].settled or final
        self.queued.append((np.array([index], np.int32), np.array([value], np.float32)))


@dataclass
class FakeOutbox:
    sent: list[tuple[int, bool, dict[int, float]]] = field(default_factory=list)

    def send(self, round_: int, final: bool, indices: np.ndarray, values: np.ndarray) -> None:
        self.sent.append((round_, final, dict(zip(indices.tolist(), values.tolist()))))


def driver(mode: str, staleness: int | None = None, max_rounds: int = 3,
           peers: int = 2) -> tuple[RoundDriver, FakeInbox, FakeOutbox]:
    rules = ExchangeRules(mode=mode, staleness=staleness, n_peers=peers, averaged_from=8)
    engine = RoundEngine(rules, np.zeros(8))
    inbox, outbox = FakeInbox({p: Peer() for p in range(1, peers + 1)}), FakeOutbox()
    return RoundDriver(engine, inbox, outbox.send, 1, max_rounds), inbox, outbox


def test_sync_waits_at_the_barrier_until_every_peer_sent_the_round() -> None:
    d, inbox, outbox = driver("sync")
    assert d.may_start(1) and not d.may_start(2)
    d.engine.w[0] = 1.0  # what round 1 trained
    inbox.arrive(1, 1, 3, 0.5)  # one peer's round 1 is in before this worker's boundary
    assert d.on_round_trained(1) is Next.BARRIER
    assert outbox.sent == [(1, False, {0: 1.0})]
    assert d.engine.w[3] == 0.5  # what arrived is applied before the own delta is built
    assert not d.may_start(2) and not d.unblocked(inbox.peers())
    inbox.arrive(1, 2, 3, 0.25)  # a peer running ahead does not open the barrier
    assert d.on_arrival() is Next.BARRIER and d.engine.w[3] == 0.5  # nor is it applied yet
    inbox.arrive(2, 1, 4, 2.0)
    assert d.unblocked(inbox.peers())
    assert d.on_arrival() is Next.TRAIN
    assert d.may_start(2) and not d.may_start(3)
    assert d.engine.w[3] == 0.75 and d.engine.w[4] == 2.0  # applied at the barrier
    assert d.on_arrival() is None  # training: nothing to go on from


def test_sync_barrier_does_not_wait_for_a_settled_peer() -> None:
    d, inbox, _ = driver("sync")
    inbox.table[2].settled = True  # dropped (or finished)
    inbox.arrive(1, 1, 0, 1.0)
    assert d.on_round_trained(1) is Next.TRAIN


def test_async_gate_holds_a_worker_more_than_staleness_rounds_ahead() -> None:
    d, inbox, outbox = driver("async", staleness=1, max_rounds=5)
    inbox.table[1].round = 5
    assert not d.may_start(2)  # round 2 done, peer 2 (round 0) would be 2 behind
    inbox.arrive(2, 1, 5, 1.0)
    assert d.on_round_trained(1) is Next.TRAIN and d.may_start(2)
    assert d.on_round_trained(2) is Next.GATED  # round 3 would put peer 2 (round 1) 2 behind
    assert not d.may_start(3) and d.may_start(2)
    assert [r for r, _, _ in outbox.sent] == [1, 2]  # sent anyway: only the start waits
    inbox.arrive(1, 6, 6, 1.0)  # the peer ahead: no use to the gate
    # Async: what arrives is applied at once, gated or not.
    assert d.on_arrival() is Next.GATED and d.engine.w[6] == 1.0
    inbox.arrive(2, 2, 5, 1.0)
    assert d.on_arrival() is Next.TRAIN and d.may_start(3) and d.engine.w[5] == 2.0


def test_async_without_a_bound_never_waits() -> None:
    d, _, _ = driver("async", staleness=None, max_rounds=10)
    for r in range(1, 10):
        assert d.on_round_trained(r) is Next.TRAIN


def test_the_last_round_ends_in_the_final_delta_of_everything_left() -> None:
    d, inbox, outbox = driver("sync", max_rounds=2)
    for r in (1, 2):
        d.engine.w[0] += 1.0
        inbox.arrive(1, r, 1, 1.0)
        inbox.arrive(2, r, 2, 1.0)
        step = d.on_round_trained(r)
    assert step is Next.FINISH
    inbox.arrive(1, 2, 6, 3.0, final=True)
    assert not d.peers_settled()
    d.engine.w[7] = 0.5  # trained after the last boundary (a stop): the final carries it
    assert d.finish() is Next.DONE
    assert outbox.sent[-1] == (2, True, {7: 0.5})
    assert d.engine.w[6] == 3.0  # applied before the final was built
    inbox.arrive(2, 2, 2, 0.0, final=True)
    assert d.peers_settled()


def test_a_diverged_model_is_never_sent() -> None:
    d, _, outbox = driver("sync")
    d.engine.w[0] = np.inf
    with pytest.raises(ModelNotFinite):
        d.on_round_trained(1)
    assert outbox.sent == []
