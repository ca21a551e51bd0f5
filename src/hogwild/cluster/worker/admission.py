"""Which peer deltas a worker accepts: the sender a member, the values bounded, the round near."""

from __future__ import annotations

from typing import Protocol

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.timing import Timers
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import DecodedDelta, decode_delta
from hogwild.cluster.wire.deltanorms import NormWatch
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.inbox import Inbox, dropped_sender
from hogwild.cluster.worker.phase import Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.shared import Counters
from hogwild.engine.treeshape import depth
from hogwild.errors import RefusedValues, StaleOrUnknown

# How far ahead of this worker a sender's round may be, per hop between them (see
# Admission.round_limit), and the slack added to every bound: too low a bound would refuse
# a legitimate delta, which loses it (the sender does not retry a refusal) and then stalls
# that sender's sequence; too high only lets a lying peer skip a few more barriers.
SYNC_ROUNDS_AHEAD = 2
ROUND_SLACK = 4


class AdmissionHost(Protocol):
    """What admitting a delta reads of the worker (the node; configure replaces its plan
    and inbox), and how it drops a peer whose values it refused."""

    plan: RunPlan | None
    inbox: Inbox
    phase: Phase

    def drop_peer(self, pid: int, round_: int, reason: str) -> None: ...


class Admission:
    """Checks a peer's delta and decodes it before it may be queued (the node queues it)."""

    def __init__(self, node: AdmissionHost, counters: Counters, callers: Callers,
                 timers: Timers) -> None:
        self.node = node
        self.counters = counters
        self.callers = callers
        self.timers = timers
        self.norms: NormWatch | None = None  # the relative bound (mesh), made on first use

    def admit(self, message: pb.Delta) -> tuple[RunPlan, DecodedDelta, int]:
        """The run's plan, the decoded delta and the highest round it may carry."""
        node = self.node
        self.callers.check_run(message.protocol_version, message.run_id, "delta")
        plan = node.plan
        if plan is None:
            raise StaleOrUnknown("delta received before the run config")
        if message.worker_id not in node.inbox.peers:
            raise StaleOrUnknown(f"delta from worker {message.worker_id}, not a peer of "
                                 f"worker {plan.worker_id}")
        if node.inbox.dropped(message.worker_id):
            # Said before its values are judged: refused for them alone, a dropped member
            # that goes on sending them would never learn that it must register again.
            raise dropped_sender("delta", message.worker_id)
        try:
            with self.timers.timed("decode"):
                # Values beyond what the run's SGD steps can make are refused like non-finite
                # ones: a member's 1e30 would wreck this model and, summed on, its peers'.
                delta = decode_delta(message, plan.dim, plan.max_delta_value)
                # And values far beyond what the other senders' deltas hold (a mesh: here
                # each delta is its sender's own; elsewhere sums, judged where they start).
                if plan.topology == "mesh" and plan.delta_norm_bound > 0:
                    if self.norms is None:
                        self.norms = NormWatch(plan.delta_norm_bound)
                    delta = self.norms.check(delta)
        except RefusedValues as exc:
            self.refuse(int(message.worker_id), str(exc))
            raise
        return plan, delta, self.round_limit(plan, delta.header.worker_id)

    def refuse(self, sender: int, why: str) -> None:
        """A peer's delta was refused for its values: counted, and the peer dropped (and
        reported to the coordinator), so that no barrier waits for its deltas any more. The
        coordinator's relay (topology star, tree) is counted, never dropped."""
        node = self.node
        node.inbox.count_refused(sender)
        if sender != COORDINATOR_SENDER_ID:
            node.drop_peer(sender, self.counters.rounds, f"a delta it sent was refused ({why})")

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
        star relay labels its final aggregate one past it).

        A peer taken back during the run starts at the run's round (the coordinator's, said
        in PeerJoined), not where this worker is: this worker may lag that far (slow, or
        just unfrozen while the others went on without it), and the rejoiner waits for it
        only from there on. So the bound counts from that round where it is the later one.
        Refused, a legitimate rejoiner's deltas were lost and the two waited on each other
        for good, each alive, so neither was dropped."""
        node = self.node
        ceiling = plan.max_rounds + 1 + ROUND_SLACK
        if node.phase is not Phase.RUNNING:
            return ceiling
        if plan.mode == "sync":
            ahead = SYNC_ROUNDS_AHEAD
        elif plan.staleness is not None:
            ahead = plan.staleness + 2
        else:
            return ceiling
        hops = 1
        peer = node.inbox.peers.get(sender)
        base = max(self.counters.rounds, peer.since if peer is not None else 0)
        if plan.topology == "tree":
            k = plan.tree_fanout
            there = 0 if sender == COORDINATOR_SENDER_ID else depth(sender, k)
            hops = max(1, abs(depth(plan.worker_id, k) - there))
        return base + hops * ahead + ROUND_SLACK
