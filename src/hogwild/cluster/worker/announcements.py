"""What the coordinator tells a running worker: a step-size adjustment, a peer that is back."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Protocol

from hogwild.cluster.transport.sender import Destination
from hogwild.cluster.wire import pb
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.outbound import Outbound
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.shared import Counters, Signals
from hogwild.engine.round import RoundEngine
from hogwild.errors import InvalidMessage, StaleOrUnknown

log = logging.getLogger("hogwild.worker")


class AnnouncementsHost(Protocol):
    """What an announcement reads and changes on the worker (the node; configure replaces
    its plan, engine and inbox, and the destinations are replaced whole when one changes)."""

    plan: RunPlan | None
    step_plan: RunPlan | None
    adjustment: int
    engine: RoundEngine
    worker_id: int
    inbox: Inbox
    destinations: dict[int, Destination]
    reported_down: set[int]
    peer_addresses: dict[int, str]


class Announcements:
    """Changes to a run under way that the coordinator announces to this worker."""

    def __init__(self, node: AnnouncementsHost, signals: Signals, counters: Counters,
                 callers: Callers, outbound: Outbound) -> None:
        self.node = node
        self.signals = signals
        self.counters = counters
        self.callers = callers
        self.outbound = outbound

    def adjust(self, message: pb.Adjustment) -> None:
        """The coordinator saw the validation curve swing: train on with its step size and
        (async) staleness bound from the next round on. Values are the run's current ones,
        so an older adjustment arriving late changes nothing."""
        node = self.node
        self.callers.check_run(message.protocol_version, message.run_id, "adjustment")
        scale = float(message.lr_scale)
        if not (math.isfinite(scale) and 0 < scale <= 1):
            raise InvalidMessage(f"adjustment: lr_scale {scale!r} is not in (0, 1]")
        if message.staleness < 0:
            raise InvalidMessage(f"adjustment: staleness {message.staleness} is negative")
        plan = node.plan
        if plan is None:
            raise StaleOrUnknown("adjustment received before the run config")
        with self.signals.cond:  # not the exchange lock: an exchange may hold it for long
            if message.number <= node.adjustment:
                return
            node.adjustment = int(message.number)
            node.step_plan = dataclasses.replace(plan, learning_rate=plan.learning_rate * scale)
            rules = node.engine.rules
            if message.staleness and plan.mode == "async" and (
                    rules.staleness is None or message.staleness < rules.staleness):
                # Only ever tighter: the gate reads the engine's rules at each round.
                node.engine.rules = dataclasses.replace(rules, staleness=int(message.staleness))
        log.warning("coordinator: %s; step size now x%g of the configured one%s",
                    message.reason or "adjustment", scale,
                    f", staleness bound {node.engine.rules.staleness}"
                    if plan.mode == "async" and node.engine.rules.staleness is not None else "")

    def peer_joined(self, message: pb.PeerJoinedRequest) -> int:
        """A peer is back: accept its deltas again and send it ours from now on. Returns the
        first round whose delta goes to it (and whose barrier waits for it)."""
        node = self.node
        self.callers.check_run(message.protocol_version, message.run_id, "peer joined")
        plan = node.plan
        pid = int(message.worker_id)
        if plan is None or pid not in plan.peers:
            raise StaleOrUnknown(f"worker {pid} is not a peer of worker {node.worker_id}")
        if not message.address:
            raise InvalidMessage("peer joined without an address")
        if message.first_round > plan.max_rounds + 1:
            raise InvalidMessage(f"peer joined at round {message.first_round}, after "
                                 f"max_rounds {plan.max_rounds}")
        if plan.topology in ("star", "tree"):
            # star: no peer traffic to reopen; tree: the edges are fixed by the layout.
            return self.counters.rounds + 1
        # Between two exchanges: every delta from the next one on goes to the peer.
        with self.signals.exchange_lock:
            first = self.counters.rounds + 1
            # Its round-(first - 1) is "done": a barrier now waiting does not wait for it;
            # nor for the rounds before the one the coordinator starts it at, if later (this
            # worker lags the run), and its deltas may be labelled from there on.
            node.inbox.rejoin(pid, message.address, first - 1,
                              since=max(0, int(message.first_round) - 1))
            with self.signals.cond:
                node.reported_down.discard(pid)
                node.peer_addresses[pid] = message.address
                old = node.destinations.get(pid)
                if node.destinations:  # else not running yet: configure opens them
                    fresh = self.outbound.peer_destination(plan, pid, message.address)
                    # A new dict, so an exchange iterating the old one is not disturbed.
                    node.destinations = {**node.destinations, pid: fresh}
        if old is not None:
            old.abandon()
        log.info("peer %d is back at %s (from round %d)", pid, message.address, first)
        return first

