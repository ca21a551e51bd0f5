"""What the coordinator ships a worker before Start: its shard and, on a rejoin, the model."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.localstream import receive_local
from hogwild.cluster.wire.streams import ReceivedShard, receive_shard, receive_state
from hogwild.cluster.worker.callers import Callers
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.localdata import load_local_shard
from hogwild.cluster.worker.phase import Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.shared import Ending, Signals
from hogwild.config import Settings
from hogwild.data.formats.cache import user_cache_dir
from hogwild.engine.round import RoundEngine
from hogwild.errors import DataError, InvalidMessage, StaleOrUnknown

log = logging.getLogger("hogwild.worker")


class IntakeHost(Protocol):
    """What the intake reads and sets on the worker (the node; configure replaces its plan,
    engine and inbox, so they are read there each time)."""

    phase: Phase
    run_id: str
    worker_id: int
    shard: ReceivedShard | None
    plan: RunPlan | None
    engine: RoundEngine
    inbox: Inbox

    def wait_registered(self, timeout: float) -> None: ...


class Intake:
    """Receives the shard (streamed, or read from the worker's own copy) and starting weights."""

    def __init__(self, node: IntakeHost, signals: Signals, ending: Ending, settings: Settings,
                 callers: Callers) -> None:
        self.node = node
        self.signals = signals
        self.ending = ending
        self.settings = settings
        self.callers = callers

    def receive_shard(self, chunks: Iterable[pb.ShardChunk]) -> pb.ShardAck:
        node = self.node
        node.wait_registered(self.settings.rpc_timeout)
        with self.signals.cond:
            if node.phase not in (Phase.REGISTERED, Phase.SHARD):
                raise StaleOrUnknown(f"shard offered while {node.phase.value}")
        iterator = iter(chunks)
        first = next(iterator, None)
        if first is None:
            raise InvalidMessage("empty shard stream")
        self.callers.check_run(first.protocol_version, first.run_id, "shard")

        def replay() -> Iterator[pb.ShardChunk]:
            yield first
            yield from iterator

        if first.HasField("local"):
            shard = self.load_local(replay())
        else:
            if self.settings.out_of_core:
                log.warning("out_of_core: this worker holds its rows in memory all the same: "
                            "the coordinator ships them (shipping %s); a worker reads its rows "
                            "to disk only with shipping: local", "partition or stream")
            shard = receive_shard(replay(), run_id=node.run_id, worker_id=node.worker_id)
        with self.signals.cond:
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
        plan = receive_local(chunks, run_id=node.run_id, worker_id=node.worker_id)
        spill_to = user_cache_dir() / "parts" if self.settings.out_of_core else None
        try:
            try:
                data = load_local_shard(plan, self.settings.local_data, spill_to)
            except MemoryError:
                rows = sum(r.train_rows for r in plan.ranges)
                nnz = sum(r.train_nnz for r in plan.ranges)
                raise DataError(
                    f"not enough memory for this worker's {rows:,} training rows ({nnz:,} "
                    f"non-zeros, about {(8 * nnz + 12 * rows) / 1e6:,.0f} MB held): give it "
                    "more memory, start more workers, or set out_of_core: true") from None
        except DataError as exc:
            self.ending.fatal = f"cannot train on the planned rows: {exc}"
            self.ending.request_stop("it cannot hold or read the planned rows")
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
        with self.signals.cond:
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

