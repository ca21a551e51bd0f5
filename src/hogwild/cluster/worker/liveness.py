"""A worker's liveness: heartbeats, the frozen-process watch, dropping silent or lost peers."""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import grpc

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.security import Security
from hogwild.cluster.transport.sender import Destination
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.phase import COORDINATOR_ID, Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.report import Reports
from hogwild.cluster.worker.shared import Counters, Ending, Signals
from hogwild.cluster.worker.watch import CoordinatorWatch
from hogwild.errors import ClusterError

log = logging.getLogger("hogwild.worker")

TICK = 0.1            # the stall watch's period (see Liveness.note_stall)


class LivenessHost(Protocol):
    """What liveness reads of the worker (the node; configure replaces its plan and inbox,
    and the destinations are replaced whole when one changes), and how it drops a peer or
    leaves the run."""

    phase: Phase
    plan: RunPlan | None
    inbox: Inbox
    destinations: dict[int, Destination]

    def drop_peer(self, pid: int, round_: int, reason: str) -> None: ...


class Liveness:
    """Signs of life sent and looked for: who is silent, unreachable, or refuses this worker."""

    def __init__(self, node: LivenessHost, signals: Signals, counters: Counters, ending: Ending,
                 coordinator_address: str, security: Security, reports: Reports) -> None:
        self.node = node
        self.signals = signals
        self.counters = counters
        self.ending = ending
        self.coordinator_address = coordinator_address
        self.security = security
        self.reports = reports  # progress: a relay's sign of life (heartbeat_loop)
        self.tick = time.monotonic()
        self.tick_lock = threading.Lock()

    def wait_for_start(self, timeout: float) -> None:
        """Block until Start (or a stop request); ClusterError after ``timeout``, or within
        seconds once the coordinator's process is gone (nothing to wait for then)."""
        deadline = time.monotonic() + timeout
        watch = CoordinatorWatch(self.coordinator_address,
                                 open_channel=self.security.channel)
        try:
            while not self.signals.started.wait(0.1):
                if self.signals.stop_requested.is_set():
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"the coordinator did not start the run within {timeout:g}s")
                if watch.gone():
                    raise ClusterError(
                        f"the coordinator at {self.coordinator_address} went away "
                        "before the run started")
        finally:
            watch.close()

    def wait_collected(self, timeout: float) -> bool:
        """After the run: wait until the coordinator collected the final state; False after
        ``timeout`` or as soon as the coordinator's process is gone."""
        deadline = time.monotonic() + timeout
        watch = CoordinatorWatch(self.coordinator_address,
                                 open_channel=self.security.channel)
        try:
            while not self.signals.state_served.wait(0.1):
                if time.monotonic() > deadline or watch.gone():
                    return False
            return True
        finally:
            watch.close()

    def heartbeat_loop(self, plan: RunPlan) -> None:
        """Tell every peer we are alive a few times per barrier_timeout, until done."""
        node = self.node
        interval = max(0.05, plan.barrier_timeout / 4)
        while not self.signals.done.wait(interval):
            if node.phase in (Phase.FINISHING, Phase.DONE) and plan.topology != "tree":
                return  # the final delta is sent: no peer waits for this worker any more
            # (tree: a finished worker relays until its neighbours finish: still alive)
            message = pb.HeartbeatRequest(protocol_version=PROTOCOL_VERSION,
                                          run_id=plan.run_id, worker_id=plan.worker_id,
                                          round=self.counters.rounds)
            for dest_id, dest in list(node.destinations.items()):
                # A destination with traffic queued gets deltas (signs of life) anyway.
                if dest_id != COORDINATOR_ID and dest.pending() == 0:
                    dest.put("Heartbeat", message)
            if plan.topology in ("star", "tree"):
                # The relay waits for us like a peer would: progress is our sign of life.
                self.reports.maybe_report_progress(plan, done=False)

    def start_watch(self) -> None:
        """Start the stall watch's ticker (one per node, from configure on)."""
        with self.tick_lock:
            self.tick = time.monotonic()
        threading.Thread(target=self.tick_loop, name="stall-watch", daemon=True).start()

    def tick_loop(self) -> None:
        while not self.signals.done.wait(TICK):
            self.note_stall()

    def note_stall(self) -> None:
        """Notice that this process itself was frozen (SIGSTOP, a suspended VM, swapping).

        The ticker thread looks at a monotonic clock every TICK seconds; a gap far longer
        means nothing here ran in between, so the peers' silence over that gap says nothing
        about them: their silence clocks start again now instead of dropping them all. If
        they dropped this worker meanwhile, they refuse its next message and it registers
        again to resynchronise (see on_rejected). Called by the ticker and by whoever is
        about to drop a silent peer, whichever runs first after the freeze.
        """
        node = self.node
        plan = node.plan
        limit = max(0.5, min(2.0, plan.barrier_timeout / 2)) if plan else 2.0
        with self.tick_lock:
            now = time.monotonic()
            gap = now - self.tick
            self.tick = now
            if gap > limit:
                node.inbox.touch_all()
                log.warning("this worker was frozen for %.1fs; restarting its peers' silence "
                            "clocks instead of dropping them", gap)

    def drop_silent(self, plan: RunPlan, round_: int, waiting_for: str) -> None:
        """Drop every live peer not heard from for barrier_timeout (dead, not just slow), and
        (mesh) every one whose last delta this worker refused as labelled too far ahead:
        waited for, it would hold this worker back for good (see Inbox.refused_ahead)."""
        node = self.node
        self.note_stall()
        if plan.topology == "mesh":
            for pid in node.inbox.refused_ahead():
                node.drop_peer(pid, round_, "its last delta was refused as labelled further "
                                             f"ahead than a peer can be, while {waiting_for}")
        for pid in node.inbox.silent(plan.barrier_timeout):
            if pid == COORDINATOR_SENDER_ID:
                # Star: the coordinator drops silent workers itself and relays the rest; its
                # own death is noticed by its destination (fatal) and the watch.
                continue
            node.drop_peer(pid, round_, f"silent for more than barrier_timeout="
                                         f"{plan.barrier_timeout:g}s while {waiting_for}")

    def on_destination_down(self, dest_id: int, why: str) -> None:
        node = self.node
        if dest_id == COORDINATOR_ID:
            if self.ending.ended_by_coordinator:
                # It ended the run (a failure such as divergence may end it at once, without
                # collecting): nothing to register again for. This worker used to wait
                # connect_timeout for a successor that nobody starts.
                log.info("the coordinator that ended the run is gone (%s): finishing", why)
                return
            self.ending.leave_to_rejoin(f"the coordinator is unreachable ({why})")
            return
        status = node.inbox.snapshot().get(dest_id)
        if status is not None and status.final:
            # It sent its final delta: it is done, and may leave once the coordinator has its
            # state; what this worker still had for it changes nothing of the run, so this is
            # no fault to report (a report would have it dropped after it finished).
            log.info("peer %d finished and left (%s); nothing more is sent to it", dest_id, why)
            return
        node.drop_peer(dest_id, self.counters.rounds, f"unreachable: {why}")

    def on_rejected(self, dest_id: int, rpc: str, code: grpc.StatusCode, details: str) -> None:
        """A peer or the coordinator no longer counts this worker as a member of the run
        (it was dropped, e.g. while frozen): leave, register again, resynchronise."""
        node = self.node
        # A progress report refused too: a worker held back by its staleness bound sends
        # the coordinator nothing else (a resumed coordinator that it never re-registered
        # with waited for it in vain).
        if code != grpc.StatusCode.FAILED_PRECONDITION or rpc not in (
                "PushDelta", "Heartbeat", "ReportProgress"):
            return
        with self.signals.cond:
            running = node.phase == Phase.RUNNING
        if running:
            who = "the coordinator" if dest_id == COORDINATOR_ID else f"peer {dest_id}"
            self.ending.leave_to_rejoin(f"{who} refused its {rpc}: {details}")

