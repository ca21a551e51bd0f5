"""A process of `hogwild run` started before its command line is known.

Started as ``python -m hogwild.prespawned ROLE [SECRETS_DIR]`` (the launcher inside
a larger program; that entry point hands :func:`run` the command line's runner), it imports
its libraries while the launcher writes the run's throw-away certificates (the coordinator)
or learns the coordinator's port (the workers): the coordinator role starts the loss plot's
helper and imports numpy, numba and grpc; the worker role (the default) loads its compiled
kernels too. A child forked by a whole `hogwild run` (hogwild.cluster.localrun.forked) enters at
:func:`run` with all of that loaded already. Either way it then reads its `hogwild`
arguments (one JSON list) from stdin and runs them like ``python -m hogwild.cli ARGS``
would, with the runner it was given (hogwild.cli.main_process: this package never imports
the command line, whose `run` command starts these processes). Arguments never appear on a
command line; an empty stdin (the launcher gave up) ends the process with 0.
``SECRETS_DIR``: the launcher's directory of throw-away credentials, which the child removes
if the launcher dies without doing so (each process has read its own credentials by then:
they are read once per process).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from hogwild.base.startup import import_long_lived, long_lived

if TYPE_CHECKING:
    from collections.abc import Callable

    from hogwild.outputs.plotter import BackgroundPlot

    # Runs one `hogwild` command line as the whole process and returns its exit code; the
    # plot helper given, if any, is the command's to close (hogwild.cli.main_process).
    CommandRunner = Callable[[list[str], BackgroundPlot | None], int]

ROLES = ("coordinator", "worker")
# The module that serves each role (imported long-lived before the command line arrives).
ROLE_MODULES = {"coordinator": "hogwild.cluster.coordinator.server", "worker": "hogwild.cluster.worker"}


def run(role: str, run_command: CommandRunner, plot: BackgroundPlot | None = None,
        secrets_dir: str | None = None) -> int:
    """The process of ``role`` from here on (also a child forked by `hogwild run`, whose libraries
    are loaded already), running its command line with ``run_command``. ``plot``: the
    coordinator's plot helper, if one was started for it; else the coordinator starts its
    own. ``secrets_dir``: removed if the launcher dies (see the module's docstring)."""
    # A worker gives its coordinator (orphaned too) the time to stop it as at the end of a
    # run, as the launcher's own teardown does; it stops itself only if nobody did.
    stop_when_orphaned(os.getppid(), remove=secrets_dir,
                       delay=ORPHANED_WORKER_WAIT if role == "worker" else 0.0)
    if role == "coordinator" and plot is None:
        # Started first, as `hogwild coordinator` itself does: matplotlib imports meanwhile.
        from hogwild.outputs.plotter import BackgroundPlot

        plot = BackgroundPlot()
    try:
        import_long_lived(run_command.__module__, ROLE_MODULES.get(role, f"hogwild.{role}"))
        if role == "worker":
            load_worker_kernels()
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        command = json.loads(line)
        code = run_command([str(arg) for arg in command], plot)
        plot = None  # the command closed it
        return code
    finally:
        if plot is not None:
            plot.close()


# How often a child looks whether its launcher is still there.
ORPHAN_CHECK_SECONDS = 0.5
# How long an orphaned worker waits for its coordinator to stop it (the launcher's grace).
ORPHANED_WORKER_WAIT = 10.0


def stop_when_orphaned(launcher: int, every: float = ORPHAN_CHECK_SECONDS,
                       remove: str | None = None, delay: float = 0.0) -> threading.Thread:
    """SIGTERM to this process once ``launcher`` (its parent) is gone, e.g. killed -9 or by
    the OOM killer: the run then stops as on SIGTERM (the coordinator collects the final
    states and writes its outputs; a worker sends its final delta) instead of going on
    with nobody to show its output or stop it. A watch on a daemon thread (a parent's death
    signal would need the launcher's fork and exec paths to set it up each, and Linux).
    ``remove``: a directory to delete first, the launcher's throw-away credentials, which
    would otherwise stay behind (every sibling removes it: whichever comes first wins).
    ``delay``: seconds to wait after noticing before the SIGTERM (the process may be ended
    otherwise meanwhile)."""

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(every)
        if remove:
            shutil.rmtree(remove, ignore_errors=True)
        time.sleep(delay)
        with contextlib.suppress(OSError, ValueError):  # its output went with the launcher
            print("hogwild run: the launcher is gone: stopping as on SIGTERM"
                  + (" (its throw-away credentials removed)" if remove else ""),
                  file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="launcher-watch", daemon=True)
    thread.start()
    return thread


def load_worker_kernels() -> None:
    """Load the kernels a worker calls first (training, deltas) from numba's cache, as
    long-lived objects; errors are left for the real calls to report."""
    with contextlib.suppress(Exception), long_lived():
        # deferred: numba loads here, inside long_lived(); this module starts a light process
        from hogwild.cluster.wire.codec import warmup as codec_warmup
        from hogwild.model.warmup import warmup

        warmup()
        codec_warmup()

