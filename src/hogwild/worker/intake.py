"""What the coordinator ships a worker before Start: its shard and, on a rejoin, the model."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from hogwild.errors import DataError, InvalidMessage, StaleOrUnknown
from hogwild.protocol import PROTOCOL_VERSION, pb
from hogwild.protocol.streams import ReceivedShard, receive_shard, receive_state
from hogwild.worker.phase import Phase

if TYPE_CHECKING:
    from hogwild.worker.node import WorkerNode

log = logging.getLogger("hogwild.worker")


class Intake:
    """Receives the shard (streamed, or read from the worker's own copy) and starting weights."""

    def __init__(self, node: WorkerNode) -> None:
        self.node = node

    def receive_shard(self, chunks: Iterable[pb.ShardChunk]) -> pb.ShardAck:
        node = self.node
        node.wait_registered(node.settings.rpc_timeout)
        with node.cond:
            if node.phase not in (Phase.REGISTERED, Phase.SHARD):
                raise StaleOrUnknown(f"shard offered while {node.phase.value}")
        iterator = iter(chunks)
        first = next(iterator, None)
        if first is None:
            raise InvalidMessage("empty shard stream")
        node.callers.check_run(first.protocol_version, first.run_id, "shard")

        def replay() -> Iterator[pb.ShardChunk]:
            yield first
            yield from iterator

        if first.HasField("local"):
            shard = self.load_local(replay())
        else:
            shard = receive_shard(replay(), run_id=node.run_id, worker_id=node.worker_id)
        with node.cond:
            node.shard = shard
            node.phase = Phase.SHARD
        log.info("received shard %d/%d: %d rows, %d non-zeros, %.1f MB",
                 shard.shard_index + 1, shard.shard_count, shard.data.n_rows, shard.data.nnz,
                 shard.bytes_received / 1e6)
        return pb.ShardAck(protocol_version=PROTOCOL_VERSION, run_id=node.run_id,
                           worker_id=node.worker_id, n_rows=shard.data.n_rows,
                           nnz=shard.data.nnz, bytes_received=shard.bytes_received,
                           shard_digest=shard.digest)

    def load_local(self, chunks: Iterator[pb.ShardChunk]) -> ReceivedShard:
        """shipping local: read this worker's ranges of the training file itself. A file that
        is not the one the coordinator planned with is refused, and ends this worker."""
        node = self.node
        from hogwild.protocol.localstream import receive_local
        from hogwild.worker.localdata import load_local_shard

        plan = receive_local(chunks, run_id=node.run_id, worker_id=node.worker_id)
        try:
            data = load_local_shard(plan, node.settings.local_data)
        except DataError as exc:
            node.fatal = f"cannot train on the planned rows: {exc}"
            node.request_stop("the data file differs from the coordinator's")
            raise
        return ReceivedShard(data, plan.digest, plan.bytes_received, plan.shard_index,
                             plan.shard_count)

    def load_model(self, chunks: Iterable[pb.StateChunk]) -> None:
        """Starting weights for a worker joining a run under way (the global model)."""
        node = self.node
        plan = node.plan
        if plan is None:
            raise StaleOrUnknown("model received before the run config")
        state = receive_state(chunks, plan.dim, node.run_id)
        with node.cond:
            if node.phase != Phase.CONFIGURED:
                raise StaleOrUnknown(f"model received while {node.phase.value}")
            # Both: the loaded weights are nobody's new update, so no delta is built from them.
            node.engine.load(state.weights)
            # Deltas that reached this process before: the global model holds them already.
            stale = node.inbox.drain()
        if stale:
            log.info("discarded %d delta message(s) received before the global model",
                     len(stale))
        log.info("loaded the global model to start from round %d", plan.first_round)

