"""Process start-up and exit of the `hogwild` command: BLAS threads, and the garbage collector around the runtime's long-lived objects.

Importing numpy, numba and grpc and loading numba's compiled kernels makes several hundred
thousand objects that live as long as the process. Python's cyclic collector traverses them
again each time it runs a full collection while they are made, and once more when the
interpreter ends: measured 0.3 s of CPU at exit alone in every process that loaded a kernel
(the job's, the coordinator's, each worker's), on a 2-core machine where the processes of
`hogwild run` compete for the cores. So the command's imports run with the collector paused,
what they made is frozen (``gc.freeze``: kept out of every later collection), and a process
that is about to end freezes the rest instead of traversing it.

numpy's OpenBLAS starts a thread per core when numpy is imported, and they spin for a while:
0.12 CPU s per process (measured: 0.26 against 0.14 CPU s to import numpy on 2 cores, same
wall time). No command multiplies dense matrices (the kernels are numba's and the threads
hogwild's own), so a command's process asks for one BLAS thread before it imports numpy,
unless the user set ``OPENBLAS_NUM_THREADS``; its children inherit the setting.

gRPC's core logs each failed TLS handshake at its info level, to standard error and without
the peer's address: a client with the wrong credentials that retries wrote one such line per
attempt. A command's process keeps gRPC's core to its errors (``GRPC_VERBOSITY``, read when
grpc loads) unless the user set the variable; the failure is told instead by the client, which
names the setting (hogwild.cluster.transport.mismatch), and by the server's token gate, once per peer.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn, TextIO, cast

BLAS_THREADS_VARIABLE = "OPENBLAS_NUM_THREADS"
GRPC_VERBOSITY_VARIABLE = "GRPC_VERBOSITY"


def single_blas_thread() -> None:
    """One BLAS thread for this process and its children, unless the user chose a number.
    Call before numpy is imported: OpenBLAS reads the variable when it loads."""
    os.environ.setdefault(BLAS_THREADS_VARIABLE, "1")


def quiet_grpc_core() -> None:
    """gRPC's core logs its errors only, in this process and its children, unless the user
    chose a level. Call before grpc is imported."""
    os.environ.setdefault(GRPC_VERBOSITY_VARIABLE, "ERROR")


@contextmanager
def long_lived() -> Iterator[None]:
    """Objects made inside live as long as the process: no collection while they are made,
    frozen after. The collector is left as it was found (enabled or not)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def import_long_lived(*modules: str) -> None:
    """Import ``modules`` (and what they import) as long-lived objects; numba, if they
    load it, without its cffi support (see numba_without_cffi)."""
    with long_lived():
        for name in modules:
            importlib.import_module(name)
        if "numba" in sys.modules:
            numba_without_cffi()


_CFFI_TYPING = "numba.core.typing.cffi_utils"


def numba_without_cffi() -> None:
    """Load numba's cffi typing while ``cffi`` cannot be imported.

    The first call of any compiled kernel (cached or not) imports numba's cffi typing, which
    imports cffi and builds a ``cffi.FFI()``, pulling in pycparser: 0.04-0.06 CPU s in every
    process that calls a kernel (the job's, the coordinator's, each worker's), for a
    feature no kernel here uses (numba then types cffi objects as unknown). Only the
    command's own processes do this, not a program that imports hogwild as a library; the
    block is lifted at once, so a later ``import cffi`` works as usual. Nothing is done when
    either module is already loaded."""
    if _CFFI_TYPING in sys.modules or "cffi" in sys.modules:
        return
    sys.modules["cffi"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        importlib.import_module(_CFFI_TYPING)
    except ImportError:
        pass  # a numba laid out otherwise: it imports cffi by itself later, as it did
    finally:
        if sys.modules.get("cffi", 0) is None:
            del sys.modules["cffi"]


class QuickExit:
    """Ends the process as soon as the interpreter's exit has joined its threads and run the
    atexit handlers registered after this one, skipping the rest of its teardown: freeing
    every module's objects one by one and the libraries' static destructors (LLVM's, gRPC's),
    measured at 15 ms of a `hogwild train` run's 28 ms exit. It is armed with the exit code
    once the command has returned it; a command that raised leaves it unarmed and the
    interpreter ends as usual, traceback and all.

    Only the handlers registered before this one are skipped; of those, the command's process
    has only logging's, which :func:`end_process` runs itself, so no buffered log line or output is
    lost. The command's files are closed by the command (written whole and renamed)."""

    def __init__(self) -> None:
        self._code: int | None = None
        atexit.register(self._end)

    def arm(self, code: int) -> None:
        self._code = code

    def _end(self) -> None:
        if self._code is not None:
            end_process(self._code)


def end_process(code: int) -> NoReturn:
    """End this process now with ``code``, without the interpreter's teardown: logging's
    handlers and the standard streams are flushed first (a failure there is ignored: the
    process ends either way)."""
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(code)


def before_exit() -> None:
    """The process ends next: freeze every object, so that the interpreter's final
    collections skip them. atexit handlers still run and objects without reference cycles
    are still released; cyclic garbage is left to the operating system (the command closes
    its files and servers itself)."""
    gc.freeze()


class _OutlivingStream(io.TextIOBase):
    """A text stream that writes to ``stream`` (buffered as it was) until the reader of its
    descriptor goes away (EPIPE); from then on the descriptor points at /dev/null, every
    write is accepted and dropped, and ``gone`` has been called once."""

    def __init__(self, stream: TextIO, gone: Callable[[], None]) -> None:
        super().__init__()
        self._stream = stream
        self._fd = stream.fileno()
        self._gone = gone
        self.dropping = False

    def write(self, text: str) -> int:
        if not self.dropping:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.dropping:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.dropping = True
        # What the stream still holds, and the interpreter's flush at exit, then go nowhere
        # instead of failing again.
        to_devnull(self._fd)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()
        self._gone()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors

    @property
    def line_buffering(self) -> bool:
        return bool(getattr(self._stream, "line_buffering", False))


def to_devnull(fd: int) -> None:
    """Point descriptor ``fd`` at /dev/null: what is written there from now on is dropped
    (its reader went away), not raised as BrokenPipeError again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def outlive_console(command: str) -> None:
    """Let a training command go on when whoever reads its standard output or error goes
    away (`hogwild train ... | head`, a terminal closed, a launcher killed): what it prints
    there is then dropped, with one line on stderr when stdout went first, and the run still
    ends with its outputs written. Without this the next progress line raised
    BrokenPipeError and the run ended with a traceback and nothing written. Each stream keeps
    its buffering (line by line under a launcher, which sets PYTHONUNBUFFERED)."""

    def guarded(stream: TextIO, gone: Callable[[], None]) -> TextIO:
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):
            return stream  # not a real descriptor (captured, or none): nothing to guard
        return cast(TextIO, _OutlivingStream(stream, gone))

    def stdout_gone() -> None:
        print(f"hogwild {command}: standard output was closed (broken pipe): progress lines "
              "are no longer printed; the run goes on and writes its outputs",
              file=sys.stderr, flush=True)

    sys.stderr = guarded(sys.stderr, lambda: None)
    sys.stdout = guarded(sys.stdout, stdout_gone)
