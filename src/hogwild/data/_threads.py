"""Run compiled nogil kernels on several Python threads (one job per thread)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any


def default_threads() -> int:
    """Parser threads: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def run_parallel(fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
                 name: str = "kernel") -> list[Any]:
    """Run ``fn(*job)`` for every job, one thread each (the kernels release the GIL); a
    single job runs on the calling thread. The first error raised is raised here, once every
    thread has ended. Threads are named ``name-i`` (as profilers show them)."""
    if len(jobs) == 1:
        return [fn(*jobs[0])]
    results: list[Any] = [None] * len(jobs)
    errors: list[Exception] = []

    def run(i: int) -> None:
        try:
            results[i] = fn(*jobs[i])
        except Exception as exc:  # noqa: BLE001 - re-raised in the calling thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"{name}-{i}", daemon=True)
               for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
