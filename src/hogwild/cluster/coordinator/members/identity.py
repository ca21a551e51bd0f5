"""Who answers at a worker address: settles two registrations that claim the same address."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import grpc

from hogwild.cluster.coordinator.members.records import AddressClaimed
from hogwild.cluster.coordinator.members.roster import Roster
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.errors import Conflict


def identify(address: str, open_channel: Callable[[str], grpc.Channel],
             timeout: float) -> pb.Identity | None:
    """The Identity of the worker serving ``address``, or None if nobody answers."""
    with open_channel(address) as channel:
        stub = pb_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]
        try:
            reply: pb.Identity = stub.Identify(
                pb.IdentifyRequest(protocol_version=PROTOCOL_VERSION), timeout=timeout)
            return reply
        except grpc.RpcError:
            return None


def register_claim(roster: Roster, request: pb.RegisterRequest,
                   open_channel: Callable[[str], grpc.Channel], timeout: float) -> int:
    """Register ``request`` with ``roster``. When its address is registered by another process,
    ask the address who serves it: if it is the new process, the old one is gone (a restart)
    and the new one takes its place; if the registered process still answers (two workers
    advertising one address) or nobody does, the registration is refused (Conflict)."""
    try:
        return roster.register(request.address, request.threads, request.hostname, request.pid,
                               secret=request.process_secret)
    except AddressClaimed as claimed:
        identity = identify(request.address, open_channel, timeout)
        # The process at the address proves it is the registrant by the digest of the secret
        # only the registrant sent: host and pid are no proof (a peer can ask for them).
        digest = hashlib.sha256(request.process_secret).digest()
        if (identity is not None and identity.pid == request.pid
                and identity.hostname == request.hostname
                and hmac.compare_digest(identity.secret_digest, digest)):
            return roster.register(request.address, request.threads, request.hostname,
                                   request.pid, verified=True, secret=request.process_secret)
        if identity is None:
            why = "and nothing answers there"
        else:
            why = (f"which still answers there (host {identity.hostname}, pid {identity.pid}); "
                   "give each worker its own advertise_address")
        raise Conflict(f"{claimed}, {why}") from None
