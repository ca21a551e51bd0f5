"""Process start-up and exit of the `hogwild` command: the cyclic garbage collector around the runtime's long-lived objects.

Importing numpy, numba and grpc and loading numba's compiled kernels makes several hundred
thousand objects that live as long as the process. Python's cyclic collector traverses them
again each time it runs a full collection while they are made, and once more when the
interpreter ends: measured 0.3 s of CPU at exit alone in every process that loaded a kernel
(the job's, the coordinator's, each worker's), on a 2-core machine where the processes of
`hogwild run` compete for the cores. So the command's imports run with the collector paused,
what they made is frozen (``gc.freeze``: kept out of every later collection), and a process
that is about to end freezes the rest instead of traversing it.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager


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
    """Import ``modules`` (and what they import) as long-lived objects."""
    with long_lived():
        for name in modules:
            importlib.import_module(name)


def before_exit() -> None:
    """The process ends next: freeze every object, so that the interpreter's final
    collections skip them. atexit handlers still run and objects without reference cycles
    are still released; cyclic garbage is left to the operating system (the command closes
    its files and servers itself)."""
    gc.freeze()
