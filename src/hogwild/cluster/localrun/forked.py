"""Children of `hogwild run` forked from a launcher that has loaded their libraries once.

Each process of a run would otherwise import numpy, numba and grpc and load the compiled
kernels on its own: about 1 CPU second per process, three or more processes on a 2-core
machine. When the launcher is a whole `hogwild run` process with no other thread, it does
that once (:func:`preload`) and forks the coordinator and the workers, which share those
pages copy-on-write and go straight to their work (:class:`ForkedProcess`). Each child then
runs exactly what ``python -m hogwild.prespawned ROLE`` runs (its command line from
stdin, run by the function the launcher was given: hogwild.cli.main_process).

Forking is safe here because nothing has used gRPC yet: importing grpcio creates no thread
and no channel, and gRPC's own rule is that a process may fork as long as it has created no
channel, server or call. The launcher checks that it is the only thread before it forks; a
caller inside a larger program (an estimator, a test) gets the exec'd children instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, NoReturn

from hogwild.base.startup import end_process, import_long_lived, long_lived
from hogwild.cluster.localrun.prespawn import ROLE_MODULES, load_worker_kernels, run

if TYPE_CHECKING:
    from hogwild.cluster.localrun.prespawn import CommandRunner
    from hogwild.outputs.plotter import BackgroundPlot


def can_fork() -> bool:
    """Whether this process may fork children that go on running Python: it is the only
    thread (a fork copies no other thread, whatever locks they held stay locked)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def preload() -> None:
    """Import both roles' libraries and load the kernels their children call first (the
    command line that runs in them is loaded already: it started this launcher)."""
    import_long_lived(*ROLE_MODULES.values())
    load_worker_kernels()
    with contextlib.suppress(Exception), long_lived():  # the coordinator's: scoring, parsing
        import numpy as np

        # deferred: numba loads here, inside long_lived(); the launcher imports this module
        from hogwild.data.formats.svmlight import parse_svmlight_buffer
        from hogwild.model.scoring import warmup as warmup_scoring

        warmup_scoring()
        parse_svmlight_buffer(np.frombuffer(b"1 1:0.5 3:1.5e-1\n-1 2:2\n", dtype=np.uint8))


class ForkedProcess:
    """A forked child running a hogwild.cluster.localrun.prespawn role, with the calls of ``subprocess.Popen``
    that the launcher uses (``stdin`` takes its command line, ``stdout`` is its merged
    output)."""

    def __init__(self, role: str, env: Mapping[str, str], run_command: CommandRunner,
                 foreign_fds: Sequence[int] = (), plot: BackgroundPlot | None = None,
                 secrets_dir: str | None = None) -> None:
        """Fork now. ``env``: the child's environment. ``run_command``: runs the child's
        command line (hogwild.cli.main_process). ``foreign_fds``: this process's ends
        of earlier children's pipes, which the new child closes (else a child's stdin would
        not reach its end). ``plot``: a plot helper the child takes over (the coordinator).
        ``secrets_dir``: as for hogwild.cluster.localrun.prespawn."""
        out_r, out_w = os.pipe()
        in_r, in_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()  # else the child would write this process's buffered text again
        pid = os.fork()
        if pid == 0:
            _child(role, env, run_command, in_r, out_w, [*foreign_fds, out_r, in_w], plot,
                   secrets_dir)
        os.close(out_w)
        os.close(in_r)
        self.pid = pid
        self.returncode: int | None = None
        self.stdout: IO[str] = os.fdopen(out_r, "r", buffering=1, errors="replace")
        self.stdin: IO[str] | None = os.fdopen(in_w, "w", buffering=1)

    @property
    def parent_fds(self) -> list[int]:
        """This process's ends of the child's pipes."""
        fds = [self.stdout.fileno()]
        if self.stdin is not None and not self.stdin.closed:
            fds.append(self.stdin.fileno())
        return fds

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, its status lost
                self.returncode = 1
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _child(role: str, env: Mapping[str, str], run_command: CommandRunner, stdin_fd: int,
           out_fd: int, foreign_fds: Sequence[int], plot: BackgroundPlot | None,
           secrets_dir: str | None) -> NoReturn:
    """The child's whole life: become a process of its own, run the role, and leave with
    ``os._exit`` (returning would run the launcher's code in the child)."""
    code = 1
    try:
        os.setsid()  # like start_new_session: the terminal's Ctrl-C goes to the launcher
        for fd in foreign_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(stdin_fd)
        os.close(out_fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True, write_through=True)
        logging.getLogger().handlers.clear()  # the command sets up its own, as a new process
        os.environ.clear()
        os.environ.update(env)  # as an exec'd child's; its own children inherit it
        code = run(role, run_command, plot=plot, secrets_dir=secrets_dir)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - the child must never return into the launcher
        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        end_process(code)
