"""The worker process: serve the Worker service, register, train a shard, exchange deltas."""

from __future__ import annotations

import logging
import signal
import sys
import time

import grpc

from hogwild.cluster.transport.health import (
    WORKER_SERVICE,
    HealthReporter,
    add_health_and_reflection,
    stall_seconds,
    start_serving,
)
from hogwild.cluster.transport.security import from_settings
from hogwild.cluster.transport.serving import bind, new_server
from hogwild.cluster.wire import pb_grpc
from hogwild.cluster.wire.codec import warmup as codec_warmup
from hogwild.cluster.worker.node import WorkerNode
from hogwild.cluster.worker.servicer import WorkerServicer
from hogwild.config import Settings
from hogwild.engine.gpu_device import cuda_device
from hogwild.errors import EXIT_LEFT, EXIT_QUARANTINED, ClusterError, Quarantined
from hogwild.model.warmup import warmup
from hogwild.outputs.prometheus import MetricsServer, serve_metrics, worker_reader
from hogwild.runtime.announce import REGISTERED_PREFIX
from hogwild.runtime.signals import SignalWatch

log = logging.getLogger("hogwild.worker")

# Seconds of loading the compiled kernels past which the worker says so: the coordinator
# waits for it to be ready before it ships a shard (normally a second or two from the cache).
SLOW_WARMUP = 10.0

__all__ = ["WorkerNode", "create_server", "serve"]


def create_server(settings: Settings, node: WorkerNode | None = None
                  ) -> tuple[grpc.Server, int, WorkerNode, HealthReporter]:
    """A started-ready (not yet started) server bound to bind_host:worker_port (0 = any free
    port): (server, bound port, node, health)."""
    server, port, servicer, health = _build(settings, node)
    return server, port, servicer.node, health


def _build(settings: Settings, node: WorkerNode | None
           ) -> tuple[grpc.Server, int, WorkerServicer[WorkerNode], HealthReporter]:
    servicer = WorkerServicer(node if node is not None else WorkerNode(settings))
    security = from_settings(settings)
    # Threads: one per peer pushing deltas, the coordinator's calls, health checks.
    server = new_server(max(8, 2 * settings.workers + 4), "worker-rpc", security)
    pb_grpc.add_WorkerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health = add_health_and_reflection(server, [WORKER_SERVICE], settings.reflection)
    port = bind(server, settings.bind_host, settings.worker_port, security)
    return server, port, servicer, health


def serve(settings: Settings) -> int:
    """Run one worker to completion; 0 when the run ends (its own end or the coordinator's
    Stop), EXIT_LEFT when SIGTERM made it leave a run still under way (final delta sent),
    EXIT_QUARANTINED when the coordinator refuses it for good (a delta of it was refused).

    A worker that loses its place in the run (the coordinator went away, or its peers dropped
    it while it was frozen) registers again with a fresh node, on the same server and address:
    the coordinator gives it its old id, its shard and the current global model.
    """
    if settings.device != "cpu":  # no such GPU: refused before registering (numba.cuda loads now)
        cuda_device(settings.device)
    server, port, servicer, health = _build(settings, None)
    probes = start_serving(server, health, settings, log)

    def on_sigterm() -> None:  # SIGTERM: NOT_SERVING, stop training, final delta, leave
        health.set(False)
        servicer.node.ending.request_stop("SIGTERM", leave=True)
        servicer.node.signals.started.set()  # wake a worker still waiting for the run to start

    # Before the port is announced: whoever reads it may send SIGTERM at once.
    sigterm = SignalWatch(signal.SIGTERM, on_sigterm).install()
    sys.stdout.write(f"worker listening on port {port}\n")  # one write: see below
    sys.stdout.flush()
    metrics: MetricsServer | None = None
    health.watch(lambda: servicer.node.loop.alive_at,
                 stall_seconds(settings.barrier_timeout, settings.rpc_timeout))
    try:
        metrics = serve_metrics(settings, "worker", worker_reader(lambda: servicer.node))
        # Register first: the coordinator learns of this worker (and goes on loading data or
        # waiting for the others) while the compiled kernels load here; they are loaded
        # before the shard arrives, so round 1 is not slower than the rest.
        warmed = False
        while True:
            node = servicer.node
            try:
                registered = node.register(port)
            except Quarantined as exc:
                # Its deltas were refused: the run goes on without it (not a failure of the
                # run's other processes, so not exit 1).
                print(f"hogwild worker: {exc}", file=sys.stderr, flush=True)
                return EXIT_QUARANTINED
            if not registered:
                return EXIT_LEFT  # SIGTERM before the coordinator answered
            # For `hogwild run`, which names this process's output by the id (see announce).
            # One write (print() writes the newline apart, and a log line could land
            # between): the launcher reads this line by its prefix.
            sys.stdout.write(f"{REGISTERED_PREFIX}{node.worker_id}\n")
            sys.stdout.flush()
            if not warmed:
                began = time.monotonic()
                warmup()
                codec_warmup()
                warmed = True
                loaded = time.monotonic() - began
                if loaded > SLOW_WARMUP:  # the coordinator waits for it: say why
                    log.warning("loading the compiled kernels took %.1fs (a cold or stale "
                                "numba cache compiles them anew; a busy machine slows the "
                                "loading)", loaded)
            health.set(True)
            node.liveness.wait_for_start(settings.register_timeout + settings.connect_timeout)
            node.run()
            if node.ending.rejoin_reason is None or sigterm.received:
                break
            node.close()
            servicer.node = WorkerNode(settings)
        if node.ending.fatal is not None:
            raise ClusterError(node.ending.fatal)
        # The coordinator collects the final state after Stop; do not wait forever.
        if (node.signals.done.is_set() and not node.ending.leaving
                and not node.liveness.wait_collected(settings.connect_timeout)):
            log.warning("the coordinator did not collect the final state (gone, or not within "
                        "connect_timeout=%.0fs)", settings.connect_timeout)
        # SIGTERM first, or while registering again: this worker left a run that goes on.
        if sigterm.received and (node.ending.stop_reason == "SIGTERM" or node.ending.rejoin_reason is not None):
            log.info("left the run on SIGTERM (exit %d: a supervisor may start it again, and it "
                     "rejoins)", EXIT_LEFT)
            return EXIT_LEFT
        return 0
    finally:
        health.set(False)
        health.shutdown()
        servicer.node.close()
        server.stop(grace=1.0).wait(2.0)
        sigterm.restore()
        if probes is not None:
            probes.stop(grace=None)
        if metrics is not None:
            metrics.close()
