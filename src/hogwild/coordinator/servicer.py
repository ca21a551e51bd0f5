"""gRPC Coordinator service: decode, call the RunState, encode. No logic of its own."""

from __future__ import annotations

import math
from collections.abc import Callable

import grpc

from hogwild.coordinator.identity import register_claim
from hogwild.coordinator.state import RunState
from hogwild.errors import InvalidMessage, NotAllowed, StaleOrUnknown
from hogwild.protocol import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.protocol.codec import check_version, decode_delta
from hogwild.protocol.security import can_serve, sender_key
from hogwild.protocol.status import translate

# How long a registration may wait for the worker at a disputed address to say who it is.
IDENTIFY_TIMEOUT = 2.0
# What a registration may claim: a host:port or host name no longer than a DNS name allows
# (253) with a port, and the threads a worker's settings allow. The coordinator keeps these
# for the whole run and prints them, so a message of megabytes is refused, not stored.
MAX_NAME_LENGTH = 300
MAX_THREADS = 256


# A worker's registration secret (hogwild.worker.node draws 32 random bytes).
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
    host, sep, port = address.rpartition(":")
    if (len(address) > MAX_NAME_LENGTH or not sep or not host or not port.isdigit()
            or not 0 < int(port) < 65536):
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


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    """The Coordinator service over one :class:`RunState`."""

    def __init__(self, state: RunState,
                 open_channel: Callable[[str], grpc.Channel] = grpc.insecure_channel) -> None:
        self.state = state
        self.open_channel = open_channel  # to ask a worker who it is (this server's TLS)

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
        worker_id = register_claim(self.state, request, self.open_channel, IDENTIFY_TIMEOUT)
        return pb.RegisterReply(protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
                                worker_id=worker_id, n_workers=self.state.n_workers,
                                worker_key=self.state.worker_key(worker_id),
                                coordinator_key=self.state.coordinator_key(worker_id))

    @translate
    def PushDelta(self, request: pb.Delta, context: grpc.ServicerContext) -> pb.Ack:
        check_version(request.protocol_version, "delta")
        # Who before what: an unknown run or sender, or a caller without that sender's key,
        # fails before the payload is even read.
        self.state.check_sender(request.run_id, request.worker_id, sender_key(context))
        check_counts("delta", request.round, request.examples)
        dim = self.state.dim
        if dim is None:
            raise StaleOrUnknown("delta received before the run started")
        applied = self.state.apply_delta(decode_delta(request, dim))
        return self._ack(duplicate=not applied)

    @translate
    def ReportProgress(self, request: pb.Progress, context: grpc.ServicerContext) -> pb.Ack:
        check_version(request.protocol_version, "progress")
        check_counts("progress", request.round, request.examples, request.max_staleness)
        # A worker's own number, kept for the evaluations' rows: infinite, it would be
        # averaged into metrics.jsonl's train_loss (and JSON has no infinity).
        check_loss("progress", request.train_loss)
        self.state.progress(request.run_id, request.worker_id, request.round, request.examples,
                            request.train_loss, request.done, request.max_staleness,
                            request.diverged, key=sender_key(context))
        return self._ack()

    @translate
    def ReportPeerDown(self, request: pb.PeerDown, context: grpc.ServicerContext) -> pb.Ack:
        check_version(request.protocol_version, "peer report")
        check_counts("peer report", request.round)
        self.state.peer_down(request.run_id, request.worker_id, request.peer_id, request.round,
                             request.reason, key=sender_key(context))
        return self._ack()
