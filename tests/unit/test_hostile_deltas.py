"""A member of the run (its own id and key) sending deltas the protocol never produces: a round
far ahead of the receiver, parts counts and part numbers that would fill dedup memory. And a
stranger naming worker ids: every refusal alike, whatever it names."""

from __future__ import annotations

import functools
import time
from typing import Any

import grpc
import numpy as np
import pytest

from hogwild import config
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import SYNC_ROUNDS_AHEAD as RELAY_AHEAD
from hogwild.cluster.coordinator.sums.relay import StarRelay
from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import (
    MAX_EXAMPLES,
    MAX_ROUND,
    MIN_DELTA_CHUNK_BYTES,
    DeltaHeader,
    decode_delta,
    encode_delta,
    encode_delta_parts,
    max_delta_parts,
)
from hogwild.cluster.wire.sequence import OUT_OF_ORDER, WINDOW, SequenceTracker
from hogwild.cluster.worker.admission import ROUND_SLACK, SYNC_ROUNDS_AHEAD
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.node import WorkerNode
from hogwild.cluster.worker.phase import Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.tree_relay import _same_side
from hogwild.engine.round import RoundEngine
from hogwild.engine.rules import may_start
from hogwild.engine.tree import TreeLinks
from hogwild.errors import InvalidMessage, NotAllowed, NotReady, StaleOrUnknown

N_FEATURES = 1000
DIM = N_FEATURES + 1
RUN = "run-1"
COORDINATOR_KEY = "coordinator-key"
U64 = 2**64 - 1


def _key(sender: int) -> str:
    return f"key-of-{sender}"


def _message(sender: int, round_: int, seq: int = 1, idx: tuple[int, ...] = (3,),
             val: tuple[float, ...] = (0.5,), **fields: Any) -> pb.Delta:
    message = encode_delta(DeltaHeader(RUN, sender, round_, seq, DIM),
                           np.array(idx, np.int32), np.array(val, np.float32))
    for name, value in fields.items():
        setattr(message, name, value)
    return pb.Delta.FromString(message.SerializeToString())


def _node(me: int = 0, n: int = 3, mode: str = "sync", staleness: int = -1,
          topology: str = "mesh", rounds: int = 10, max_rounds: int = 1000,
          phase: Phase = Phase.RUNNING) -> WorkerNode:
    """A worker configured in a run of ``n`` workers and running at round ``rounds``, without
    a shard or a server (what push_delta and check_peer look at)."""
    node = WorkerNode(config.load(None, {}, {"bind_host": "127.0.0.1", "workers": n}))
    plan = RunPlan.from_message(pb.RunConfig(
        protocol_version=PROTOCOL_VERSION, run_id=RUN, worker_id=me,
        peers=[pb.Peer(worker_id=p, address=f"127.0.0.1:{p + 1}", send_key=f"to-{p}",
                       receive_key=_key(p)) for p in range(n) if p != me],
        dim=DIM, n_features=N_FEATURES, mode=mode, staleness=staleness, threads=1,
        round_size=10, max_rounds=max_rounds, train_rows=100, loss="hinge",
        learning_rate=0.1, lr_schedule="constant", lr_decay=0.9, power_t=0.5, fit_bias=True,
        barrier_timeout=2.0, rpc_timeout=2.0, topology=topology, tree_fanout=2))
    node.run_id, node.worker_id, node.coordinator_key = RUN, me, COORDINATOR_KEY
    node.plan = plan
    node.engine = RoundEngine(plan.rules, np.zeros(plan.dim))
    node.inbox = Inbox(node.senders(plan), plan.first_round - 1)
    if topology == "tree":
        node.relay.tree = TreeLinks(node.senders(plan),
                                    functools.partial(_same_side, me, plan.tree_fanout), 0)
    node.counters.rounds, node.phase = rounds, phase
    return node


def _push(node: WorkerNode, message: pb.Delta) -> bool:
    """As the Worker service does: the caller's key first, then the delta."""
    node.check_peer(message.worker_id, _key(message.worker_id))
    return node.push_delta(message)


def _round_done(node: WorkerNode, round_: int) -> bool:
    """Whether the sync barrier of ``round_`` would let this worker go on now."""
    return node.inbox.wait(lambda peers: all(p.settled or p.round >= round_
                                             for p in peers.values()), 0.0)


# ------------------------------------------------------- (A) a round far ahead: the worker


def test_a_round_no_run_reaches_is_refused_before_it_is_looked_at() -> None:
    for round_ in (U64, MAX_ROUND + 1):
        with pytest.raises(InvalidMessage, match="round"):
            decode_delta(_message(1, round_), DIM)
    assert decode_delta(_message(1, MAX_ROUND), DIM).header.round == MAX_ROUND
    with pytest.raises(InvalidMessage, match="example count"):
        decode_delta(_message(1, 1, examples=MAX_EXAMPLES + 1), DIM)


def test_sync_a_peer_cannot_vouch_for_rounds_it_never_sent() -> None:
    """Mesh, sync: worker 1, which never trains, sends one delta labelled far ahead. It is
    refused, and worker 0's barrier still waits for worker 1's round 11."""
    node = _node(rounds=10)
    for round_ in (U64, 2**40, 10 + SYNC_ROUNDS_AHEAD + ROUND_SLACK + 1):
        with pytest.raises(InvalidMessage, match="round"):
            _push(node, _message(1, round_))
    assert node.inbox.peers[1].round == 0 and node.inbox.queued() == 0
    assert not node.w.any()
    assert not _push(node, _message(2, 11))
    assert not _round_done(node, 11)                    # still waiting for worker 1
    # Nothing of the refused one was recorded: its seq 1 is still worker 1's to send.
    assert not _push(node, _message(1, 11))
    assert _round_done(node, 11)
    assert node.loop.apply_inbox() == 2 and node.w[3] == 1.0


def test_sync_a_peer_one_round_ahead_is_taken_even_while_this_worker_lags() -> None:
    """A peer passes its barrier of round r once this worker's round-r delta is out, which
    may reach it before this worker's ``rounds`` says r: r + 2 is legitimate."""
    node = _node(rounds=10)
    assert not _push(node, _message(1, 12))
    assert node.inbox.peers[1].round == 12


@pytest.mark.parametrize("staleness", [1, 3])
def test_async_staleness_bounds_how_far_ahead_a_peer_may_be(staleness: int) -> None:
    node = _node(mode="async", staleness=staleness, rounds=10)
    legit = 10 + staleness + 2                          # see Admission.round_limit
    assert not _push(node, _message(1, legit))
    with pytest.raises(InvalidMessage, match="round"):
        _push(node, _message(1, legit + ROUND_SLACK + 1, seq=2))
    assert node.inbox.peers[1].round == legit


def _peer_joined(node: WorkerNode, peer: int, first_round: int) -> int:
    """The coordinator takes ``peer`` back, starting it at ``first_round`` or later."""
    return node.peer_joined(pb.PeerJoinedRequest(
        protocol_version=PROTOCOL_VERSION, run_id=RUN, worker_id=peer,
        address=f"127.0.0.1:{peer + 1}", first_round=first_round))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rejoiner_may_be_as_far_ahead_as_the_run_it_was_taken_back_into(mode: str) -> None:
    """Worker 0 lags the run (slow, or just unfrozen: the others went on without it) when
    worker 1 is taken back at the run's round 100. Worker 1's deltas from there on are taken
    (they were refused, and the two waited on each other for good), and worker 0 does not
    wait for rounds before it; the bound still holds, counted from there."""
    node = _node(mode=mode, staleness=2 if mode == "async" else -1, rounds=10)
    assert _peer_joined(node, 1, 100) == 11
    status = node.inbox.peers[1]
    assert status.round == 99 and not status.dropped
    assert not _push(node, _message(1, 100))
    assert node.inbox.peers[1].round == 100
    ahead = SYNC_ROUNDS_AHEAD if mode == "sync" else 2 + 2
    with pytest.raises(InvalidMessage, match="round"):
        _push(node, _message(1, 99 + ahead + ROUND_SLACK + 1, seq=2))
    # Another peer, not taken back, is bounded by this worker's own round as before.
    with pytest.raises(InvalidMessage, match=rf"at most {10 + ahead + ROUND_SLACK}\)"):
        _push(node, _message(2, 100))


def test_a_peer_joined_after_the_runs_last_round_is_refused() -> None:
    node = _node(rounds=10, max_rounds=500)
    with pytest.raises(InvalidMessage, match="after max_rounds"):
        _peer_joined(node, 1, 502)
    assert node.inbox.peers[1].since == 0


def test_a_waiting_worker_drops_a_live_peer_whose_delta_it_refused_as_too_far_ahead() -> None:
    """A refused delta is lost (the sender does not retry a refusal). A worker waiting on the
    peer (here: its silence check at the barrier) drops it and says so, rather than wait, for
    good, for a round it refused while the peer, alive, heartbeats on; a peer whose later
    delta was taken is waited for as before."""
    node = _node(rounds=10)
    assert node.plan is not None
    with pytest.raises(InvalidMessage, match="round"):
        _push(node, _message(1, 10 + SYNC_ROUNDS_AHEAD + ROUND_SLACK + 1))
    with pytest.raises(InvalidMessage, match="round"):
        _push(node, _message(2, 10 + SYNC_ROUNDS_AHEAD + ROUND_SLACK + 1))
    assert not _push(node, _message(2, 11))
    node.inbox.touch_all()
    node.liveness.drop_silent(node.plan, 11, "waiting for round 11")
    assert node.inbox.peers[1].dropped and not node.inbox.peers[2].dropped
    assert 1 in node.reported_down


def test_unbounded_async_and_a_worker_not_training_bound_by_the_run_length() -> None:
    """Nobody waits for anybody in unbounded async, nor for a worker not started yet (a
    rejoin: its peers go on) or finishing: any round up to the run's last goes."""
    for node in (_node(mode="async", rounds=10, max_rounds=500),
                 _node(rounds=0, max_rounds=500, phase=Phase.CONFIGURED),
                 _node(rounds=10, max_rounds=500, phase=Phase.FINISHING)):
        assert not _push(node, _message(1, 501))         # a star relay's last label
        with pytest.raises(InvalidMessage, match="round"):
            _push(node, _message(1, 501 + ROUND_SLACK + 1, seq=2))


def test_a_tree_allows_one_lead_per_hop_to_a_neighbour_re_attached_around_the_dead() -> None:
    """Fan-out 2: worker 6's parent is 2, whose parent is 0. A delta from 6 at worker 0 says
    2 died; 6 may then be two hops' worth ahead of 0, not more."""
    node = _node(me=0, n=7, topology="tree", rounds=10)
    assert node.admission.round_limit(node.plan, 2) == 10 + SYNC_ROUNDS_AHEAD + ROUND_SLACK  # type: ignore[arg-type]
    assert node.admission.round_limit(node.plan, 6) == 10 + 2 * SYNC_ROUNDS_AHEAD + ROUND_SLACK  # type: ignore[arg-type]
    assert not _push(node, _message(6, 10 + 2 * SYNC_ROUNDS_AHEAD))
    assert node.relay.tree is not None and 6 in node.relay.tree.neighbours and 2 in node.relay.dead
    with pytest.raises(InvalidMessage, match="round"):
        _push(node, _message(6, 10 + 2 * SYNC_ROUNDS_AHEAD + ROUND_SLACK + 1, seq=2))
    # The coordinator, its parent, is one hop away.
    node.check_peer(COORDINATOR_SENDER_ID, COORDINATOR_KEY)
    with pytest.raises(InvalidMessage, match="round"):
        node.push_delta(_message(COORDINATOR_SENDER_ID, 10 + SYNC_ROUNDS_AHEAD + ROUND_SLACK + 1))


def test_an_orphan_never_runs_ahead_while_it_re_attaches(monkeypatch: Any) -> None:
    """Async, fan-out 2: worker 6's parent 2 died; a message from worker 0 says so. The
    training threads pass the staleness gate on their own, so at no moment of the
    re-attachment may the inbox hold no live neighbour: else they run rounds ahead unbounded
    and label the next message with a round worker 0 must refuse (lost)."""
    node = _node(me=6, n=7, mode="async", staleness=2, topology="tree", rounds=17)
    assert node.relay.tree is not None and node.plan is not None
    node.relay.tree.parent = 2
    far = node.counters.rounds + 30
    opened = []
    drop = node.inbox.drop

    def watched(pid: int) -> bool:
        gone = drop(pid)
        opened.append(may_start(node.engine.rules, far, node.inbox.snapshot()))
        return gone

    monkeypatch.setattr(node.inbox, "drop", watched)
    assert not _push(node, _message(0, 17))
    assert 2 in node.relay.dead and node.relay.tree.parent == 0
    assert opened == [False]
    # Held by worker 0's round (17) as by any neighbour's: two rounds past it, not more.
    peers = node.inbox.snapshot()
    assert may_start(node.engine.rules, 19, peers)
    assert not may_start(node.engine.rules, 20, peers)


def test_a_dropped_peer_still_hears_it_was_dropped_whatever_its_round() -> None:
    node = _node(rounds=10)
    node.inbox.drop(1)
    for round_ in (11, 10 + 100):
        with pytest.raises(StaleOrUnknown, match="dropped"):
            _push(node, _message(1, round_))


# -------------------------------------------------------- (A) a round far ahead: the relay


def _relay_state(n: int) -> RunState:
    state = RunState(n, run_id=RUN)
    for w in range(n):
        state.roster.register(f"127.0.0.1:{9 + w}", 1)
    state.model.start_model(DIM)
    return state


def _sync_relay(state: RunState, monkeypatch: Any) -> tuple[StarRelay, dict[int, list[Any]]]:
    sent: dict[int, list[OutgoingDelta]] = {w: [] for w in state.roster.workers}

    def capture(self: Destination, delta: OutgoingDelta) -> None:
        sent[self.dest_id].append(delta)

    monkeypatch.setattr(Destination, "put_delta", capture)
    points = {w: f"127.0.0.1:{9 + w}" for w in state.roster.workers}
    relay = StarRelay(state, points, DIM, "sync",
                      barrier_timeout=30.0, rpc_timeout=1.0, chunk_bytes=1 << 20,
                      open_channel=lambda wid, address: grpc.insecure_channel(address),
                      period=0.01)
    relay.start()
    return relay, sent


def _apply(state: RunState, message: pb.Delta) -> bool:
    """As the Coordinator service does."""
    return state.model.apply_delta(decode_delta(message, DIM))


def test_the_relay_waits_for_a_worker_that_labels_a_round_it_never_reached(
        monkeypatch: Any) -> None:
    state = _relay_state(2)
    relay, sent = _sync_relay(state, monkeypatch)
    try:
        with pytest.raises(InvalidMessage, match="round"):
            _apply(state, _message(1, U64))
        assert not state.model.model_copy().any() and state.roster.max_round() == 0
        with pytest.raises(InvalidMessage, match="round"):
            _apply(state, _message(1, RELAY_AHEAD + 1, idx=(4,), val=(2.0,)))
        assert relay.rounds[1] == 0
        assert not state.model.model_copy().any() and state.model.deltas_received == 0
        assert _apply(state, _message(0, 1))
        time.sleep(0.2)
        assert sent == {0: [], 1: []}                  # round 1 still waits for worker 1
        assert _apply(state, _message(1, 1, seq=2, idx=(5,), val=(4.0,)))
        deadline = time.monotonic() + 10
        while not all(sent.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [d.round for d in sent[0]] == [1] and [d.round for d in sent[1]] == [1]
        # The refused delta reached neither the global model nor the aggregates.
        got = np.zeros(DIM)
        got[sent[0][0].indices] = sent[0][0].values
        assert got[4] == 0.0 and got[5] == 4.0
        assert state.model.model_copy()[4] == 0.0
    finally:
        relay.close()


def test_the_relay_never_sends_a_summed_example_count_its_workers_refuse(
        monkeypatch: Any) -> None:
    state = _relay_state(2)
    relay, _ = _sync_relay(state, monkeypatch)
    try:
        (message,) = relay.encode(np.array([1], np.int32), np.array([1.0], np.float32), 1,
                                  False, 2 * MAX_EXAMPLES)
        assert decode_delta(message, DIM).header.examples == MAX_EXAMPLES
    finally:
        relay.close()


# ------------------------------------------------------------------ (B) parts and memory


def test_a_delta_is_never_cut_into_more_parts_than_receivers_accept() -> None:
    rng = np.random.default_rng(0)
    for dim in (1, 2, 127, 128, 129, 5000):
        header = DeltaHeader(RUN, 1, 1, 1, dim)
        idx = np.arange(dim, dtype=np.int32)
        for dense in (False, True):
            for val in (rng.standard_normal(dim).astype(np.float32),
                        rng.standard_normal(dim).astype(np.float16)):
                parts = encode_delta_parts(header, idx, val, MIN_DELTA_CHUNK_BYTES, dense=dense)
                assert len(parts) <= max_delta_parts(dim)
                for part in parts:
                    decode_delta(pb.Delta.FromString(part.SerializeToString()), dim)
    with pytest.raises(ValueError, match="at least"):
        encode_delta_parts(DeltaHeader(RUN, 1, 1, 1, DIM), idx[:10], val[:10],
                           MIN_DELTA_CHUNK_BYTES - 1)


def test_parts_counts_and_empty_parts_no_sender_produces_are_refused() -> None:
    with pytest.raises(InvalidMessage, match="parts"):
        decode_delta(_message(1, 1, part=0, parts=2**32 - 1), DIM)
    with pytest.raises(InvalidMessage, match="parts"):
        decode_delta(_message(1, 1, part=0, parts=max_delta_parts(DIM) + 1), DIM)
    with pytest.raises(InvalidMessage, match="empty part"):
        decode_delta(_message(1, 1, idx=(), val=(), part=1, parts=2), DIM)
    assert decode_delta(_message(1, 1, idx=(), val=()), DIM).header.parts == 1


def test_a_flood_of_part_numbers_is_refused_and_held_nowhere() -> None:
    """8 open seqs of a delta in 2**32 - 1 parts, a new part number each time, empty: the
    coordinator counted every one as a delta received and kept every part number."""
    state = _relay_state(1)
    assert _apply(state, _message(0, 1))
    before = state.model.model_copy()
    refused = 0
    for part in range(2000):
        try:
            _apply(state, _message(0, 1, seq=2 + part % 8, idx=(), val=(), part=part,
                                   parts=2**32 - 1))
        except InvalidMessage:
            refused += 1
    assert refused == 2000 and state.model.deltas_received == 1
    assert state.model.sequences.seen[0].held == 0
    assert state.model.model_copy().tobytes() == before.tobytes()


def test_a_sender_cannot_make_a_receiver_hold_more_than_a_few_early_parts() -> None:
    """Parts numbers within a legitimate count, but sent out of order (a real sender sends
    them in order): at most OUT_OF_ORDER are held, over the whole window."""
    t = SequenceTracker()
    parts = max_delta_parts(2**31 - 1)
    refused = 0
    for k in range(10_000):
        try:
            t.admit(1 + k % WINDOW, 1 + k, parts)
        except InvalidMessage:
            refused += 1
    assert t.held <= WINDOW + OUT_OF_ORDER
    assert refused == 10_000 - OUT_OF_ORDER


def test_parts_in_order_take_constant_memory_however_many() -> None:
    t = SequenceTracker()
    for part in range(5000):
        assert t.admit(1, part, 5001) is False
        assert t.held == 1
    assert t.admit(1, 5000, 5001) is True and t.held == 0 and t.complete == 1
    # An early part is held until the hole before it is filled, then let go.
    assert t.admit(2, 1, 3) is False and t.held == 2
    assert t.admit(2, 1, 3) is None
    assert t.admit(2, 0, 3) is False and t.held == 1
    assert t.admit(2, 2, 3) is True and t.held == 0


# ---------------------------------------------------- (C) a stranger naming worker ids


@pytest.mark.parametrize("topology", ["mesh", "star", "tree"])
def test_a_caller_without_a_key_of_this_run_learns_nothing_from_the_ids_it_names(
        topology: str) -> None:
    node = _node(me=1, n=3, topology=topology)
    answers = set()
    for named in [*range(6), COORDINATOR_SENDER_ID]:
        for key in ("", "guess"):
            with pytest.raises(NotAllowed) as refused:
                node.check_peer(named, key)
            answers.add(str(refused.value))
    (answer,) = answers                                 # the same whatever was named
    assert not any(ch.isdigit() for ch in answer) and RUN not in answer


def test_members_still_hear_what_they_heard_before() -> None:
    mesh = _node(me=0, n=3)
    # A member naming a worker that is no peer, or another peer.
    with pytest.raises(StaleOrUnknown, match="not a peer"):
        mesh.check_peer(7, _key(1))
    with pytest.raises(NotAllowed, match="not worker 2"):
        mesh.check_peer(2, _key(1))
    mesh.check_peer(1, _key(1))
    # Star: a tree's old neighbour of a worker taken back must retry, then drop it.
    star = _node(me=0, n=3, topology="star")
    with pytest.raises(NotReady, match="coordinator only"):
        star.check_peer(1, _key(1))
    with pytest.raises(NotAllowed, match="coordinator"):
        star.check_peer(COORDINATOR_SENDER_ID, _key(1))
    star.check_peer(COORDINATOR_SENDER_ID, COORDINATOR_KEY)
    # Before the run config nobody can be told apart: retry later.
    fresh = WorkerNode(config.load(None, {}, {"bind_host": "127.0.0.1"}))
    with pytest.raises(NotReady, match="before the run config"):
        fresh.check_peer(1, "guess")
