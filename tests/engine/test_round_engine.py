"""The round engine and its rules as plain objects: no server, no thread, no clock."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from hogwild.engine.averaging import MAX_DEFERRED_ROUNDS
from hogwild.engine.round import ModelNotFinite, RoundEngine
from hogwild.engine.rules import (
    ExchangeRules,
    barrier_ready,
    contributing,
    lag,
    may_start,
)
from hogwild.model.compression import Compression

DIM = 9
BIAS = DIM - 1


@dataclass
class Peer:
    round: int = 0
    final: bool = False

    @property
    def settled(self) -> bool:
        return self.final


def _engine(**rules: object) -> RoundEngine:
    base: dict[str, object] = {"averaged_from": BIAS, "n_peers": 2}
    base.update(rules)
    return RoundEngine(ExchangeRules(**base), np.zeros(DIM))  # type: ignore[arg-type]


def test_rules_refuse_unknown_values() -> None:
    with pytest.raises(ValueError, match="mode"):
        ExchangeRules(mode="eventually")
    with pytest.raises(ValueError, match="staleness"):
        ExchangeRules(staleness=0)
    # The setting's bound (the wire's int32), not a restated one.
    with pytest.raises(ValueError, match="'staleness': must be between 1 and 2147483647"):
        ExchangeRules(staleness=1 << 31)
    assert ExchangeRules(staleness=(1 << 31) - 1).staleness == (1 << 31) - 1
    with pytest.raises(ValueError, match="topology"):
        ExchangeRules(topology="ring")


def test_barrier_waits_for_every_live_peer_of_the_round() -> None:
    peers = {1: Peer(round=3), 2: Peer(round=2)}
    assert not barrier_ready(3, peers)
    peers[2].round = 3
    assert barrier_ready(3, peers)
    # A finished (or dropped) peer is never waited for again.
    assert barrier_ready(9, {1: Peer(round=9), 2: Peer(round=1, final=True)})


def test_staleness_gate_holds_a_worker_more_than_s_rounds_ahead() -> None:
    rules = ExchangeRules(mode="async", staleness=2)
    peers = {1: Peer(round=3)}
    assert may_start(rules, 5, peers)       # 5 - 2 = 3: the peer is just in bound
    assert not may_start(rules, 6, peers)
    assert may_start(ExchangeRules(mode="async"), 60, peers)  # unbounded
    assert lag(6, peers) == 3 and lag(6, {1: Peer(round=1, final=True)}) == 0


def test_contributing_counts_live_mesh_peers_and_every_relay_peer() -> None:
    peers = {1: Peer(), 2: Peer(final=True)}
    assert contributing(ExchangeRules(n_peers=2), peers) == 2
    assert contributing(ExchangeRules(n_peers=2, topology="star"), {-1: Peer()}) == 3


def test_two_engines_that_swap_their_deltas_hold_the_same_model() -> None:
    """Sum: each applies the other's delta; both end on the sum of both changes, and
    build/apply never send a worker's peers' changes back to them (snap moves with both)."""
    a, b = _engine(), _engine()
    a.w[[1, 3]] += [0.5, -1.0]
    b.w[[3, 4]] += [2.0, 0.25]
    da = a.build(1, False, lambda: {1: Peer(round=1)})
    db = b.build(1, False, lambda: {0: Peer(round=1)})
    a.apply([db])
    b.apply([da])
    np.testing.assert_array_equal(a.w, b.w)
    np.testing.assert_array_equal(a.w[[1, 3, 4]], [0.5, 1.0, 0.25])
    assert a.build(2, False, dict)[0].size == 0  # nothing new to send


def test_the_averaged_part_is_cut_to_one_over_the_contributors() -> None:
    engine = _engine()  # the bias is averaged, features summed
    engine.w[BIAS] = 3.0
    engine.w[2] = 1.0
    idx, val = engine.build(1, False, lambda: {1: Peer(), 2: Peer()})
    assert dict(zip(idx.tolist(), val.tolist())) == {2: 1.0, BIAS: 1.0}
    assert engine.w[BIAS] == engine.snap[BIAS] == 1.0


def test_async_mesh_keeps_its_own_average_until_the_peers_catch_up() -> None:
    engine = _engine(mode="async")
    peers = {1: Peer(round=0), 2: Peer(round=0)}
    engine.w[BIAS] = 3.0
    _, val = engine.build(1, False, lambda: peers)
    assert val.tolist() == [1.0] and engine.w[BIAS] == 3.0  # sent 1/3, kept it all
    engine.settle(peers)
    assert engine.w[BIAS] == 3.0  # the peers have not sent round 1 yet
    peers[1].round = peers[2].round = 1
    engine.settle(peers)
    assert engine.w[BIAS] == engine.snap[BIAS] == 1.0
    # Never more than MAX_DEFERRED_ROUNDS own rounds held, however far behind the peers.
    for r in range(2, MAX_DEFERRED_ROUNDS + 4):
        engine.w[BIAS] += 3.0
        engine.build(r, False, lambda: {1: Peer(round=1), 2: Peer(round=1)})
        assert len(engine.averaging.deferred) <= MAX_DEFERRED_ROUNDS


def test_a_non_finite_model_is_never_sent() -> None:
    engine = _engine()
    engine.w[4] = np.inf
    with pytest.raises(ModelNotFinite):
        engine.build(1, False, dict)
    engine = _engine()
    engine.w[4] = 1e300  # finite in float64, not in float32
    with pytest.raises(ModelNotFinite):
        engine.build(1, False, dict)


def test_compression_keeps_the_rest_in_the_residual_and_the_final_sends_it() -> None:
    engine = _engine(compression=Compression(0.0, 1, False))
    engine.w[[1, 2]] = [0.5, 5.0]
    idx, _ = engine.build(1, False, dict)
    assert idx.tolist() == [2] and engine.w[1] - engine.snap[1] == 0.5
    idx, _ = engine.build(2, True, dict)
    assert idx.tolist() == [1] and np.array_equal(engine.w, engine.snap)


def test_a_delta_outside_the_model_is_refused_whole() -> None:
    engine = _engine()
    bad = (np.array([1, DIM], dtype=np.int32), np.array([1.0, 1.0], dtype=np.float32))
    with pytest.raises(Exception, match="apply_delta"):
        engine.apply([bad])
    assert not engine.w.any()


def test_load_starts_from_a_model_that_owes_nothing() -> None:
    engine = _engine()
    engine.load(np.arange(DIM, dtype=np.float64))
    assert engine.build(1, False, dict)[0].size == 0
    assert engine.w[5] == 5.0
