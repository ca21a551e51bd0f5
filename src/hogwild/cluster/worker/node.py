"""WorkerNode: one worker's lifecycle (register, shard, config, train, finish) and its RPC facade.

The node holds the worker's state; its collaborators do the work by role: callers.py (who
may call), intake.py (the shard, the starting model), announcements.py (adjustments, peers
back), roundloop.py (the training threads, the exchange, the barrier), liveness.py (heartbeats,
silence, freezes, rejoin), report.py (progress, final state). Each sees of the node only
what a protocol declared beside it names, and is handed the other roles it calls; the RPC
service calls those roles directly where the node would only pass the call on. The
topology tree's re-routing stays here, beside the state it guards.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable

import numpy as np

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.security import from_settings, same_key
from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.transport.timing import Timers
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import check_version
from hogwild.cluster.wire.streams import ReceivedShard
from hogwild.cluster.wire.wholeparts import WholeParts
from hogwild.cluster.worker.admission import Admission
from hogwild.cluster.worker.announcements import Announcements
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.inbox import Inbox, PeerStatus
from hogwild.cluster.worker.intake import Intake
from hogwild.cluster.worker.liveness import Liveness
from hogwild.cluster.worker.outbound import Outbound
from hogwild.cluster.worker.phase import COORDINATOR_ID, Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.registration import register_with, routable_host
from hogwild.cluster.worker.report import Reports
from hogwild.cluster.worker.roundloop import RoundLoop
from hogwild.cluster.worker.tree_async import resend_async
from hogwild.cluster.worker.tree_intake import take_tree_delta
from hogwild.config import Settings
from hogwild.data.transform.classweights import row_weights
from hogwild.engine.round import RoundEngine
from hogwild.engine.rules import ExchangeRules
from hogwild.engine.tree import Flush, TreeLinks
from hogwild.engine.treeshape import between, live_children, live_parent, same_side
from hogwild.errors import ClusterError, DataError, InvalidMessage, NotAllowed, StaleOrUnknown
from hogwild.model.arrays import CSRArrays, csr_arrays
from hogwild.model.hot import RENUMBERED_HOT_FEATURES, choose_hot_features

log = logging.getLogger("hogwild.worker")

# How many whole models' worth of one sender's delta coordinates may wait to be applied.
# A sync peer has at most about three deltas queued (its round, the next, a final's float32
# rest); async ones are applied as they arrive, except before Start and in a tree, where
# they wait for this worker's round boundary. Beyond the bound a delta is refused as Busy,
# which its sender retries (summing what it queues meanwhile): flow control, not a loss.
QUEUED_MODELS = 32


class WorkerNode:
    """The state of one worker and the logic behind its RPCs (no gRPC server code here)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.security = from_settings(settings)
        # Sender keys from the coordinator (Register): ours on calls to it, its on calls to us.
        self.worker_key = ""
        self.coordinator_key = ""
        self.phase = Phase.STARTING
        # Guards phase and the registration and run fields; every role waits on it for a phase.
        self.cond = threading.Condition()
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
        # exchange thread takes what is due. Taken after exchange_lock, never before.
        self.tree_lock = threading.RLock()
        # Topology tree: a child's multi-part message, held until whole (protocol/wholeparts).
        self.whole_parts = WholeParts()
        self.stop_requested = threading.Event()
        self.stop_reason = ""
        self.leaving = False              # SIGTERM: finish without waiting for peers
        self.ended_by_coordinator = False  # a Stop (not a hand-over): the run is over
        self.started = threading.Event()
        self.done = threading.Event()
        self.state_served = threading.Event()
        self.fatal: str | None = None
        # One exchange (roundloop.py), or one peer joining (announcements.py), or one tree
        # re-attachment, at a time.
        self.exchange_lock = threading.RLock()
        self.deltas_sent = 0
        self.rounds = 0
        self.examples = 0
        self.max_staleness = 0
        self.reported_down: set[int] = set()  # peers reported down (announcements: back)
        # time.monotonic() of the exchange thread's last sign of progress while it runs the
        # round loop; None before and after (the liveness watch reads it).
        self.alive_at: float | None = None
        self.timers = Timers()
        # Why this worker must register again (the coordinator was lost, or its peers dropped
        # it while it was stalled); None while it is a member of the run.
        self.rejoin_reason: str | None = None
        self.abandoned = False            # leaving without sending anything more
        self.peer_addresses: dict[int, str] = {}  # a rejoined peer's new address (outbound)
        # Sent to the coordinator only: what makes a registration this process's (anyone
        # may learn the host and pid, see identify).
        self._secret = secrets.token_bytes(32)
        # The collaborators, one role each; they read and update the state above (each
        # through the protocol next to it, naming what it uses) and are handed the others.
        self.callers = Callers(self)
        self.intake = Intake(self, settings, self.callers)
        self.reports = Reports(self, self.callers, self.timers, settings.chunk_bytes)
        self.liveness = Liveness(self, settings.coordinator_address, self.security, self.reports)
        self.loop = RoundLoop(self, self.timers, self.reports, self.liveness, settings.device,
                              settings.chunk_bytes)
        self.outbound = Outbound(self, settings.coordinator_address, self.security, self.timers,
                                 self.loop.encode_delta, self.liveness.on_destination_down,
                                 self.liveness.on_rejected)
        self.announcements = Announcements(self, self.callers, self.outbound)
        self.admission = Admission(self, self.callers, self.timers)

    @property
    def w(self) -> np.ndarray:
        """The worker's weights (the engine's, shared with its training threads)."""
        return self.engine.w

    @property
    def snap(self) -> np.ndarray:
        """What the peers and the coordinator hold of this worker's weights."""
        return self.engine.snap

    @property
    def process_secret(self) -> bytes:
        """What proves a registration this process's: sent to the coordinator only."""
        return self._secret

    # ------------------------------------------------------------------ registration

    def register(self, bound_port: int) -> bool:
        """Register with the coordinator, retrying with backoff until connect_timeout;
        False if a stop was requested (SIGTERM) before it answered."""
        s = self.settings
        self.address = s.advertise_address or f"{routable_host(s.coordinator_address)}:{bound_port}"
        request = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address=self.address,
                                     threads=s.threads, hostname=socket.gethostname(),
                                     pid=os.getpid(), process_secret=self._secret)
        reply = register_with(s, self.security, request, self.stop_requested)
        if reply is None:
            return False
        check_version(reply.protocol_version, "register reply")
        with self.cond:
            self.run_id = reply.run_id
            self.worker_id = int(reply.worker_id)
            self.worker_key, self.coordinator_key = reply.worker_key, reply.coordinator_key
            self.phase = Phase.REGISTERED
            self.cond.notify_all()
        log.info("registered as worker %d of %d in run %s (advertising %s)",
                 self.worker_id, reply.n_workers, self.run_id, self.address)
        return True

    def wait_registered(self, timeout: float) -> None:
        """Wait until registered (an RPC may beat Register's reply: callers, intake)."""
        with self.cond:
            if not self.cond.wait_for(lambda: bool(self.run_id), timeout):
                raise StaleOrUnknown("this worker is not registered in any run yet")

    def check_peer(self, worker_id: int, key: str) -> None:
        self.callers.check_peer(worker_id, key)

    def check_tree_sender(self, plan: RunPlan, worker_id: int, key: str) -> None:
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
        with self.tree_lock:
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
               else {up: self.peer_addresses.get(up, plan.peers[up])})
        for c in live_children(plan.worker_id, k, n, self.tree_dead):
            out[c] = self.peer_addresses.get(c, plan.peers[c])
        return out

    def _tree_parent(self, plan: RunPlan) -> int:
        """The live parent's sender id (the coordinator's under its own)."""
        up = live_parent(plan.worker_id, plan.tree_fanout, self.tree_dead)
        return COORDINATOR_SENDER_ID if up < 0 else up

    def _tree_bury(self, plan: RunPlan, dead: list[int], reason: str) -> None:
        """Workers known dead: drop them and re-attach around them (nearest live ancestor
        and descendants); a new neighbour is owed what the dead one it replaces never got."""
        with self.exchange_lock, self.tree_lock:
            fresh = [w for w in dead if w not in self.tree_dead]
            if not fresh or self.tree is None:
                return
            old_parent = self._tree_parent(plan)
            old_sent = self.tree.sent_round.get(old_parent, 0)
            self.tree_dead.update(fresh)
            tree, k = self.tree, plan.tree_fanout
            now = self._tree_neighbours(plan)
            gone = [x for x in tree.neighbours if x not in now]
            added = [y for y in now if y not in tree.neighbours]
            # The new neighbours are waited for before the dead stop being: the training
            # threads pass the staleness gate on their own, and with no live neighbour in
            # between they would run ahead unbounded, labelling the next message with a round
            # the new neighbour must refuse as further ahead than a peer can be.
            for y in added:
                self.inbox.add(y, now[y])
            for w in fresh:
                self.drop_peer(w, self.rounds, reason)
            fresh_dests: dict[int, Destination] = {}
            for y in added:
                address = now[y]
                # A child in place of a dead child is levelled (TreeLinks.take_resync).
                child = y != self._tree_parent(plan)
                tree.adopt(y, [x for x in gone if tree.same_side(x, y)], orphan=child,
                           sync=plan.mode == "sync")
                if y != COORDINATOR_SENDER_ID and self.destinations:
                    fresh_dests[y] = self.outbound.peer_destination(plan, y, address)
            stale = []
            for x in gone:
                tree.remove(x)
                if x in self.destinations:
                    stale.append(self.destinations[x])
            if self.destinations:
                # A new dict, so a thread iterating the old one is not disturbed.
                self.destinations = {**{d: v for d, v in self.destinations.items()
                                        if d not in gone}, **fresh_dests}
            new_parent = self._tree_parent(plan)
            if new_parent != old_parent and tree.parent == old_parent:
                self._tree_hand_over(plan, tree, old_parent, old_sent, new_parent)
            sync = plan.mode == "sync"
            if self.destinations:
                # After the re-sent messages: the new parent takes a re-sent message as held
                # or not by its count, which a later message on the edge would raise.
                for y in added:
                    if not sync:  # a new edge: see TreeLinks.greet
                        self.tree_put(tree.greet(y, self.rounds))
                    resync = tree.take_resync(y, self.rounds, sync)  # see engine/treeview
                    if resync is not None:
                        self.tree_put(resync)
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
        passed on goes again, to the new parent. Sync: each message it cannot yet vouch
        for goes alone under its round; the new parent (the coordinator: TreeRoot; a
        worker: TreeLinks.known) takes one labelled up to the last round it heard from the
        dead parent as held already rather than sum it twice. What this node got through
        the dead parent is levelled by the new parent's resync (engine/treeview.py). The
        labels on the new edge go on from the old one's."""
        tree.parent = new
        if plan.mode != "sync":
            # Async: every message the coordinator's counts do not cover yet goes again,
            # alone, marked re-sent and with the counts it first carried; the new parent
            # applies it unless those say it holds it (TreeLinks.held, TreeRoot.check_round).
            resend_async(self, tree, old, new)
            return
        heard = self.inbox.snapshot().get(old)
        if heard is not None:
            tree.passed(heard.round)  # what its last messages vouched for went past it
        tree.orphaned(sync=True)  # levelled by the new parent's resync (engine/treeview.py)
        # The new parent takes a message labelled up to the last round it heard from the
        # dead parent as held already (at most one this node sent it): nothing new may go
        # under a round sent.
        tree.sent_round[new] = max(tree.sent_round.get(new, 0), old_sent)
        replays, tree.retained = tree.retained, []
        dest = self.destinations.get(COORDINATOR_ID if new == COORDINATOR_SENDER_ID else new)
        if dest is None:  # not running yet: nothing was sent to anyone
            return
        for label, idx, val in replays:
            dest.put_delta(OutgoingDelta(label, False, self.examples, idx, val, apart=True))
            self.deltas_sent += 1
            tree.retained.append((label, idx, val))  # kept until the new parent vouches
        if replays:
            log.warning("tree: re-sent %d message(s) (rounds %s) to %s that worker %d had "
                        "not passed on", len(replays), ", ".join(str(r[0]) for r in replays),
                        "the coordinator" if new == COORDINATOR_SENDER_ID else f"worker {new}",
                        old)

    # --------------------------------------------------------------- RPC handlers

    def configure(self, message: pb.RunConfig) -> None:
        self.wait_registered(self.settings.rpc_timeout)
        self.callers.check_run(message.protocol_version, message.run_id, "run config")
        plan = RunPlan.from_message(message)
        if plan.worker_id != self.worker_id:
            raise InvalidMessage(f"run config for worker {plan.worker_id}, this is "
                                 f"{self.worker_id}")
        with self.cond:
            if self.shard is None or self.phase != Phase.SHARD:
                raise StaleOrUnknown(f"run config received while {self.phase.value}")
            if self.shard.data.n_features > plan.n_features:
                raise InvalidMessage(f"shard has {self.shard.data.n_features} features, the "
                                     f"model {plan.n_features}")
            try:
                data = self.shard.data
                if plan.class_weights:
                    # Labels -1 / +1: each row weighs its class's weight.
                    data = data.with_weights(row_weights(data.labels, plan.class_weights,
                                                         data.weights))
                self.arrays = csr_arrays(data, plan.n_features)
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
            self.inbox = Inbox(self.senders(plan), plan.first_round - 1,
                               max_queued=QUEUED_MODELS * plan.dim)
            for pid in plan.down:
                # Dead when this worker (re)joined: nobody to wait for until PeerJoined.
                self.inbox.drop(pid)
                self.reported_down.add(pid)
            self.tree = (TreeLinks(self.senders(plan), functools.partial(
                _same_side, plan.worker_id, plan.tree_fanout), plan.first_round - 1)
                if plan.topology == "tree" else None)
            if self.tree is not None:
                self.tree.parent = self._tree_parent(plan)
                self.tree.me, self.tree.keep_rounds = plan.worker_id, plan.staleness
                self.tree.track(plan.dim)
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
        with self.liveness.tick_lock:
            self.liveness.tick = time.monotonic()
        threading.Thread(target=self.liveness.tick_loop, name="stall-watch",
                         daemon=True).start()
        # Connected now, before Start: the first round's deltas do not wait for TCP and TLS
        # handshakes (measured: the first PushDelta of a run took 21-26 ms, later ones 3-9).
        self.outbound.open_destinations(plan)
        log.info("configured: %s mode, %d threads (%d buffered features), %d rows/thread/round, "
                 "%d rounds, peers %s", plan.mode, plan.threads, self.hot, plan.round_size,
                 plan.max_rounds,
                 ", ".join(f"{k}@{a}" + (" (down)" if k in plan.down else "")
                           for k, a in sorted(plan.peers.items())) or "none")

    def peer_joined(self, message: pb.PeerJoinedRequest) -> int:
        return self.announcements.peer_joined(message)

    def identify(self) -> pb.Identity:
        return pb.Identity(protocol_version=PROTOCOL_VERSION, pid=os.getpid(),
                           hostname=socket.gethostname(), address=self.address,
                           secret_digest=hashlib.sha256(self._secret).digest())

    def start(self, message: pb.StartRequest) -> None:
        self.callers.check_run(message.protocol_version, message.run_id, "start")
        with self.cond:
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

    def push_delta(self, message: pb.Delta) -> bool:
        """Validate and queue a peer's delta; returns True if it was a duplicate."""
        plan, delta, limit = self.admission.admit(message)
        if self.tree is None:
            if not self.inbox.offer(delta, limit):
                return True
            if plan.mode == "async" and self.phase is Phase.RUNNING:
                self.loop.apply_arrived()
            return False
        with self.tree_lock:
            return take_tree_delta(self, plan, delta, limit)

    def heartbeat(self, message: pb.HeartbeatRequest) -> None:
        """A peer says it is alive (it may be waiting on someone else)."""
        self.callers.check_run(message.protocol_version, message.run_id, "heartbeat")
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
        with self.cond:
            self.cond.notify_all()
        self.inbox.wake()

    def stop(self, message: pb.StopRequest) -> None:
        self.callers.check_run(message.protocol_version, message.run_id, "stop")
        if message.register_again:
            # The coordinator hands the run over to a successor that resumes it from the
            # checkpoint it has just written: what this worker trained since is superseded.
            self.leave_to_rejoin(message.reason or "the coordinator is being replaced")
            return
        self.ended_by_coordinator = True
        self.request_stop(message.reason or "coordinator asked to stop")

    # ------------------------------------------------------------------- running

    def run(self) -> None:
        self.loop.run()

    def mark_alive(self) -> None:
        """The exchange thread's sign of progress, read by the liveness watch."""
        self.alive_at = time.monotonic()

    def senders(self, plan: RunPlan) -> dict[int, str]:
        """Who sends this worker deltas: every peer (mesh), or the coordinator alone, under
        its own sender id (star: it relays the sum of the others' deltas)."""
        if plan.topology == "star":
            return {COORDINATOR_SENDER_ID: self.settings.coordinator_address}
        if plan.topology == "tree":
            return self._tree_neighbours(plan)
        return dict(plan.peers)

    def tree_flush(self, plan: RunPlan, round_: int, finished: bool) -> None:
        """Topology tree: queue every message due (what each neighbour is owed)."""
        assert self.tree is not None
        with self.tree_lock:
            # Under the lock that owing happens under: a label (or a final) never runs ahead
            # of the sums it vouches for.
            for f in self.tree.due(round_, finished, self.inbox.snapshot(),
                                   plan.mode == "sync"):
                self.tree_put(f)

    def tree_put(self, f: Flush) -> None:
        """Topology tree: queue one message due to a neighbour (tree_intake, tree_flush)."""
        dest = self.destinations.get(
            COORDINATOR_ID if f.neighbour == COORDINATOR_SENDER_ID else f.neighbour)
        if dest is None:  # a bug: what was taken would be lost
            raise ClusterError(f"tree: no destination for neighbour {f.neighbour}")
        dest.put_delta(OutgoingDelta(f.round, f.final, self.examples, f.indices, f.values,
                                     covers=f.covers, applied=f.applied,
                                     resync_cut=f.resync_cut,
                                     apart=f.resync_cut is not None))
        self.deltas_sent += 1

    def tree_wait(self, plan: RunPlan, ready: Callable[[dict[int, PeerStatus]], bool],
                   finished: bool, waiting_for: str) -> None:
        """Topology tree: relay what arrives (apply it, owe it on, send what is due) until
        ``ready(peers)``; a neighbour silent for barrier_timeout is dropped."""
        assert self.tree is not None
        while True:
            self.mark_alive()
            # Looked at before relaying: whatever made it true is in the queue now.
            peers = self.inbox.snapshot()
            done = ready(peers)
            with self.exchange_lock:
                self.loop.apply_inbox()
                self.tree_flush(plan, self.rounds, finished)
            if done and (not finished or self.tree.settled(self.inbox.snapshot())):
                return
            if self.fatal is not None:
                return
            self.inbox.wait(lambda p: ready(p) or self.inbox.queued() > 0,
                            min(0.25, plan.barrier_timeout))
            self.liveness.drop_silent(plan, self.rounds, waiting_for)

    def drop_peer(self, pid: int, round_: int, reason: str) -> None:
        """Stop waiting for a peer (tree: route around it); admission and liveness call it."""
        plan = self.plan
        if (self.tree is not None and plan is not None and pid not in self.tree_dead
                and pid != COORDINATOR_SENDER_ID):
            self._tree_bury(plan, [pid], reason)  # drops it (back here), then re-attaches
            return
        if not self.inbox.drop(pid) or pid in self.reported_down:
            return
        self.reported_down.add(pid)
        log.warning("dropping peer %d at round %d: %s", pid, round_, reason)
        coordinator = self.destinations.get(COORDINATOR_ID)
        if coordinator is not None:
            coordinator.put("ReportPeerDown", pb.PeerDown(
                protocol_version=PROTOCOL_VERSION, run_id=self.run_id,
                worker_id=self.worker_id, peer_id=pid, round=round_, reason=reason))

    def leave_to_rejoin(self, reason: str) -> None:
        """Stop at once without sending anything more; serve() then registers again."""
        if self.rejoin_reason is not None:
            return
        self.rejoin_reason = reason
        self.abandoned = True
        log.warning("leaving the run to register again: %s", reason)
        self.request_stop(reason, leave=True)

    def close(self) -> None:
        """Flush (bounded) and close every outgoing channel."""
        for dest in self.destinations.values():
            dest.close(timeout=1.0)

def _same_side(me: int, k: int, a: int, b: int) -> bool:
    """tree.same_side with the coordinator under its sender id."""
    return same_side(me, -1 if a == COORDINATOR_SENDER_ID else a,
                     -1 if b == COORDINATOR_SENDER_ID else b, k)
