"""gRPC Worker service: decode, call the WorkerNode, encode. No logic of its own."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from hogwild.protocol import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.protocol.status import translate, translate_stream
from hogwild.worker.node import WorkerNode


class WorkerServicer(pb_grpc.WorkerServicer):
    """The Worker service of one node."""

    def __init__(self, node: WorkerNode) -> None:
        self.node = node

    def _ack(self, duplicate: bool = False) -> pb.Ack:
        return pb.Ack(protocol_version=PROTOCOL_VERSION, run_id=self.node.run_id,
                      duplicate=duplicate)

    @translate
    def ReceiveShard(self, request_iterator: Iterator[pb.ShardChunk],
                     context: grpc.ServicerContext) -> pb.ShardAck:
        return self.node.receive_shard(request_iterator)

    @translate
    def Configure(self, request: pb.RunConfig, context: grpc.ServicerContext) -> pb.Ack:
        self.node.configure(request)
        return self._ack()

    @translate
    def Start(self, request: pb.StartRequest, context: grpc.ServicerContext) -> pb.Ack:
        self.node.start(request)
        return self._ack()

    @translate
    def PushDelta(self, request: pb.Delta, context: grpc.ServicerContext) -> pb.Ack:
        return self._ack(duplicate=self.node.push_delta(request))

    @translate
    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.Ack:
        self.node.heartbeat(request)
        return self._ack()

    @translate
    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.Ack:
        self.node.stop(request)
        return self._ack()

    @translate_stream
    def GetFinalState(self, request: pb.FinalStateRequest,
                      context: grpc.ServicerContext) -> Iterator[pb.StateChunk]:
        remaining = context.time_remaining()
        timeout = 60.0 if remaining is None else max(0.0, remaining - 0.2)
        yield from self.node.final_state(request, timeout)
