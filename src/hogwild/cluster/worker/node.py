"""WorkerNode: one worker's lifecycle (register, shard, config, train, finish) and its RPC facade.

The node holds the worker's state; its collaborators do the work by role: callers.py (who
may call), intake.py (the shard, the starting model), announcements.py (adjustments, peers
back), roundloop.py (the training threads, the exchange, the barrier), liveness.py (heartbeats,
silence, freezes, rejoin), report.py (progress, final state), tree_relay.py (the topology
tree's links and re-routing). Each sees of the node only what a protocol declared beside it
names, and is handed the shared locks, events and counters (shared.py) and the other roles
it calls; the RPC service calls those roles directly where the node would only pass the
call on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import secrets
import socket

import numpy as np

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.security import from_settings
from hogwild.cluster.transport.sender import Destination
from hogwild.cluster.transport.timing import Timers
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import check_version
from hogwild.cluster.wire.streams import ReceivedShard
from hogwild.cluster.worker.admission import Admission
from hogwild.cluster.worker.announcements import Announcements
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.intake import Intake
from hogwild.cluster.worker.liveness import Liveness
from hogwild.cluster.worker.outbound import Outbound
from hogwild.cluster.worker.phase import COORDINATOR_ID, Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.registration import register_with, routable_host
from hogwild.cluster.worker.report import Reports
from hogwild.cluster.worker.roundloop import RoundLoop
from hogwild.cluster.worker.shared import Counters, Ending, Signals
from hogwild.cluster.worker.tree_intake import take_tree_delta
from hogwild.cluster.worker.tree_relay import TreeRelay
from hogwild.config import Settings
from hogwild.data.transform.classweights import row_weights
from hogwild.engine.round import RoundEngine
from hogwild.engine.rules import ExchangeRules
from hogwild.errors import DataError, InvalidMessage, StaleOrUnknown
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
        self.phase = Phase.STARTING  # changed under signals.cond
        # The locks and events the roles share, and what this worker has done so far.
        self.signals = Signals()
        self.counters = Counters()
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
        # Why and how this worker stops (a Stop, SIGTERM, a failure, registering again).
        self.ending = Ending(self.signals, lambda: self.inbox.wake())
        self.reported_down: set[int] = set()  # peers reported down (announcements: back)
        self.timers = Timers()
        self.peer_addresses: dict[int, str] = {}  # a rejoined peer's new address (outbound)
        # Sent to the coordinator only: what makes a registration this process's (anyone
        # may learn the host and pid, see identify).
        self._secret = secrets.token_bytes(32)
        # The collaborators, one role each; they read and update the state above (each
        # through the protocol next to it, naming what it uses) and are handed the others.
        sig, counters = self.signals, self.counters
        self.relay = TreeRelay(self, sig, counters, settings.coordinator_address,
                               self.peer_addresses)
        self.callers = Callers(self, self.relay)
        self.intake = Intake(self, sig, self.ending, settings, self.callers)
        self.reports = Reports(self, sig, counters, self.callers, self.timers,
                               settings.chunk_bytes)
        self.liveness = Liveness(self, sig, counters, self.ending,
                                 settings.coordinator_address, self.security, self.reports)
        self.loop = RoundLoop(self, sig, counters, self.ending, self.relay, self.timers,
                              self.reports, self.liveness, settings.device, settings.chunk_bytes)
        self.outbound = Outbound(self, sig, settings.coordinator_address, self.security,
                                 self.timers, self.loop.encode_delta,
                                 self.liveness.on_destination_down, self.liveness.on_rejected)
        self.announcements = Announcements(self, sig, counters, self.callers, self.outbound)
        self.admission = Admission(self, counters, self.callers, self.timers)

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
        reply = register_with(s, self.security, request, self.signals.stop_requested)
        if reply is None:
            return False
        check_version(reply.protocol_version, "register reply")
        with self.signals.cond:
            self.run_id = reply.run_id
            self.worker_id = int(reply.worker_id)
            self.worker_key, self.coordinator_key = reply.worker_key, reply.coordinator_key
            self.phase = Phase.REGISTERED
            self.signals.cond.notify_all()
        log.info("registered as worker %d of %d in run %s (advertising %s)",
                 self.worker_id, reply.n_workers, self.run_id, self.address)
        return True

    def wait_registered(self, timeout: float) -> None:
        """Wait until registered (an RPC may beat Register's reply: callers, intake)."""
        with self.signals.cond:
            if not self.signals.cond.wait_for(lambda: bool(self.run_id), timeout):
                raise StaleOrUnknown("this worker is not registered in any run yet")

    def check_peer(self, worker_id: int, key: str) -> None:
        self.callers.check_peer(worker_id, key)

    # --------------------------------------------------------------- RPC handlers

    def configure(self, message: pb.RunConfig) -> None:
        self.wait_registered(self.settings.rpc_timeout)
        self.callers.check_run(message.protocol_version, message.run_id, "run config")
        plan = RunPlan.from_message(message)
        if plan.worker_id != self.worker_id:
            raise InvalidMessage(f"run config for worker {plan.worker_id}, this is "
                                 f"{self.worker_id}")
        with self.signals.cond:
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
            self.relay.configure(plan)
            self.counters.examples = plan.examples_base
            self.counters.rounds = plan.first_round - 1
            self.phase = Phase.CONFIGURED
        if self.relay.tree is not None and plan.down:
            # A resumed run that went on without them: routed around from the start, as if
            # they had died under way (one that comes back is the coordinator's leaf).
            self.relay.bury(plan, sorted(plan.down), "not in the resumed run")
        # The stall watch starts once the shard is in (loading it, which may hold the GIL
        # for long stretches, is no freeze) and before training: a freeze while waiting for
        # Start is a freeze too. One node per incarnation, so one ticker.
        self.liveness.start_watch()
        # Connected now, before Start: the first round's deltas do not wait for TCP and TLS
        # handshakes (measured: the first PushDelta of a run took 21-26 ms, later ones 3-9).
        self.outbound.open_destinations(plan, self.relay.tree)
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
        with self.signals.cond:
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
                self.counters.rounds = int(message.first_round) - 1
            self.phase = Phase.RUNNING
        self.signals.started.set()

    def push_delta(self, message: pb.Delta) -> bool:
        """Validate and queue a peer's delta; returns True if it was a duplicate."""
        plan, delta, limit = self.admission.admit(message)
        if self.relay.tree is None:
            if not self.inbox.offer(delta, limit):
                return True
            if plan.mode == "async" and self.phase is Phase.RUNNING:
                self.loop.apply_arrived()
            return False
        with self.signals.tree_lock:
            return take_tree_delta(self.relay, self.inbox, plan, delta, limit)

    def heartbeat(self, message: pb.HeartbeatRequest) -> None:
        """A peer says it is alive (it may be waiting on someone else)."""
        self.callers.check_run(message.protocol_version, message.run_id, "heartbeat")
        if self.plan is None:
            raise StaleOrUnknown("heartbeat received before the run config")
        self.inbox.touch(int(message.worker_id))

    def stop(self, message: pb.StopRequest) -> None:
        self.callers.check_run(message.protocol_version, message.run_id, "stop")
        if message.register_again:
            # The coordinator hands the run over to a successor that resumes it from the
            # checkpoint it has just written: what this worker trained since is superseded.
            self.ending.leave_to_rejoin(message.reason or "the coordinator is being replaced")
            return
        self.ending.ended_by_coordinator = True
        self.ending.request_stop(message.reason or "coordinator asked to stop")

    # ------------------------------------------------------------------- running

    def run(self) -> None:
        self.loop.run()

    def senders(self, plan: RunPlan) -> dict[int, str]:
        """Who sends this worker deltas: every peer (mesh), or the coordinator alone, under
        its own sender id (star: it relays the sum of the others' deltas)."""
        if plan.topology == "star":
            return {COORDINATOR_SENDER_ID: self.settings.coordinator_address}
        if plan.topology == "tree":
            return self.relay.neighbours(plan)
        return dict(plan.peers)

    def drop_peer(self, pid: int, round_: int, reason: str) -> None:
        """Stop waiting for a peer (tree: route around it); admission and liveness call it."""
        plan = self.plan
        if (self.relay.tree is not None and plan is not None and pid not in self.relay.dead
                and pid != COORDINATOR_SENDER_ID):
            self.relay.bury(plan, [pid], reason)  # drops it (back here), then re-attaches
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

    def close(self) -> None:
        """Flush (bounded) and close every outgoing channel."""
        for dest in self.destinations.values():
            dest.close(timeout=1.0)
