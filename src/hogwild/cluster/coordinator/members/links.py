"""The coordinator's calls on its workers: channels, RPCs, models sent, final states taken."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from concurrent import futures
from typing import Any, TypeVar

import grpc
import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.data.shipment import SLOW_LINK_BYTES_PER_S
from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.transport.security import from_settings
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.wire.streams import FinalState, receive_state, state_chunks
from hogwild.config import Settings
from hogwild.errors import ClusterError, HogwildError

log = logging.getLogger("hogwild.coordinator")

T = TypeVar("T")
# A worker not ready this many seconds after the coordinator began to wait for it is said so
# (then again once it is ready), so a slow start is in the log with its cause.
READY_NOTE_AFTER = 5.0


class WorkerLinks:
    """A channel and stub per registered worker, and the RPCs the run makes through them."""

    def __init__(self, settings: Settings, state: RunState) -> None:
        self.settings = settings
        self.state = state
        self.channels: dict[int, grpc.Channel] = {}
        self.stubs: dict[int, Any] = {}

    def connect(self, record: WorkerRecord) -> None:
        """A channel and stub to a registered worker's (current) address."""
        old = self.channels.pop(record.worker_id, None)
        if old is not None:
            old.close()
        self.channels[record.worker_id] = from_settings(self.settings).channel(
            record.address, self.state.roster.coordinator_key(record.worker_id))
        self.stubs[record.worker_id] = pb_grpc.WorkerStub(  # type: ignore[no-untyped-call]
            self.channels[record.worker_id])

    def call(self, record: WorkerRecord, rpc: str, message: Any) -> Any:
        try:
            return getattr(self.stubs[record.worker_id], rpc)(
                message, timeout=self.settings.rpc_timeout)
        except grpc.RpcError as exc:
            raise ClusterError(f"{rpc} to worker {record.worker_id} at {record.address} failed: "
                               f"{exc.code().name} {exc.details()}") from None

    def wait_ready(self, record: WorkerRecord, timeout: float,
                   stopped: Callable[[], bool]) -> None:
        """Until the worker's health says SERVING: a new process loads its kernels after it
        registers, and a shard shipped meanwhile would miss its deadline."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self.channels[record.worker_id])
        began = time.monotonic()
        deadline = began + timeout
        said = False
        while time.monotonic() < deadline and not stopped():
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                answer = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    if said:
                        log.info("worker %d ready after %.1fs", record.worker_id,
                                 time.monotonic() - began)
                    return
            except grpc.RpcError as exc:
                answer = exc.code().name
            if not said and time.monotonic() - began > READY_NOTE_AFTER:
                # A worker loads its compiled kernels before it says SERVING: seconds, or
                # longer where numba compiles them anew (a cold or stale cache).
                log.info("waiting for worker %d at %s to be ready (its health: %s)",
                         record.worker_id, record.address, answer)
                said = True
            time.sleep(0.2)
        raise ClusterError(f"worker {record.worker_id} at {record.address} was not ready "
                           f"within {timeout:g}s")

    def load_model(self, record: WorkerRecord, dim: int,
                   weights: npt.NDArray[np.float64] | None = None) -> None:
        """Send a worker the model to start from (LoadModel): ``weights``, or the global
        model now."""
        model = FinalState(worker_id=record.worker_id,
                           weights=self.state.model.model_copy() if weights is None else weights)
        try:
            self.stubs[record.worker_id].LoadModel(
                state_chunks(model, self.state.run_id, self.settings.chunk_bytes),
                timeout=self.settings.rpc_timeout + dim * 8 / SLOW_LINK_BYTES_PER_S)
        except grpc.RpcError as exc:
            raise ClusterError(f"LoadModel to worker {record.worker_id} failed: "
                               f"{exc.code().name} {exc.details()}") from None

    def stop(self, reason: str, quiet: bool = False, register_again: bool = False,
             skip: Collection[int] = ()) -> None:
        """Stop every live worker but those in ``skip``; ``quiet``: failures not logged.
        ``register_again``: each is to register again (with a successor)."""
        live = [r for r in self.state.roster.live_workers()
                if r.worker_id in self.stubs and r.worker_id not in skip]
        self._send_stop(live, reason, register_again,
                        None if quiet else logging.WARNING)

    def release(self, records: Collection[WorkerRecord], reason: str) -> None:
        """Stop workers the run will not train on (before anything is shipped to them) and
        close their channels; one that does not answer has nothing of the run to lose."""
        self._send_stop(records, reason, False, logging.INFO)
        for record in records:
            self.stubs.pop(record.worker_id, None)
            channel = self.channels.pop(record.worker_id, None)
            if channel is not None:
                channel.close()

    def _send_stop(self, records: Collection[WorkerRecord], reason: str,
                   register_again: bool, failures: int | None) -> None:
        """Stop to each of ``records`` at once; a failure logged at level ``failures``
        (None: not logged)."""
        request = pb.StopRequest(protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
                                 reason=reason, register_again=register_again)

        def stop(record: WorkerRecord) -> None:
            try:
                self.stubs[record.worker_id].Stop(request, timeout=self.settings.rpc_timeout)
            except grpc.RpcError as exc:
                if failures is not None:
                    log.log(failures, "Stop%s to worker %d failed: %s",
                            " (register again)" if register_again else "",
                            record.worker_id, exc.code().name)

        if records:
            parallel(stop, list(records), swallow=True)

    def collect_final_states(self, dim: int) -> dict[int, FinalState]:
        """Every live worker's final state (a worker that sends none is marked dead)."""
        s = self.settings
        request = pb.FinalStateRequest(protocol_version=PROTOCOL_VERSION,
                                       run_id=self.state.run_id)
        # A worker first waits (up to barrier_timeout) for its peers' final deltas.
        timeout = s.barrier_timeout + 2 * s.rpc_timeout + dim * 8 / SLOW_LINK_BYTES_PER_S

        def collect(record: WorkerRecord) -> FinalState | None:
            try:
                chunks = self.stubs[record.worker_id].GetFinalState(request, timeout=timeout)
                return receive_state(chunks, dim, self.state.run_id)
            except grpc.RpcError as exc:
                log.warning("no final state from worker %d: %s %s", record.worker_id,
                            exc.code().name, exc.details())
                self.state.roster.mark_dead(record.worker_id, "final state not collected")
            except HogwildError as exc:  # InvalidMessage: a corrupt stream
                log.warning("bad final state from worker %d: %s", record.worker_id, exc)
            return None

        live = self.state.roster.live_workers()
        return {record.worker_id: result
                for record, result in zip(live, parallel(collect, live, swallow=True))
                if result is not None}

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


def parallel(fn: Callable[[WorkerRecord], T], items: list[WorkerRecord],
             swallow: bool = False) -> list[T]:
    """``fn`` over every worker at once (one thread each); the first error is re-raised."""
    if not items:
        return []
    with futures.ThreadPoolExecutor(max_workers=len(items)) as pool:
        jobs = [pool.submit(fn, item) for item in items]
        results = []
        for job in jobs:
            try:
                results.append(job.result())
            except Exception:
                if not swallow:
                    raise
                results.append(None)  # type: ignore[arg-type]
        return results
