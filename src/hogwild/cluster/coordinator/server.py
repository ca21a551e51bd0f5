"""The coordinator process: serve the Coordinator service and drive one distributed run."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from typing import TextIO

import grpc

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.driver import HandedOver, Interrupted, RunDriver
from hogwild.cluster.coordinator.servicer import CoordinatorServicer
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.watch.stopping import StopSignal
from hogwild.cluster.transport.handshakes import HandshakeWatch
from hogwild.cluster.transport.health import (
    COORDINATOR_SERVICE,
    HealthReporter,
    add_health_and_reflection,
    stall_seconds,
    start_serving,
)
from hogwild.cluster.transport.security import from_settings
from hogwild.cluster.transport.serving import bind, new_server
from hogwild.cluster.wire import pb_grpc
from hogwild.cluster.wire.codec import warmup as codec_warmup
from hogwild.config import Settings
from hogwild.errors import EXIT_LEFT, EXIT_QUARANTINED, EXIT_STALLED, ConfigError
from hogwild.model.warmup import warmup
from hogwild.outputs import artifacts
from hogwild.outputs.plotter import BackgroundPlot
from hogwild.outputs.prometheus import MetricsServer, coordinator_reader, serve_metrics
from hogwild.runtime.announce import READY_PREFIX
from hogwild.runtime.signals import SignalWatch

log = logging.getLogger("hogwild.coordinator")

# Exit code of a coordinator stopped (SIGTERM) before training began: nothing was written.
INTERRUPTED = 130

__all__ = ["READY_PREFIX", "RunState", "create_server", "serve"]


def create_server(settings: Settings, state: RunState | None = None
                  ) -> tuple[grpc.Server, int, RunState, HealthReporter]:
    """A (not yet started) server bound to bind_host:coordinator_port (0 = any free port):
    (server, bound port, run state, health)."""
    state = state if state is not None else RunState(settings.workers)
    security = from_settings(settings)
    # Every worker pushes deltas and progress concurrently; keep a thread per sender + spare.
    server = new_server(max(8, 2 * settings.workers + 4), "coord-rpc", security)
    pb_grpc.add_CoordinatorServicer_to_server(  # type: ignore[no-untyped-call]
        CoordinatorServicer(state, security.channel), server)
    health = add_health_and_reflection(server, [COORDINATOR_SERVICE], settings.reflection)
    port = bind(server, settings.bind_host, settings.coordinator_port, security)
    return server, port, state, health


def serve(settings: Settings, out: TextIO | None = None,
          plot: BackgroundPlot | None = None) -> int:
    """Run the coordinator to the end of the run; 0 once outputs are written and published.

    The run is written in a directory of its own under out_dir (a runs root), or, resumed,
    in the directory of the run it continues; ConfigError before any port is bound if
    out_dir cannot be created or written. ``plot``: the loss plot's helper, if the caller
    has started it already.
    """
    root = artifacts.check_runs_root(settings.out_dir)
    where = checkpoint_file.locate(settings.resume) if settings.resume else None
    if where is None:
        if settings.resume:
            log.info("no checkpoint in %s: starting a new run", settings.resume)
        run = artifacts.RunDir.create(root)
    elif not where.name.endswith(artifacts.INCOMPLETE):
        raise ConfigError("resume", f"the checkpoint in {where} is not in a run's directory "
                                    f"(NAME{artifacts.INCOMPLETE} under out_dir): a run "
                                    "checkpointed by an earlier hogwild cannot be resumed; "
                                    "start it anew without resume")
    else:
        run = artifacts.RunDir.existing(where)
    with artifacts.run_held(run, "coordinator"):
        return _serve(settings, sys.stdout if out is None else out, plot, run)


def _serve(settings: Settings, out: TextIO, plot: BackgroundPlot | None,
           run: artifacts.RunDir) -> int:
    # Read under the run directory's lock: a coordinator still writing it refuses this one.
    resume = checkpoint_file.load(run.path) if settings.resume else None
    if resume is None:
        # The run's id is the end of its directory's name.
        state = RunState(settings.workers, run_id=run.name.rsplit("-", 1)[-1])
    else:
        # The same run: its id, its workers (by address) and its counters.
        had = len(resume.workers)
        # A run that engaged fewer of its workers goes on with those (engage: auto).
        if had != settings.workers and not (settings.engage == "auto" and had < settings.workers):
            raise ConfigError("workers", f"the checkpoint in {run.path} is of a run "
                                         f"with {had} workers")
        state = RunState(had, run_id=resume.run_id)
        checkpoint_file.check_model_settings(resume, settings)
        state.restore(resume)
    server, port, state, health = create_server(settings, state)
    stop = StopSignal()

    def on_sigterm() -> None:
        # finish: NOT_SERVING, stop the workers, write outputs, exit 0. checkpoint: leave the
        # run to a successor that resumes it (a Kubernetes Job's next pod), exit 143.
        health.set(False)
        stop.set("SIGTERM", hand_over=settings.on_sigterm == "checkpoint")

    def on_sigusr1() -> None:  # always finish: how to end a run early where SIGTERM hands over
        health.set(False)
        stop.set("SIGUSR1")

    # Before the port is announced: from then on a SIGTERM must find its handler in place.
    sigterm = SignalWatch(signal.SIGTERM, on_sigterm).install()
    sigusr1 = SignalWatch(signal.SIGUSR1, on_sigusr1).install()
    probes = start_serving(server, health, settings, log)
    # One line per peer host whose connections fail their TLS handshake (gRPC says nothing).
    handshakes = HandshakeWatch(port, from_settings(settings).tls).start()
    # One write (print() writes the newline apart, and a log line could land between): the
    # launcher reads this line by its prefix.
    out.write(f"{READY_PREFIX}{port}\n")
    out.flush()
    driver = RunDriver(settings, state, health, stop, out, resume, plot, run)
    metrics: MetricsServer | None = None
    health.watch(lambda: driver.alive_at, stall_seconds(settings.barrier_timeout,
                                                          settings.rpc_timeout))
    # Compiled kernels load on another thread while the data loads and the workers start;
    # both are done long before the clock of the run starts.
    threading.Thread(target=_warmup, name="coord-warmup", daemon=True).start()
    try:
        metrics = serve_metrics(
            settings, "coordinator",
            coordinator_reader(state, lambda: driver.history, lambda: driver.relay),
            {"run_id": state.run_id})
        result = driver.run()
        # Outputs written, but without the members quarantined on the way (said on the done
        # line and in metrics.json), or after training stalled: not the run that was asked
        # for.
        if state.roster.quarantine.why:
            return EXIT_QUARANTINED
        return EXIT_STALLED if result.get("stop_reason") == "stalled" else 0
    except Interrupted as exc:
        print(f"coordinator: {exc}", file=sys.stderr, flush=True)
        return INTERRUPTED
    except HandedOver as exc:
        print(f"coordinator: {exc}", file=sys.stderr, flush=True)
        return EXIT_LEFT
    finally:
        handshakes.close()  # (the server's own closing below is no peer's failure)
        health.set(False)
        health.shutdown()
        driver.close()
        # Give in-flight deltas and final-state streams a moment; never wait forever.
        server.stop(grace=2.0).wait(5.0)
        sigterm.restore()
        sigusr1.restore()
        if probes is not None:
            probes.stop(grace=None)
        if metrics is not None:
            metrics.close()


def _warmup() -> None:
    with contextlib.suppress(Exception):  # a real call reports any error
        warmup()
        codec_warmup()
