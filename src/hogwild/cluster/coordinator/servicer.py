"""gRPC Coordinator service: decode, call the RunState, encode; ask an accused worker itself."""

from __future__ import annotations

import hmac
import logging
import math
import threading
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hogwild.cluster.coordinator.members.identity import register_claim
from hogwild.cluster.coordinator.members.records import Accusation
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.transport.health import LIVENESS
from hogwild.cluster.transport.security import can_serve, sender_key
from hogwild.cluster.transport.status import translate
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.wire.codec import check_version, decode_delta
from hogwild.config import MAX_THREADS
from hogwild.errors import InvalidMessage, NotAllowed, RefusedValues, StaleOrUnknown
from hogwild.settings.rules import is_address

log = logging.getLogger("hogwild.coordinator")

# How long a registration may wait for the worker at a disputed address to say who it is.
IDENTIFY_TIMEOUT = 2.0
# How long a worker reported down has to answer the coordinator before it is dropped: a
# killed one is refused at once, a frozen one never answers, a live one answers in
# milliseconds (its server's threads are not the training threads).
PROBE_TIMEOUT = 2.0
# What a registration may claim: a host:port or host name no longer than a DNS name allows
# (253) with a port, and the threads a worker's settings allow. The coordinator keeps these
# for the whole run and prints them, so a message of megabytes is refused, not stored.
MAX_NAME_LENGTH = 300


# A worker's registration secret (hogwild.cluster.worker.node draws 32 random bytes).
MIN_SECRET, MAX_SECRET = 16, 64


# Counters a worker reports about itself: far above any real run (a round a microsecond for
# twelve days; examples exact in a double), far below where they overflow a checkpoint, a
# round number sent on (uint64) or a sum of them.
MAX_ROUND = 1 << 40
MAX_EXAMPLES = 1 << 53


def check_counts(what: str, round_: int, examples: int = 0, staleness: int = 0) -> None:
    """InvalidMessage when a reported round, example count or staleness is out of range."""
    if round_ > MAX_ROUND or staleness > MAX_ROUND:
        raise InvalidMessage(f"{what}: round or staleness above {MAX_ROUND}")
    if examples > MAX_EXAMPLES:
        raise InvalidMessage(f"{what}: example count above {MAX_EXAMPLES}")


def check_loss(what: str, loss: float) -> None:
    """InvalidMessage when a reported loss is infinite. NaN is the protocol's "no loss yet"
    (a worker before its first round, or one reporting its divergence) and is taken."""
    if math.isinf(loss):
        raise InvalidMessage(f"{what}: train_loss must be a finite number (or NaN for none), "
                             f"got {loss}")


def check_registration(request: pb.RegisterRequest) -> None:
    """InvalidMessage unless the address is host:port and the other fields are in range."""
    address = request.address
    if len(address) > MAX_NAME_LENGTH or not is_address(address):
        raise InvalidMessage(f"registration: address must be host:port, got "
                             f"{address[:80]!r}{'...' if len(address) > 80 else ''}")
    if len(request.hostname) > MAX_NAME_LENGTH:
        raise InvalidMessage(f"registration: hostname of {len(request.hostname)} characters, "
                             f"at most {MAX_NAME_LENGTH}")
    if not MIN_SECRET <= len(request.process_secret) <= MAX_SECRET:
        raise InvalidMessage(f"registration: a process secret of {MIN_SECRET}..{MAX_SECRET} "
                             f"bytes is required, got {len(request.process_secret)}")
    if request.threads > MAX_THREADS:  # 0 (unset) counts as 1
        raise InvalidMessage(f"registration: {request.threads} threads, at most {MAX_THREADS}")


def probe(address: str, secret_digest: bytes, open_channel: Callable[[str], grpc.Channel],
          timeout: float) -> str | None:
    """Ask the worker registered at ``address`` whether it is there: None if, within
    ``timeout`` seconds, it answers as the process that registered (the digest of its
    registration secret is ``secret_digest``) and its health is SERVING (ready, and its
    training loop not stalled); else why it counts as down, in a few words."""
    deadline = time.monotonic() + timeout
    with open_channel(address) as channel:
        try:
            identity = pb_grpc.WorkerStub(channel).Identify(  # type: ignore[no-untyped-call]
                pb.IdentifyRequest(protocol_version=PROTOCOL_VERSION), timeout=timeout)
            if secret_digest and not hmac.compare_digest(identity.secret_digest,
                                                         secret_digest):
                return (f"another process answers at {address} (host "
                        f"{identity.hostname or '?'}, pid {identity.pid})")
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", LIVENESS):
                reply = health.Check(health_pb2.HealthCheckRequest(service=service),
                                     timeout=max(0.05, deadline - time.monotonic()))
                if reply.status != health_pb2.HealthCheckResponse.SERVING:
                    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
                    return f"it answers the coordinator {status} ({service or 'readiness'})"
        except grpc.RpcError as exc:
            return (f"no answer to the coordinator's probe ({exc.code().name}, deadline "
                    f"{timeout:g}s)")
    return None


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    """The Coordinator service over one :class:`RunState`."""

    def __init__(self, state: RunState,
                 open_channel: Callable[[str], grpc.Channel] = grpc.insecure_channel,
                 probe_timeout: float = PROBE_TIMEOUT) -> None:
        self.state = state
        self.open_channel = open_channel  # to ask a worker who it is (this server's TLS)
        self.probe_timeout = probe_timeout

    def _ack(self, duplicate: bool = False) -> pb.Ack:
        return pb.Ack(protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
                      duplicate=duplicate)

    @translate
    def Register(self, request: pb.RegisterRequest,
                 context: grpc.ServicerContext) -> pb.RegisterReply:
        check_version(request.protocol_version, "registration")
        if not can_serve(context):
            raise NotAllowed("a client-only certificate cannot register a worker (a worker "
                             "serves its peers: it needs a server certificate)")
        if request.run_id and request.run_id != self.state.run_id:
            raise StaleOrUnknown(f"registration for run {request.run_id!r}, which is not "
                                 "this run")
        check_registration(request)
        worker_id = register_claim(self.state.roster, request, self.open_channel, IDENTIFY_TIMEOUT)
        return pb.RegisterReply(protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
                                worker_id=worker_id, n_workers=self.state.roster.n_workers,
                                worker_key=self.state.roster.worker_key(worker_id),
                                coordinator_key=self.state.roster.coordinator_key(worker_id))

    @translate
    def PushDelta(self, request: pb.Delta, context: grpc.ServicerContext) -> pb.Ack:
        check_version(request.protocol_version, "delta")
        # Who before what: an unknown run or sender, or a caller without that sender's key,
        # fails before the payload is even read.
        self.state.roster.check_sender(request.run_id, request.worker_id, sender_key(context))
        check_counts("delta", request.round, request.examples)
        dim = self.state.model.dim
        if dim is None:
            raise StaleOrUnknown("delta received before the run started")
        try:
            applied = self.state.model.apply_delta(decode_delta(request, dim))
        except RefusedValues as exc:
            # A known sender (its key checked above) sent values no honest one sends: it is
            # quarantined, and the others no longer wait for it.
            self.state.roster.refuse(request.worker_id, str(exc))
            raise
        return self._ack(duplicate=not applied)

    @translate
    def ReportProgress(self, request: pb.Progress, context: grpc.ServicerContext) -> pb.Ack:
        check_version(request.protocol_version, "progress")
        check_counts("progress", request.round, request.examples, request.max_staleness)
        # A worker's own number, kept for the evaluations' rows: infinite, it would be
        # averaged into metrics.jsonl's train_loss (and JSON has no infinity).
        check_loss("progress", request.train_loss)
        self.state.roster.progress(request.run_id, request.worker_id, request.round,
                                   request.examples, request.train_loss, request.done,
                                   request.max_staleness, request.diverged,
                                   key=sender_key(context))
        return self._ack()

    @translate
    def ReportPeerDown(self, request: pb.PeerDown, context: grpc.ServicerContext) -> pb.Ack:
        check_version(request.protocol_version, "peer report")
        check_counts("peer report", request.round)
        # One member's word: the peer is asked first, off this thread (the reporter's
        # deltas to the coordinator wait behind this call). At most one probe per accused
        # worker runs at a time, so these threads are bounded by the run's size.
        accused = self.state.roster.reports.accuse(request.run_id, request.worker_id,
                                                   request.peer_id, request.round, request.reason,
                                                   key=sender_key(context))
        if accused is not None:
            threading.Thread(target=self._probe, args=(accused,), daemon=True,
                             name=f"probe-worker-{accused.peer}").start()
        return self._ack()

    def _probe(self, accused: Accusation) -> None:
        """Probe a worker reported down; drop it only if it does not answer as itself."""
        why_down: str | None = "the coordinator could not ask it"
        try:
            why_down = probe(accused.address, accused.secret_digest, self.open_channel,
                             self.probe_timeout)
        finally:  # settled whatever happens: a probe left pending would block every later one
            refused = self.state.roster.reports.settle(accused, why_down)
        if refused:
            log.warning("worker %d answers the coordinator (as the process that registered, "
                        "serving): report(s) by worker(s) %s that it is down refused, it stays "
                        "in the run", accused.peer, ", ".join(map(str, refused)))
