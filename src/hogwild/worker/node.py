"""WorkerNode: one worker's lifecycle (register, shard, config, train, finish) and its exchange.

Threads of a running worker:

* T training threads run :func:`train_round` on the shared ``w`` without any lock.
* ONE exchange thread (the caller of :meth:`WorkerNode.run`) does, at every round boundary:
  apply the queued peer deltas, build the delta of own updates, and queue it for every peer
  and the coordinator. In sync mode it then waits until every live peer's delta of that round
  has arrived (deadline: barrier_timeout; a peer that misses it is dropped and reported),
  applies them, and only then lets the training threads start the next round, so every
  worker has applied exactly the same deltas before round r+1. In async mode the training
  threads never wait for it (with bounded staleness s they wait only for a peer more than s
  rounds behind).
* One sender thread per destination (sender.py); gRPC threads validate and queue. In async
  mode the gRPC thread that accepted a delta also applies it at once (:meth:`_apply_arrived`)
  rather than leaving it for this worker's next round boundary, a round later.
  build_delta and apply_delta are never concurrent: both run under ``_exchange_lock``.

A delta sums the worker's own updates except the bias (and the MLP's dense layers; every
weight with ``combine: average``), whose change is averaged over the contributing workers
before it is sent (averaging.py; in async mesh mode the cut to 1/W waits for the peers'
deltas of the same round, :meth:`averaging.OwnAverage.defer`). Where the time goes
(training, waiting, building, encoding, applying, RPCs) is accumulated in ``timers`` and
returned with the final state.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import Any

import grpc
import numpy as np

from hogwild.config import Settings
from hogwild.engine.round import ModelNotFinite, RoundEngine
from hogwild.engine.rules import ExchangeRules, barrier_ready, lag, may_start
from hogwild.engine.training import ThreadCursor, make_cursors, train_round
from hogwild.engine.tree import (
    Flush,
    TreeLinks,
    between,
    depth,
    live_children,
    live_parent,
    same_side,
)
from hogwild.errors import (
    ClusterError,
    DataError,
    InvalidMessage,
    NotAllowed,
    NotReady,
    StaleOrUnknown,
    TrainingDiverged,
)
from hogwild.model.arrays import CSRArrays, csr_arrays
from hogwild.model.trainer import RENUMBERED_HOT_FEATURES, choose_hot_features
from hogwild.protocol import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.protocol.codec import (
    DecodedDelta,
    DeltaHeader,
    check_version,
    decode_delta,
    encode_delta_parts,
)
from hogwild.protocol.keys import COORDINATOR_SENDER_ID
from hogwild.protocol.security import from_settings, same_key
from hogwild.protocol.streams import (
    FinalState,
    ReceivedShard,
    receive_shard,
    receive_state,
    state_chunks,
)
from hogwild.worker.inbox import Inbox, PeerStatus
from hogwild.worker.plan import RunPlan
from hogwild.worker.registration import register_with, routable_host
from hogwild.worker.sender import Destination, OutgoingDelta
from hogwild.worker.timing import Timers
from hogwild.worker.watch import CoordinatorWatch

log = logging.getLogger("hogwild.worker")

COORDINATOR_ID = -1
PROGRESS_EVERY = 0.5  # seconds between progress reports to the coordinator
TICK = 0.1            # the stall watch's period (see WorkerNode._note_stall)
# How far ahead of this worker a sender's round may be, per hop between them (see
# WorkerNode.round_limit), and the slack added to every bound: too low a bound would refuse
# a legitimate delta, which loses it (the sender does not retry a refusal) and then stalls
# that sender's sequence; too high only lets a lying peer skip a few more barriers.
SYNC_ROUNDS_AHEAD = 2
ROUND_SLACK = 4
# How many whole models' worth of one sender's delta coordinates may wait to be applied.
# A sync peer has at most about three deltas queued (its round, the next, a final's float32
# rest); async ones are applied as they arrive, except before Start and in a tree, where
# they wait for this worker's round boundary. Beyond the bound a delta is refused as Busy,
# which its sender retries (summing what it queues meanwhile): flow control, not a loss.
QUEUED_MODELS = 32


class Phase(Enum):
    STARTING = "starting"
    REGISTERED = "registered"
    SHARD = "shard received"
    CONFIGURED = "configured"
    RUNNING = "running"
    FINISHING = "finishing"
    DONE = "done"


class WorkerNode:
    """The state of one worker and the logic behind its RPCs (no gRPC server code here)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.security = from_settings(settings)
        # Sender keys from the coordinator (Register): ours on calls to it, its on calls to us.
        self.worker_key = ""
        self.coordinator_key = ""
        self.phase = Phase.STARTING
        self._cond = threading.Condition()
        self.run_id = ""
        self.worker_id = -1
        self.address = ""
        self.shard: ReceivedShard | None = None
        self.plan: RunPlan | None = None
        # What the training threads read each round: the plan with the step size the
        # coordinator's latest adjustment set (engine/guard.py); the plan itself keeps the
        # configured one, which bounds the values of legitimate deltas.
        self.step_plan: RunPlan | None = None
        self.adjustment = 0   # number of the latest adjustment taken (0: none)
        self.arrays: CSRArrays | None = None
        self.hot = 0  # features each training thread buffers (kernels.sgd_range's `hot`)
        # The weights and the exchange arithmetic (engine/round.py); replaced at configure.
        self.engine = RoundEngine(ExchangeRules(), np.zeros(0, dtype=np.float64))
        self.inbox = Inbox({})
        self.destinations: dict[int, Destination] = {}
        self.tree: TreeLinks | None = None  # topology tree: what each tree neighbour is owed
        self.tree_dead: set[int] = set()    # workers known dead: the layout routes around them
        # Guards self.tree: RPC threads owe each arriving sum on as they accept it (so a
        # neighbour's final is never seen before what it vouches for is owed on), the
        # exchange thread takes what is due. Taken after _exchange_lock, never before.
        self._tree_lock = threading.RLock()
        self.stop_requested = threading.Event()
        self.stop_reason = ""
        self.leaving = False              # SIGTERM: finish without waiting for peers
        self.ended_by_coordinator = False  # a Stop (not a hand-over): the run is over
        self.started = threading.Event()
        self.done = threading.Event()
        self.state_served = threading.Event()
        self.fatal: str | None = None
        self.seq = 0
        self._seq_lock = threading.Lock()
        # One exchange, or one peer joining, or one tree re-attachment, at a time.
        self._exchange_lock = threading.RLock()
        self.deltas_sent = 0
        self.rounds = 0
        self.examples = 0
        self.max_staleness = 0
        self._thread_round: list[int] = []
        self._thread_alive: list[bool] = []
        self._round_loss = 0.0
        self._round_rows = 0
        self._last_train_loss = float("nan")
        self._gate = 0                    # sync: highest round the threads may start
        self._reported_down: set[int] = set()
        self._last_progress = 0.0
        # time.monotonic() of the exchange thread's last sign of progress while it runs the
        # round loop; None before and after (the liveness watch reads it).
        self.alive_at: float | None = None
        self.timers = Timers()
        # Why this worker must register again (the coordinator was lost, or its peers dropped
        # it while it was stalled); None while it is a member of the run.
        self.rejoin_reason: str | None = None
        self.abandoned = False            # leaving without sending anything more
        self._tick = time.monotonic()
        self._tick_lock = threading.Lock()
        self._peer_addresses: dict[int, str] = {}
        # Sent to the coordinator only: what makes a registration this process's (anyone
        # may learn the host and pid, see identify).
        self._secret = secrets.token_bytes(32)

    @property
    def w(self) -> np.ndarray:
        """The worker's weights (the engine's, shared with its training threads)."""
        return self.engine.w

    @property
    def snap(self) -> np.ndarray:
        """What the peers and the coordinator hold of this worker's weights."""
        return self.engine.snap

    # ------------------------------------------------------------------ registration

    def register(self, bound_port: int) -> bool:
        """Register with the coordinator, retrying with backoff until connect_timeout;
        False if a stop was requested (SIGTERM) before it answered."""
        s = self.settings
        self.address = s.advertise_address or f"{routable_host(s.coordinator_address)}:{bound_port}"
        request = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address=self.address,
                                     threads=s.threads, hostname=socket.gethostname(),
                                     pid=_pid(), process_secret=self._secret)
        reply = register_with(s, self.security, request, self.stop_requested)
        if reply is None:
            return False
        check_version(reply.protocol_version, "register reply")
        with self._cond:
            self.run_id = reply.run_id
            self.worker_id = int(reply.worker_id)
            self.worker_key, self.coordinator_key = reply.worker_key, reply.coordinator_key
            self.phase = Phase.REGISTERED
            self._cond.notify_all()
        log.info("registered as worker %d of %d in run %s (advertising %s)",
                 self.worker_id, reply.n_workers, self.run_id, self.address)
        return True

    def _wait_registered(self, timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: bool(self.run_id), timeout):
                raise StaleOrUnknown("this worker is not registered in any run yet")

    def _check_run(self, version: int, run_id: str, what: str) -> None:
        check_version(version, what)
        if not self.run_id or run_id != self.run_id:
            raise StaleOrUnknown(f"{what} for run {run_id!r}, which is not this worker's run")

    def check_coordinator(self, key: str, wait: float = 0.0) -> None:
        """NotAllowed unless ``key`` is the one this worker's coordinator presents (waits up
        to ``wait`` seconds for the registration that brings it)."""
        self._wait_registered(wait)
        if not same_key(key, self.coordinator_key):
            raise NotAllowed("only this worker's coordinator may make this call")

    def check_peer(self, worker_id: int, key: str) -> None:
        """NotAllowed unless ``key`` is the one peer ``worker_id`` presents to this worker.

        The key is compared first: a caller whose key is none of those this worker knows is
        refused alike whatever it names, so that it learns nothing of the run (which ids are
        peers, the topology). Only a member of the run hears why else it is refused (a
        dropped peer must learn that it was dropped, and leaves and registers again)."""
        plan = self.plan
        if plan is None:
            # This process is (re)starting: not a sign that the caller was dropped.
            raise NotReady("call from a peer before the run config")
        if not self._known_key(plan, worker_id, key):
            raise NotAllowed("the caller's key is not one this worker accepts")
        if plan.topology == "star":
            # The only sender of deltas is the coordinator, under its own id and key.
            if worker_id != COORDINATOR_SENDER_ID:
                # Nobody else sends in a star. A tree's worker taken back as a leaf of the
                # coordinator hears from its old neighbours until they drop it: UNAVAILABLE
                # makes them do so (FAILED_PRECONDITION would tell them they were dropped).
                raise NotReady(f"worker {worker_id}: this worker takes deltas from the "
                               "coordinator only")
            if not same_key(key, self.coordinator_key):
                raise NotAllowed("the caller is not this worker's coordinator")
            return
        if plan.topology == "tree":
            self._check_tree_sender(plan, worker_id, key)
            return
        expected = plan.receive_keys.get(worker_id)
        if expected is None:
            raise StaleOrUnknown(f"worker {worker_id} is not a peer of this worker")
        if not same_key(key, expected):
            raise NotAllowed(f"the caller is not worker {worker_id}")

    def _known_key(self, plan: RunPlan, worker_id: int, key: str) -> bool:
        """Whether ``key`` is one a sender presents to this worker: the named sender's (the
        usual case, compared first) or another's (a member naming a sender it is not)."""
        named = (self.coordinator_key if worker_id == COORDINATOR_SENDER_ID
                 else plan.receive_keys.get(worker_id))
        if named is not None and same_key(key, named):
            return True
        return same_key(key, self.coordinator_key) or any(
            same_key(key, other) for other in plan.receive_keys.values())

    def _check_tree_sender(self, plan: RunPlan, worker_id: int, key: str) -> None:
        """Topology tree: deltas and heartbeats from the parent and the children only (the
        coordinator under its own id and key). A sender further up or down this worker's
        heap path vouches that the workers in between died (it routes around them): they
        are dropped here too and it becomes a neighbour, so both ends of a re-attached edge
        agree whichever noticed the death first."""
        if worker_id == COORDINATOR_SENDER_ID:
            if not same_key(key, self.coordinator_key):
                raise NotAllowed("the caller is not this worker's coordinator")
            relative = -1
        else:
            expected = plan.receive_keys.get(worker_id)
            if expected is None:
                raise StaleOrUnknown(f"worker {worker_id} is not a peer of this worker")
            if not same_key(key, expected):
                raise NotAllowed(f"the caller is not worker {worker_id}")
            relative = worker_id
        with self._tree_lock:
            if self.tree is None or worker_id in self.tree.neighbours:
                return
        gap = between(plan.worker_id, relative, plan.tree_fanout)
        if gap is None or relative in self.tree_dead:
            raise StaleOrUnknown(f"worker {worker_id}: not a tree neighbour of worker "
                                 f"{self.worker_id}")
        self._tree_bury(plan, gap, f"worker {worker_id} re-attached around it")

    def _tree_neighbours(self, plan: RunPlan) -> dict[int, str]:
        """Parent (the coordinator under its sender id) and children, around the dead."""
        k, n = plan.tree_fanout, len(plan.peers) + 1
        up = live_parent(plan.worker_id, k, self.tree_dead)
        out = ({COORDINATOR_SENDER_ID: self.settings.coordinator_address} if up < 0
               else {up: self._peer_addresses.get(up, plan.peers[up])})
        for c in live_children(plan.worker_id, k, n, self.tree_dead):
            out[c] = self._peer_addresses.get(c, plan.peers[c])
        return out

    def _tree_parent(self, plan: RunPlan) -> int:
        """The live parent's sender id (the coordinator's under its own)."""
        up = live_parent(plan.worker_id, plan.tree_fanout, self.tree_dead)
        return COORDINATOR_SENDER_ID if up < 0 else up

    def _tree_bury(self, plan: RunPlan, dead: list[int], reason: str) -> None:
        """Workers known dead: drop them and re-attach around them (nearest live ancestor
        and descendants); a new neighbour is owed what the dead one it replaces never got."""
        with self._exchange_lock, self._tree_lock:
            fresh = [w for w in dead if w not in self.tree_dead]
            if not fresh or self.tree is None:
                return
            old_parent = self._tree_parent(plan)
            old_sent = self.tree.sent_round.get(old_parent, 0)
            self.tree_dead.update(fresh)
            for w in fresh:
                self._drop_peer(w, self.rounds, reason)
            tree, k = self.tree, plan.tree_fanout
            now = self._tree_neighbours(plan)
            gone = [x for x in tree.neighbours if x not in now]
            fresh_dests: dict[int, Destination] = {}
            added = [y for y in now if y not in tree.neighbours]
            for y in added:
                address = now[y]
                tree.adopt(y, [x for x in gone if tree.same_side(x, y)])
                self.inbox.add(y, address)
                if y != COORDINATOR_SENDER_ID and self.destinations:
                    fresh_dests[y] = self._peer_destination(plan, y, address)
            stale = []
            for x in gone:
                tree.remove(x)
                if x in self.destinations:
                    stale.append(self.destinations[x])
            if self.destinations:
                # A new dict, so a thread iterating the old one is not disturbed.
                self.destinations = {**{d: v for d, v in self.destinations.items()
                                        if d not in gone}, **fresh_dests}
                if plan.mode == "async":
                    for y in added:  # a new edge: see TreeLinks.greet
                        self._tree_put(tree.greet(y, self.rounds))
            new_parent = self._tree_parent(plan)
            if new_parent != old_parent and tree.parent == old_parent:
                self._tree_hand_over(plan, tree, old_parent, old_sent, new_parent)
        for dest in stale:
            dest.abandon()
        up = live_parent(plan.worker_id, k, self.tree_dead)
        kids = live_children(plan.worker_id, k, len(plan.peers) + 1, self.tree_dead)
        log.warning("tree: re-attached around worker(s) %s: parent %s, children %s",
                    ", ".join(map(str, fresh)), "coordinator" if up < 0 else up,
                    ", ".join(map(str, kids)) or "none")

    def _tree_hand_over(self, plan: RunPlan, tree: TreeLinks, old: int, old_sent: int,
                        new: int) -> None:
        """(Both locks held.) The parent died: what this node sent it that it had not
        passed on goes again, to the new parent. Sync with the coordinator as the new
        parent: each message it cannot yet vouch for goes alone under its round, the first
        one telling the coordinator which round this node last heard complete from the dead
        parent; the coordinator takes what it holds already (through the dead parent) as
        known rather than sum it twice, and sends what this node missed (TreeRoot). The
        labels on the new edge go on from the old one's."""
        tree.parent = new
        if plan.mode != "sync":
            # Async labels vouch for nothing on the way up: nothing tells what the dead
            # parent passed on, so nothing is re-sent (it could be summed twice).
            tree.retained = []
            log.warning("tree: what worker %d held and had not passed on, if anything, "
                        "is lost (async)", old)
            return
        heard = self.inbox.snapshot().get(old)
        if heard is not None:
            tree.passed(heard.round)  # what its last messages vouched for went past it
        if new != COORDINATOR_SENDER_ID:
            tree.retained = []
            log.warning("tree: what worker %d held and had not passed on, if anything, "
                        "is lost (it is re-sent only to the coordinator)", old)
            return
        # The coordinator reads the round of this node's first message as one past the last
        # it heard complete from the dead parent: nothing new may go under a round sent.
        tree.sent_round[new] = max(tree.sent_round.get(new, 0), old_sent)
        replays, tree.retained = tree.retained, []
        dest = self.destinations.get(COORDINATOR_ID)
        if dest is None:  # not running yet: nothing was sent to anyone
            return
        for label, idx, val in replays:
            dest.put_delta(OutgoingDelta(label, False, self.examples, idx, val, apart=True))
            self.deltas_sent += 1
            tree.retained.append((label, idx, val))  # kept until the coordinator vouches
        if replays:
            log.warning("tree: re-sent %d message(s) (rounds %s) to the coordinator that "
                        "worker %d had not passed on", len(replays),
                        ", ".join(str(r[0]) for r in replays), old)

    # --------------------------------------------------------------- RPC handlers

    def receive_shard(self, chunks: Iterable[pb.ShardChunk]) -> pb.ShardAck:
        self._wait_registered(self.settings.rpc_timeout)
        with self._cond:
            if self.phase not in (Phase.REGISTERED, Phase.SHARD):
                raise StaleOrUnknown(f"shard offered while {self.phase.value}")
        iterator = iter(chunks)
        first = next(iterator, None)
        if first is None:
            raise InvalidMessage("empty shard stream")
        self._check_run(first.protocol_version, first.run_id, "shard")

        def replay() -> Iterator[pb.ShardChunk]:
            yield first
            yield from iterator

        if first.HasField("local"):
            shard = self._load_local(replay())
        else:
            shard = receive_shard(replay(), run_id=self.run_id, worker_id=self.worker_id)
        with self._cond:
            self.shard = shard
            self.phase = Phase.SHARD
        log.info("received shard %d/%d: %d rows, %d non-zeros, %.1f MB",
                 shard.shard_index + 1, shard.shard_count, shard.data.n_rows, shard.data.nnz,
                 shard.bytes_received / 1e6)
        return pb.ShardAck(protocol_version=PROTOCOL_VERSION, run_id=self.run_id,
                           worker_id=self.worker_id, n_rows=shard.data.n_rows,
                           nnz=shard.data.nnz, bytes_received=shard.bytes_received,
                           shard_digest=shard.digest)

    def _load_local(self, chunks: Iterator[pb.ShardChunk]) -> ReceivedShard:
        """shipping local: read this worker's ranges of the training file itself. A file that
        is not the one the coordinator planned with is refused, and ends this worker."""
        from hogwild.protocol.localstream import receive_local
        from hogwild.worker.localdata import load_local_shard

        plan = receive_local(chunks, run_id=self.run_id, worker_id=self.worker_id)
        try:
            data = load_local_shard(plan, self.settings.local_data)
        except DataError as exc:
            self.fatal = f"cannot train on the planned rows: {exc}"
            self.request_stop("the data file differs from the coordinator's")
            raise
        return ReceivedShard(data, plan.digest, plan.bytes_received, plan.shard_index,
                             plan.shard_count)

    def configure(self, message: pb.RunConfig) -> None:
        self._wait_registered(self.settings.rpc_timeout)
        self._check_run(message.protocol_version, message.run_id, "run config")
        plan = RunPlan.from_message(message)
        if plan.worker_id != self.worker_id:
            raise InvalidMessage(f"run config for worker {plan.worker_id}, this is "
                                 f"{self.worker_id}")
        with self._cond:
            if self.shard is None or self.phase != Phase.SHARD:
                raise StaleOrUnknown(f"run config received while {self.phase.value}")
            if self.shard.data.n_features > plan.n_features:
                raise InvalidMessage(f"shard has {self.shard.data.n_features} features, the "
                                     f"model {plan.n_features}")
            try:
                self.arrays = csr_arrays(self.shard.data, plan.n_features)
            except DataError as exc:
                raise InvalidMessage(f"shard unusable with this config: {exc}") from None
            self.plan = self.step_plan = plan
            # Buffered writes only pay off when ids are ranked by frequency (the coordinator
            # renumbers the data); choose_hot_features checks that and returns 0 otherwise.
            self.hot = 0 if plan.spec.is_mlp else choose_hot_features(
                self.arrays, plan.n_features,
                RENUMBERED_HOT_FEATURES if plan.thread_buffer else 0, plan.threads,
                plan.round_size)
            # Every node (and the coordinator) starts from the same vector: zeros for the
            # linear model, the seeded initialisation for the MLP.
            self.engine = RoundEngine(plan.rules, plan.spec.initial_weights(plan.seed))
            self.inbox = Inbox(self._senders(plan), plan.first_round - 1,
                               max_queued=QUEUED_MODELS * plan.dim)
            for pid in plan.down:
                # Dead when this worker (re)joined: nobody to wait for until PeerJoined.
                self.inbox.drop(pid)
                self._reported_down.add(pid)
            self.tree = (TreeLinks(self._senders(plan), functools.partial(
                _same_side, plan.worker_id, plan.tree_fanout), plan.first_round - 1)
                if plan.topology == "tree" else None)
            if self.tree is not None:
                self.tree.parent = self._tree_parent(plan)
            self.examples = plan.examples_base
            self.rounds = plan.first_round - 1
            self.phase = Phase.CONFIGURED
        if self.tree is not None and plan.down:
            # A resumed run that went on without them: routed around from the start, as if
            # they had died under way (one that comes back is the coordinator's leaf).
            self._tree_bury(plan, sorted(plan.down), "not in the resumed run")
        # The stall watch starts once the shard is in (loading it, which may hold the GIL
        # for long stretches, is no freeze) and before training: a freeze while waiting for
        # Start is a freeze too. One node per incarnation, so one ticker.
        with self._tick_lock:
            self._tick = time.monotonic()
        threading.Thread(target=self._tick_loop, name="stall-watch", daemon=True).start()
        # Connected now, before Start: the first round's deltas do not wait for TCP and TLS
        # handshakes (measured: the first PushDelta of a run took 21-26 ms, later ones 3-9).
        self._open_destinations(plan)
        log.info("configured: %s mode, %d threads (%d buffered features), %d rows/thread/round, "
                 "%d rounds, peers %s", plan.mode, plan.threads, self.hot, plan.round_size,
                 plan.max_rounds,
                 ", ".join(f"{k}@{a}" + (" (down)" if k in plan.down else "")
                           for k, a in sorted(plan.peers.items())) or "none")

    def load_model(self, chunks: Iterable[pb.StateChunk]) -> None:
        """Starting weights for a worker joining a run under way (the global model)."""
        plan = self.plan
        if plan is None:
            raise StaleOrUnknown("model received before the run config")
        state = receive_state(chunks, plan.dim, self.run_id)
        with self._cond:
            if self.phase != Phase.CONFIGURED:
                raise StaleOrUnknown(f"model received while {self.phase.value}")
            # Both: the loaded weights are nobody's new update, so no delta is built from them.
            self.engine.load(state.weights)
            # Deltas that reached this process before: the global model holds them already.
            stale = self.inbox.drain()
        if stale:
            log.info("discarded %d delta message(s) received before the global model",
                     len(stale))
        log.info("loaded the global model to start from round %d", plan.first_round)

    def adjust(self, message: pb.Adjustment) -> None:
        """The coordinator saw the validation curve swing: train on with its step size and
        (async) staleness bound from the next round on. Values are the run's current ones,
        so an older adjustment arriving late changes nothing."""
        self._check_run(message.protocol_version, message.run_id, "adjustment")
        scale = float(message.lr_scale)
        if not (math.isfinite(scale) and 0 < scale <= 1):
            raise InvalidMessage(f"adjustment: lr_scale {scale!r} is not in (0, 1]")
        if message.staleness < 0:
            raise InvalidMessage(f"adjustment: staleness {message.staleness} is negative")
        plan = self.plan
        if plan is None:
            raise StaleOrUnknown("adjustment received before the run config")
        with self._cond:  # not the exchange lock: an exchange may hold it for long
            if message.number <= self.adjustment:
                return
            self.adjustment = int(message.number)
            self.step_plan = dataclasses.replace(plan, learning_rate=plan.learning_rate * scale)
            rules = self.engine.rules
            if message.staleness and plan.mode == "async" and (
                    rules.staleness is None or message.staleness < rules.staleness):
                # Only ever tighter: the gate reads the engine's rules at each round.
                self.engine.rules = dataclasses.replace(rules, staleness=int(message.staleness))
        log.warning("coordinator: %s; step size now x%g of the configured one%s",
                    message.reason or "adjustment", scale,
                    f", staleness bound {self.engine.rules.staleness}"
                    if plan.mode == "async" and self.engine.rules.staleness is not None else "")

    def peer_joined(self, message: pb.PeerJoinedRequest) -> int:
        """A peer is back: accept its deltas again and send it ours from now on. Returns the
        first round whose delta goes to it (and whose barrier waits for it)."""
        self._check_run(message.protocol_version, message.run_id, "peer joined")
        plan = self.plan
        pid = int(message.worker_id)
        if plan is None or pid not in plan.peers:
            raise StaleOrUnknown(f"worker {pid} is not a peer of worker {self.worker_id}")
        if not message.address:
            raise InvalidMessage("peer joined without an address")
        if plan.topology in ("star", "tree"):
            # star: no peer traffic to reopen; tree: the edges are fixed by the layout.
            return self.rounds + 1
        # Between two exchanges: every delta from the next one on goes to the peer.
        with self._exchange_lock:
            first = self.rounds + 1
            # Its round-(first - 1) is "done": a barrier now waiting does not wait for it.
            self.inbox.rejoin(pid, message.address, first - 1)
            with self._cond:
                self._reported_down.discard(pid)
                self._peer_addresses[pid] = message.address
                old = self.destinations.get(pid)
                if self.destinations:  # else not running yet: _open_destinations will do it
                    fresh = self._peer_destination(plan, pid, message.address)
                    # A new dict, so an exchange iterating the old one is not disturbed.
                    self.destinations = {**self.destinations, pid: fresh}
        if old is not None:
            old.abandon()
        log.info("peer %d is back at %s (from round %d)", pid, message.address, first)
        return first

    def identify(self) -> pb.Identity:
        return pb.Identity(protocol_version=PROTOCOL_VERSION, pid=_pid(),
                           hostname=socket.gethostname(), address=self.address,
                           secret_digest=hashlib.sha256(self._secret).digest())

    def start(self, message: pb.StartRequest) -> None:
        self._check_run(message.protocol_version, message.run_id, "start")
        with self._cond:
            if self.phase != Phase.CONFIGURED:
                if self.phase in (Phase.RUNNING, Phase.FINISHING, Phase.DONE):
                    return  # a retried Start
                raise StaleOrUnknown(f"start received while {self.phase.value}")
            plan = self.plan
            if plan is not None and message.first_round > 0:
                if message.first_round > plan.max_rounds + 1:
                    raise InvalidMessage(f"start at round {message.first_round}, after "
                                         f"max_rounds {plan.max_rounds}")
                self.plan = dataclasses.replace(plan, first_round=int(message.first_round))
                self.rounds = int(message.first_round) - 1
            self.phase = Phase.RUNNING
        self.started.set()

    def round_limit(self, plan: RunPlan, sender: int) -> int:
        """The highest round a delta from ``sender`` may be labelled now.

        While this worker trains, its peers wait for it: sync, a sender starts round r + 1
        only once this worker's round-r delta arrived (which goes out just before
        ``self.rounds`` says r: so r + 2 at most); with staleness s, once its round is
        r + 1 - s (r + s + 2 at most). In a tree every hop between the two (a neighbour
        re-attached around dead workers is several) adds as much: each end waits for its
        nearer neighbour only. Unbounded async waits for nobody, and before Start (a
        rejoin: the peers go on) or once finishing (its final delta settles it for the
        others) this worker holds nobody back: then no round beyond the run's last (a
        star relay labels its final aggregate one past it)."""
        ceiling = plan.max_rounds + 1 + ROUND_SLACK
        if self.phase is not Phase.RUNNING:
            return ceiling
        if plan.mode == "sync":
            ahead = SYNC_ROUNDS_AHEAD
        elif plan.staleness is not None:
            ahead = plan.staleness + 2
        else:
            return ceiling
        hops = 1
        if self.tree is not None:
            k = plan.tree_fanout
            there = 0 if sender == COORDINATOR_SENDER_ID else depth(sender, k)
            hops = max(1, abs(depth(plan.worker_id, k) - there))
        return self.rounds + hops * ahead + ROUND_SLACK

    def push_delta(self, message: pb.Delta) -> bool:
        """Validate and queue a peer's delta; returns True if it was a duplicate."""
        self._check_run(message.protocol_version, message.run_id, "delta")
        plan = self.plan
        if plan is None:
            raise StaleOrUnknown("delta received before the run config")
        if message.worker_id not in self.inbox.peers:
            raise StaleOrUnknown(f"delta from worker {message.worker_id}, not a peer of "
                                 f"worker {self.worker_id}")
        with self.timers.timed("decode"):
            # Values beyond what the run's SGD steps can make are refused like non-finite
            # ones: a member's 1e30 would wreck this model and, summed on, its peers'.
            delta = decode_delta(message, plan.dim, plan.max_delta_value)
        limit = self.round_limit(plan, delta.header.worker_id)
        if self.tree is None:
            if not self.inbox.offer(delta, limit):
                return True
            if plan.mode == "async" and self.phase is Phase.RUNNING:
                self._apply_arrived()
            return False
        with self._tree_lock:
            if not self.inbox.offer(delta, limit):
                return True
            self.tree.received(delta.header.worker_id, delta.indices, delta.values)
            # On at once (no hop waits for a round boundary), once the destinations are
            # open; before, it stays owed for the first exchange.
            if plan.mode == "async" and self.destinations:
                for f in self.tree.forward(self.rounds):
                    self._tree_put(f)
        return False

    def heartbeat(self, message: pb.HeartbeatRequest) -> None:
        """A peer says it is alive (it may be waiting on someone else)."""
        self._check_run(message.protocol_version, message.run_id, "heartbeat")
        if self.plan is None:
            raise StaleOrUnknown("heartbeat received before the run config")
        self.inbox.touch(int(message.worker_id))

    def request_stop(self, reason: str, leave: bool = False) -> None:
        """Finish at the next round boundary (Stop RPC, max rounds, SIGTERM with leave=True)."""
        if leave:
            self.leaving = True
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            log.info("stop requested: %s", reason)
        self.stop_requested.set()
        with self._cond:
            self._cond.notify_all()
        self.inbox.wake()

    def stop(self, message: pb.StopRequest) -> None:
        self._check_run(message.protocol_version, message.run_id, "stop")
        if message.register_again:
            # The coordinator hands the run over to a successor that resumes it from the
            # checkpoint it has just written: what this worker trained since is superseded.
            self._leave_to_rejoin(message.reason or "the coordinator is being replaced")
            return
        self.ended_by_coordinator = True
        self.request_stop(message.reason or "coordinator asked to stop")

    def final_state(self, message: pb.FinalStateRequest, timeout: float) -> Iterator[pb.StateChunk]:
        """The final weights, once this worker is done (waits up to ``timeout``)."""
        self._check_run(message.protocol_version, message.run_id, "final state request")
        if not self.done.wait(timeout):
            raise ClusterError("this worker has not finished yet")
        state = self.snapshot_state()
        assert self.plan is not None
        yield from state_chunks(state, self.run_id, self.settings.chunk_bytes)
        self.state_served.set()

    def snapshot_state(self) -> FinalState:
        peers = self.inbox.snapshot()
        coordinator = self.destinations.get(COORDINATOR_ID)
        return FinalState(
            worker_id=self.worker_id, weights=self.engine.w.copy(), rounds=self.rounds,
            examples=self.examples, deltas_sent=self.deltas_sent,
            applied_from={pid: p.applied for pid, p in peers.items()},
            acked_by={dest_id: d.acked.get("PushDelta", 0)
                      for dest_id, d in self.destinations.items() if dest_id != COORDINATOR_ID},
            dropped_peers=[pid for pid, p in peers.items() if p.dropped],
            acked_by_coordinator=coordinator.acked.get("PushDelta", 0) if coordinator else 0,
            max_staleness=self.max_staleness, timings=self.timers.snapshot(),
            bytes_sent=sum(d.bytes_sent for d in self.destinations.values()),
            bytes_to_coordinator=coordinator.bytes_sent if coordinator else 0)

    # ------------------------------------------------------------------- running

    def wait_for_start(self, timeout: float) -> None:
        """Block until Start (or a stop request); ClusterError after ``timeout``, or within
        seconds once the coordinator's process is gone (nothing to wait for then)."""
        deadline = time.monotonic() + timeout
        watch = CoordinatorWatch(self.settings.coordinator_address,
                                 open_channel=self.security.channel)
        try:
            while not self.started.wait(0.1):
                if self.stop_requested.is_set():
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"the coordinator did not start the run within {timeout:g}s")
                if watch.gone():
                    raise ClusterError(
                        f"the coordinator at {self.settings.coordinator_address} went away "
                        "before the run started")
        finally:
            watch.close()

    def wait_collected(self, timeout: float) -> bool:
        """After the run: wait until the coordinator collected the final state; False after
        ``timeout`` or as soon as the coordinator's process is gone."""
        deadline = time.monotonic() + timeout
        watch = CoordinatorWatch(self.settings.coordinator_address,
                                 open_channel=self.security.channel)
        try:
            while not self.state_served.wait(0.1):
                if time.monotonic() > deadline or watch.gone():
                    return False
            return True
        finally:
            watch.close()

    def run(self) -> None:
        """Train until max_rounds or a stop request, then finish (final delta, peers' finals).

        Called from the thread that owns the exchange; returns once the final state is ready.
        """
        plan, arrays = self.plan, self.arrays
        if (plan is None or arrays is None or not self.started.is_set()
                or self.rejoin_reason is not None):  # left before Start: register again
            return
        self.inbox.touch_all()  # (the destinations were opened by configure)
        beating = threading.Thread(target=self._heartbeat_loop, args=(plan,), name="heartbeat",
                                   daemon=True)
        beating.start()
        fraction = (plan.start_offset / arrays.n_rows) if arrays.n_rows else 0.0
        cursors = make_cursors(arrays.n_rows, plan.threads, fraction)
        self._thread_round = [plan.first_round - 1] * plan.threads
        self._thread_alive = [True] * plan.threads
        self._gate = plan.first_round
        threads = [threading.Thread(target=self._train_thread, args=(k, cursors[k]),
                                    name=f"sgd-{k}", daemon=True) for k in range(plan.threads)]
        began = time.monotonic()
        cpu_began = time.process_time()
        self._alive()
        for th in threads:
            th.start()
        try:
            try:
                self._exchange_loop(plan)
            finally:
                self.request_stop(self.stop_reason or "training ended")
                for th in threads:
                    th.join()
                # The whole process (kernel, exchange, senders, gRPC's own threads) while it
                # trained: beside "train_cpu", what the exchange costs in CPU.
                self.timers.add("process_cpu", time.process_time() - cpu_began)
            log.info("trained %d rounds, %d examples in %.2fs", self.rounds, self.examples,
                     time.monotonic() - began)
            self._finish(plan)
        finally:
            self.alive_at = None

    def _alive(self) -> None:
        self.alive_at = time.monotonic()

    def _heartbeat_loop(self, plan: RunPlan) -> None:
        """Tell every peer we are alive a few times per barrier_timeout, until done."""
        interval = max(0.05, plan.barrier_timeout / 4)
        while not self.done.wait(interval):
            if self.phase in (Phase.FINISHING, Phase.DONE) and plan.topology != "tree":
                return  # the final delta is sent: no peer waits for this worker any more
            # (tree: a finished worker relays until its neighbours finish: still alive)
            message = pb.HeartbeatRequest(protocol_version=PROTOCOL_VERSION, run_id=self.run_id,
                                   worker_id=self.worker_id, round=self.rounds)
            for dest_id, dest in list(self.destinations.items()):
                # A destination with traffic queued gets deltas (signs of life) anyway.
                if dest_id != COORDINATOR_ID and dest.pending() == 0:
                    dest.put("Heartbeat", message)
            if plan.topology in ("star", "tree"):
                # The relay waits for us like a peer would: progress is our sign of life.
                self._maybe_report_progress(plan, done=False)

    def _tick_loop(self) -> None:
        while not self.done.wait(TICK):
            self._note_stall()

    def _note_stall(self) -> None:
        """Notice that this process itself was frozen (SIGSTOP, a suspended VM, swapping).

        The ticker thread looks at a monotonic clock every TICK seconds; a gap far longer
        means nothing here ran in between, so the peers' silence over that gap says nothing
        about them: their silence clocks start again now instead of dropping them all. If
        they dropped this worker meanwhile, they refuse its next message and it registers
        again to resynchronise (see _on_rejected). Called by the ticker and by whoever is
        about to drop a silent peer, whichever runs first after the freeze.
        """
        plan = self.plan
        limit = max(0.5, min(2.0, plan.barrier_timeout / 2)) if plan else 2.0
        with self._tick_lock:
            now = time.monotonic()
            gap = now - self._tick
            self._tick = now
            if gap > limit:
                self.inbox.touch_all()
                log.warning("this worker was frozen for %.1fs; restarting its peers' silence "
                            "clocks instead of dropping them", gap)

    def _drop_silent(self, plan: RunPlan, round_: int, waiting_for: str) -> None:
        """Drop every live peer not heard from for barrier_timeout (dead, not just slow)."""
        self._note_stall()
        for pid in self.inbox.silent(plan.barrier_timeout):
            if pid == COORDINATOR_SENDER_ID:
                # Star: the coordinator drops silent workers itself and relays the rest; its
                # own death is noticed by its destination (fatal) and the watch.
                continue
            self._drop_peer(pid, round_, f"silent for more than barrier_timeout="
                                         f"{plan.barrier_timeout:g}s while {waiting_for}")

    def _train_thread(self, k: int, cursor: ThreadCursor) -> None:
        plan, arrays = self.plan, self.arrays
        assert plan is not None and arrays is not None
        try:
            timers = self.timers
            for r in range(plan.first_round, plan.max_rounds + 1):
                t0 = time.perf_counter()
                if not self._may_start(r):
                    break
                t1 = time.perf_counter()
                c1 = time.thread_time()
                step = self.step_plan or plan  # the coordinator may have shrunk the step
                loss_sum, rows = train_round(arrays, self.engine.w, step, cursor, self.hot)
                timers.add("wait_to_start_round", t1 - t0)
                timers.add("train", time.perf_counter() - t1)
                timers.add("train_cpu", time.thread_time() - c1)
                with self._cond:
                    self._thread_round[k] = r
                    self._round_loss += loss_sum
                    self._round_rows += rows
                    self.examples += rows
                    self._cond.notify_all()
        except Exception as exc:  # a bug: stop the node rather than hang the barrier
            log.exception("training thread %d failed", k)
            self.fatal = f"training thread failed: {exc}"
        finally:
            with self._cond:
                self._thread_alive[k] = False
                self._cond.notify_all()

    def _may_start(self, r: int) -> bool:
        """Block until round ``r`` may start; False if the node is stopping."""
        plan = self.plan
        assert plan is not None
        if plan.mode == "sync":
            with self._cond:
                self._cond.wait_for(lambda: self._gate >= r or self.stop_requested.is_set())
                return not self.stop_requested.is_set()
        if self.stop_requested.is_set():
            return False
        rules = self.engine.rules  # the configured bound, or the tighter one of an adjustment
        if rules.staleness is not None:
            slack = rules.staleness
            # Once round r is done this worker is r rounds in; a peer more than `slack` rounds
            # behind that holds us back until it catches up or falls silent for barrier_timeout.
            while not self.inbox.wait(
                    lambda peers: self.stop_requested.is_set() or may_start(rules, r, peers),
                    min(0.25, plan.barrier_timeout)):
                self._drop_silent(plan, r - 1, f"more than {slack} rounds behind")
        return not self.stop_requested.is_set()

    def _exchange_loop(self, plan: RunPlan) -> None:
        last = plan.first_round - 1
        while True:
            self._alive()
            with self._cond:
                self._cond.wait_for(
                    lambda done=last: min(self._thread_round) > done  # type: ignore[misc]
                    or not any(self._thread_alive) or self.fatal is not None, timeout=1.0)
                ready = min(self._thread_round)
                alive = any(self._thread_alive)
            if self.fatal is not None:
                raise ClusterError(self.fatal)
            if ready > last:
                self._exchange(plan, ready, final=False)
                last = ready
                if plan.mode == "sync":
                    self._barrier(plan, ready)
                    with self._cond:
                        self._gate = ready + 1
                        self._cond.notify_all()
            elif not alive:
                return
            self._maybe_report_progress(plan, done=False)

    def _apply_arrived(self) -> None:
        """Async mode: apply the queued deltas now, unless an exchange (or another RPC
        thread) holds the lock; whoever holds it looks at the queue again once it lets go.

        Left for the next round boundary, a peer's delta would reach this worker's model a
        whole round late: with rounds of half an epoch (combine average) an async run
        needed twice the epochs of a sync one. Never blocks the RPC thread on the lock (an
        exchange may wait on a full sender queue, whose peer may be waiting on us).
        """
        while self.inbox.queued():
            if not self._exchange_lock.acquire(blocking=False):
                return
            try:
                self._apply_inbox()
            except Exception as exc:  # a bug: stop the node; the exchange thread raises it
                log.exception("applying a received delta failed")
                self.fatal = f"applying a received delta failed: {exc}"
                with self._cond:
                    self._cond.notify_all()
                return
            finally:
                self._exchange_lock.release()

    def _apply_inbox(self) -> int:
        with self._exchange_lock:  # never beside build_delta, nor another apply
            items = self.inbox.drain()
            applied = self._apply_items(items) if items else 0
            self.engine.settle(self.inbox.snapshot())
            return applied

    def _apply_items(self, items: list[DecodedDelta]) -> int:
        t0 = time.perf_counter()
        self.engine.apply((d.indices, d.values) for d in items)
        self.inbox.count_applied(items)
        self.timers.add("apply", time.perf_counter() - t0, len(items))
        return len(items)

    def _exchange(self, plan: RunPlan, round_: int, final: bool) -> None:
        """Apply what arrived, build the delta of own updates, queue it for everyone."""
        with self._exchange_lock:
            self._exchange_locked(plan, round_, final)
        if plan.mode == "async" and self.tree is None:
            self._apply_arrived()  # what RPC threads queued while the lock was held

    def _exchange_locked(self, plan: RunPlan, round_: int, final: bool) -> None:
        self._apply_inbox()
        t0 = time.perf_counter()
        try:
            sent_idx, sent_val = self.engine.build(round_, final, self.inbox.snapshot)
        except ModelNotFinite:
            self._diverged(plan, round_)
        if self.tree is not None:
            self.timers.add("build_delta", time.perf_counter() - t0)
            with self._tree_lock:
                self.tree.own(sent_idx, sent_val)
            self._tree_flush(plan, round_, final)
            self.rounds = max(self.rounds, round_)
            return
        t1 = time.perf_counter()
        messages = self._encode_delta(sent_idx, sent_val, round_, final, self.examples)
        self.timers.add("build_delta", t1 - t0)
        self.timers.add("encode", time.perf_counter() - t1, len(messages))
        outgoing = OutgoingDelta(round_, final, self.examples, sent_idx, sent_val, messages)
        for dest in self.destinations.values():
            dest.put_delta(outgoing if not dest.coalesce else OutgoingDelta(
                round_, final, self.examples, sent_idx, sent_val, messages))
        self.deltas_sent += len(messages)
        self.rounds = max(self.rounds, round_)
        self.max_staleness = max(self.max_staleness, lag(round_, self.inbox.snapshot()))

    def _senders(self, plan: RunPlan) -> dict[int, str]:
        """Who sends this worker deltas: every peer (mesh), or the coordinator alone, under
        its own sender id (star: it relays the sum of the others' deltas)."""
        if plan.topology == "star":
            return {COORDINATOR_SENDER_ID: self.settings.coordinator_address}
        if plan.topology == "tree":
            return self._tree_neighbours(plan)
        return dict(plan.peers)

    def _encode_delta(self, indices: np.ndarray, values: np.ndarray, round_: int, final: bool,
                      examples: int) -> list[pb.Delta]:
        """The messages of one delta under a new seq (exchange and sender threads call it); each
        destination renumbers what it sends in its own sequence (sender.py)."""
        with self._seq_lock:
            self.seq += 1
            seq = self.seq
        assert self.plan is not None
        header = DeltaHeader(run_id=self.run_id, worker_id=self.worker_id, round=round_,
                             seq=seq, dim=self.plan.dim, final=final, examples=examples)
        return encode_delta_parts(header, indices, values, self.settings.chunk_bytes)

    def _diverged(self, plan: RunPlan, round_: int) -> None:
        """Tell the coordinator the weights are no longer finite, then stop with an error."""
        coordinator = self.destinations.get(COORDINATOR_ID)
        if coordinator is not None:
            coordinator.put("ReportProgress", pb.Progress(
                protocol_version=PROTOCOL_VERSION, run_id=self.run_id,
                worker_id=self.worker_id, round=round_, examples=self.examples,
                train_loss=float("nan"), done=True, deltas_sent=self.deltas_sent,
                max_staleness=self.max_staleness, diverged=True))
            coordinator.flush(plan.rpc_timeout)
        raise TrainingDiverged(f"worker {self.worker_id}, round {round_}", plan.learning_rate)

    def _barrier(self, plan: RunPlan, round_: int) -> None:
        """Sync mode: wait for every live peer's round-``round_`` delta, then apply them."""

        def ready(peers: dict[int, PeerStatus]) -> bool:
            return self.stop_requested.is_set() or barrier_ready(round_, peers)

        # A peer that is alive but itself waiting (heartbeats) is waited for; one silent for
        # barrier_timeout is dropped, so the barrier never hangs on a dead peer.
        t0 = time.perf_counter()
        if self.tree is not None:
            self._tree_wait(plan, ready, finished=False, waiting_for=f"waiting for round {round_}")
            self.timers.add("barrier_wait", time.perf_counter() - t0)
            return
        while not self.inbox.wait(ready, min(0.25, plan.barrier_timeout)):
            self._alive()
            self._drop_silent(plan, round_, f"waiting for round {round_}")
        self.timers.add("barrier_wait", time.perf_counter() - t0)
        self._apply_inbox()

    def _finish(self, plan: RunPlan) -> None:
        """Send the final delta; wait (bounded) for every live peer's final; mark done."""
        with self._cond:
            self.phase = Phase.FINISHING
        if self.abandoned:  # out of the run: nothing more is sent, to anyone
            for dest in self.destinations.values():
                dest.abandon()
            with self._cond:
                self.phase = Phase.DONE
            self.done.set()
            return
        self._exchange(plan, self.rounds, final=True)
        self._maybe_report_progress(plan, done=True)
        if self.tree is not None:
            # Even when leaving: its subtree reaches the rest of the run through it only.
            self._tree_wait(plan, lambda peers: all(p.settled for p in peers.values()),
                            finished=True, waiting_for="waiting for its final delta")
        elif not self.leaving:
            self._await_peer_finals(plan)
        self._apply_inbox()
        flush_for = plan.barrier_timeout + plan.rpc_timeout
        t0 = time.perf_counter()
        for dest in self.destinations.values():
            self._alive()
            dest.flush(flush_for)
        self.timers.add("drain", time.perf_counter() - t0)
        with self._cond:
            self.phase = Phase.DONE
        self.done.set()
        log.info("done: %d rounds, %d examples, %d delta messages sent", self.rounds,
                 self.examples, self.deltas_sent)

    def _tree_flush(self, plan: RunPlan, round_: int, finished: bool) -> None:
        """Topology tree: queue every message due (what each neighbour is owed)."""
        assert self.tree is not None
        with self._tree_lock:
            # Under the lock that owing happens under: a label (or a final) never runs ahead
            # of the sums it vouches for.
            for f in self.tree.due(round_, finished, self.inbox.snapshot(),
                                   plan.mode == "sync"):
                self._tree_put(f)

    def _tree_put(self, f: Flush) -> None:
        dest = self.destinations.get(
            COORDINATOR_ID if f.neighbour == COORDINATOR_SENDER_ID else f.neighbour)
        if dest is None:  # a bug: what was taken would be lost
            raise ClusterError(f"tree: no destination for neighbour {f.neighbour}")
        dest.put_delta(OutgoingDelta(f.round, f.final, self.examples, f.indices, f.values))
        self.deltas_sent += 1

    def _tree_wait(self, plan: RunPlan, ready: Callable[[dict[int, PeerStatus]], bool],
                   finished: bool, waiting_for: str) -> None:
        """Topology tree: relay what arrives (apply it, owe it on, send what is due) until
        ``ready(peers)``; a neighbour silent for barrier_timeout is dropped."""
        assert self.tree is not None
        while True:
            self._alive()
            # Looked at before relaying: whatever made it true is in the queue now.
            peers = self.inbox.snapshot()
            done = ready(peers)
            with self._exchange_lock:
                self._apply_inbox()
                self._tree_flush(plan, self.rounds, finished)
            if done and (not finished or self.tree.settled(self.inbox.snapshot())):
                return
            if self.fatal is not None:
                return
            self.inbox.wait(lambda p: ready(p) or self.inbox.queued() > 0,
                            min(0.25, plan.barrier_timeout))
            self._drop_silent(plan, self.rounds, waiting_for)

    def _await_peer_finals(self, plan: RunPlan) -> None:
        # A peer still training keeps sending deltas; one silent for barrier_timeout is gone.
        while True:
            self._alive()
            settled = self.inbox.wait(
                lambda peers: all(p.settled for p in peers.values()) or self.fatal is not None,
                0.25)
            self._apply_inbox()
            if settled or self.fatal is not None:
                return
            self._drop_silent(plan, self.rounds, "waiting for its final delta")

    def _drop_peer(self, pid: int, round_: int, reason: str) -> None:
        plan = self.plan
        if (self.tree is not None and plan is not None and pid not in self.tree_dead
                and pid != COORDINATOR_SENDER_ID):
            self._tree_bury(plan, [pid], reason)  # drops it (back here), then re-attaches
            return
        if not self.inbox.drop(pid) or pid in self._reported_down:
            return
        self._reported_down.add(pid)
        log.warning("dropping peer %d at round %d: %s", pid, round_, reason)
        coordinator = self.destinations.get(COORDINATOR_ID)
        if coordinator is not None:
            coordinator.put("ReportPeerDown", pb.PeerDown(
                protocol_version=PROTOCOL_VERSION, run_id=self.run_id,
                worker_id=self.worker_id, peer_id=pid, round=round_, reason=reason))

    def _on_destination_down(self, dest_id: int, why: str) -> None:
        if dest_id == COORDINATOR_ID:
            if self.ended_by_coordinator:
                # It ended the run (a failure such as divergence may end it at once, without
                # collecting): nothing to register again for. This worker used to wait
                # connect_timeout for a successor that nobody starts.
                log.info("the coordinator that ended the run is gone (%s): finishing", why)
                return
            self._leave_to_rejoin(f"the coordinator is unreachable ({why})")
            return
        self._drop_peer(dest_id, self.rounds, f"unreachable: {why}")

    def _on_rejected(self, dest_id: int, rpc: str, code: grpc.StatusCode, details: str) -> None:
        """A peer or the coordinator no longer counts this worker as a member of the run
        (it was dropped, e.g. while frozen): leave, register again, resynchronise."""
        # A progress report refused too: a worker held back by its staleness bound sends
        # the coordinator nothing else (a resumed coordinator that it never re-registered
        # with waited for it in vain).
        if code != grpc.StatusCode.FAILED_PRECONDITION or rpc not in (
                "PushDelta", "Heartbeat", "ReportProgress"):
            return
        with self._cond:
            running = self.phase == Phase.RUNNING
        if running:
            who = "the coordinator" if dest_id == COORDINATOR_ID else f"peer {dest_id}"
            self._leave_to_rejoin(f"{who} refused its {rpc}: {details}")

    def _leave_to_rejoin(self, reason: str) -> None:
        """Stop at once without sending anything more; serve() then registers again."""
        if self.rejoin_reason is not None:
            return
        self.rejoin_reason = reason
        self.abandoned = True
        log.warning("leaving the run to register again: %s", reason)
        self.request_stop(reason, leave=True)

    def _open_destinations(self, plan: RunPlan) -> None:
        give_up = max(plan.barrier_timeout, plan.rpc_timeout)
        destinations = {}
        with self._cond:
            for pid, address in sorted(plan.peers.items()):
                if plan.topology == "star":
                    break  # deltas go to the coordinator only
                if self.tree is not None and pid not in self.tree.neighbours:
                    continue  # tree: parent and children only
                if pid in plan.down:
                    continue  # opened by PeerJoined when it is back
                address = self._peer_addresses.get(pid, address)
                destinations[pid] = self._peer_destination(plan, pid, address)
            destinations[COORDINATOR_ID] = Destination(
                "coordinator", COORDINATOR_ID, self.settings.coordinator_address,
                pb_grpc.CoordinatorStub, plan.rpc_timeout, give_up, self._on_destination_down,
                self.timers, coalesce=True, encoder=self._encode_delta,
                half=plan.compression.half,
                open_channel=functools.partial(self.security.channel,
                                               sender_key=self.worker_key),
                on_rejected=self._on_rejected)
            self.destinations = destinations

    def _peer_destination(self, plan: RunPlan, pid: int, address: str) -> Destination:
        # Queued deltas are summed (bounded queues, one send to drain) wherever the order of
        # rounds does not matter: to the coordinator (it only sums), and to peers in async mode.
        # In sync mode a peer's barrier needs each round's delta on its own.
        return Destination(
            f"peer {pid}", pid, address, pb_grpc.WorkerStub, plan.rpc_timeout,
            max(plan.barrier_timeout, plan.rpc_timeout), self._on_destination_down, self.timers,
            coalesce=plan.mode == "async", encoder=self._encode_delta,
            half=plan.compression.half,
            open_channel=functools.partial(self.security.channel,
                                           sender_key=plan.send_keys.get(pid, "")),
            on_rejected=self._on_rejected)

    def _maybe_report_progress(self, plan: RunPlan, done: bool) -> None:
        now = time.monotonic()
        if not done and now - self._last_progress < PROGRESS_EVERY:
            return
        self._last_progress = now
        with self._cond:
            if self._round_rows:
                loss = self._round_loss / self._round_rows
                # An overflowing loss is no number to report (the coordinator refuses one):
                # NaN says "none", and a model that is no longer finite is reported as
                # diverged by the exchange.
                self._last_train_loss = loss if math.isfinite(loss) else float("nan")
            self._round_loss, self._round_rows = 0.0, 0
        coordinator = self.destinations.get(COORDINATOR_ID)
        if coordinator is None:
            return
        applied = sum(p.applied for p in self.inbox.snapshot().values())
        coordinator.put("ReportProgress", pb.Progress(
            protocol_version=PROTOCOL_VERSION, run_id=self.run_id, worker_id=self.worker_id,
            round=self.rounds, examples=self.examples, train_loss=self._last_train_loss,
            done=done, deltas_sent=self.deltas_sent, deltas_applied=applied,
            max_staleness=self.max_staleness))

    def close(self) -> None:
        """Flush (bounded) and close every outgoing channel."""
        for dest in self.destinations.values():
            dest.close(timeout=1.0)

    def status(self) -> dict[str, Any]:
        """A summary for logs."""
        return {"phase": self.phase.value, "worker_id": self.worker_id, "rounds": self.rounds,
                "examples": self.examples, "deltas_sent": self.deltas_sent}


def _same_side(me: int, k: int, a: int, b: int) -> bool:
    """tree.same_side with the coordinator under its sender id."""
    return same_side(me, -1 if a == COORDINATOR_SENDER_ID else a,
                     -1 if b == COORDINATOR_SENDER_ID else b, k)


def _pid() -> int:
    import os

    return os.getpid()
