"""gRPC Worker service: check who calls, decode, call the WorkerNode, encode. No logic of its own.

Calls only the coordinator makes (shard, config, start, stop, final state) must carry the
coordinator's sender key; a peer's delta or heartbeat must carry that peer's key. Long calls
(the shard stream, the final-state wait) are bounded in number and in time, so that no caller
can hold the server's threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

import grpc

from hogwild.cluster.transport.security import CallLimit, sender_key, wait_budget
from hogwild.cluster.transport.status import translate, translate_stream
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.worker.announcements import Announcements
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.intake import Intake
from hogwild.cluster.worker.report import Reports
from hogwild.config import Settings

# Long calls at once: the coordinator makes one of each per run (ReceiveShard, GetFinalState);
# a retry or a second look fits as well.
LONG_CALLS = 2


class Served(Protocol):
    """What the service calls on a node: its handlers and the roles that answer the rest."""

    settings: Settings
    run_id: str
    callers: Callers
    intake: Intake
    announcements: Announcements
    reports: Reports

    def configure(self, message: pb.RunConfig) -> None: ...

    def start(self, message: pb.StartRequest) -> None: ...

    def check_peer(self, worker_id: int, key: str) -> None: ...

    def push_delta(self, message: pb.Delta) -> bool: ...

    def heartbeat(self, message: pb.HeartbeatRequest) -> None: ...

    def stop(self, message: pb.StopRequest) -> None: ...

    def peer_joined(self, message: pb.PeerJoinedRequest) -> int: ...

    def identify(self) -> pb.Identity: ...


NodeT = TypeVar("NodeT", bound=Served)


class WorkerServicer(pb_grpc.WorkerServicer, Generic[NodeT]):
    """The Worker service of one node (``node`` is replaced when the worker registers again)."""

    def __init__(self, node: NodeT) -> None:
        self.node = node
        self.long_calls = CallLimit(LONG_CALLS)

    def _ack(self, duplicate: bool = False) -> pb.Ack:
        return pb.Ack(protocol_version=PROTOCOL_VERSION, run_id=self.node.run_id,
                      duplicate=duplicate)

    @translate
    def ReceiveShard(self, request_iterator: Iterator[pb.ShardChunk],
                     context: grpc.ServicerContext) -> pb.ShardAck:
        with self.long_calls.slot("ReceiveShard"):
            # The shard may come before this worker has read the registration reply.
            self.node.callers.check_coordinator(sender_key(context), wait=self.node.settings.rpc_timeout)
            return self.node.intake.receive_shard(request_iterator)

    @translate
    def Configure(self, request: pb.RunConfig, context: grpc.ServicerContext) -> pb.Ack:
        self.node.callers.check_coordinator(sender_key(context))
        self.node.configure(request)
        return self._ack()

    @translate
    def Adjust(self, request: pb.Adjustment, context: grpc.ServicerContext) -> pb.Ack:
        self.node.callers.check_coordinator(sender_key(context))
        self.node.announcements.adjust(request)
        return self._ack()

    @translate
    def Start(self, request: pb.StartRequest, context: grpc.ServicerContext) -> pb.Ack:
        self.node.callers.check_coordinator(sender_key(context))
        self.node.start(request)
        return self._ack()

    @translate
    def PushDelta(self, request: pb.Delta, context: grpc.ServicerContext) -> pb.Ack:
        self.node.check_peer(request.worker_id, sender_key(context))
        return self._ack(duplicate=self.node.push_delta(request))

    @translate
    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.Ack:
        self.node.check_peer(request.worker_id, sender_key(context))
        self.node.heartbeat(request)
        return self._ack()

    @translate
    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.Ack:
        self.node.callers.check_coordinator(sender_key(context))
        self.node.stop(request)
        return self._ack()

    @translate
    def LoadModel(self, request_iterator: Iterator[pb.StateChunk],
                  context: grpc.ServicerContext) -> pb.Ack:
        with self.long_calls.slot("LoadModel"):
            self.node.callers.check_coordinator(sender_key(context))
            self.node.intake.load_model(request_iterator)
            return self._ack()

    @translate
    def PeerJoined(self, request: pb.PeerJoinedRequest,
                   context: grpc.ServicerContext) -> pb.PeerJoinedReply:
        self.node.callers.check_coordinator(sender_key(context))
        return pb.PeerJoinedReply(protocol_version=PROTOCOL_VERSION, run_id=self.node.run_id,
                                  round=self.node.peer_joined(request))

    @translate
    def Identify(self, request: pb.IdentifyRequest,
                 context: grpc.ServicerContext) -> pb.Identity:
        # No sender key: the coordinator asks while this worker's registration is pending.
        return self.node.identify()

    @translate_stream
    def GetFinalState(self, request: pb.FinalStateRequest,
                      context: grpc.ServicerContext) -> Iterator[pb.StateChunk]:
        with self.long_calls.slot("GetFinalState"):
            self.node.callers.check_coordinator(sender_key(context))
            s = self.node.settings
            # A call without a deadline waits rpc_timeout; none waits longer than the
            # coordinator's own deadline for it could be.
            timeout = wait_budget(context, default=s.rpc_timeout,
                                  ceiling=s.barrier_timeout + 2 * s.rpc_timeout + 60.0)
            yield from self.node.reports.final_state(request, timeout)
