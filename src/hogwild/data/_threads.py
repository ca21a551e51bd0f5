"""Run compiled nogil kernels on several Python threads (one job per thread)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from hogwild.base.hosts import machine_cores

# How a loader runs a block's pieces side by side: run_parallel, or KernelThreads.run.
Runner = Callable[[Callable[..., Any], Sequence[tuple[Any, ...]]], list[Any]]


def default_threads() -> int:
    """Kernel threads of a load or a scoring pass: one per core this process may run on (a
    container's cpuset narrows them: the machine's count would oversubscribe it), at most
    8."""
    return max(1, min(8, machine_cores()))


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


_Task = tuple[Callable[..., Any], tuple[Any, ...], list[Any], int, "queue.SimpleQueue[BaseException | None]"]


class KernelThreads:
    """Threads kept for a series of parallel kernel calls (a file's blocks): starting a
    thread costs about half a millisecond here, twice per block with run_parallel, which was
    a fifth of a 200k-row text load (bench/NOTES.md). ``run`` has the same contract as
    run_parallel; the calling thread runs the first job itself. Use as a context manager:
    the threads end on exit."""

    def __init__(self, threads: int, name: str = "kernel") -> None:
        self._inboxes: list[queue.SimpleQueue[_Task | None]] = []
        self._threads: list[threading.Thread] = []
        for i in range(1, max(1, threads)):
            inbox: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
            t = threading.Thread(target=self._serve, args=(inbox,), name=f"{name}-{i}",
                                 daemon=True)
            t.start()
            self._inboxes.append(inbox)
            self._threads.append(t)

    @staticmethod
    def _serve(inbox: queue.SimpleQueue[_Task | None]) -> None:
        while (task := inbox.get()) is not None:
            fn, job, results, i, done = task
            try:
                results[i] = fn(*job)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                done.put(exc)
            else:
                done.put(None)

    def run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``fn(*job)`` for every job, the first on the calling thread and one on each kept
        thread (more jobs than threads run in turns); the first error raised is raised here,
        once every job has ended."""
        results: list[Any] = [None] * len(jobs)
        error: BaseException | None = None
        for lo in range(0, len(jobs), len(self._inboxes) + 1):
            done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
            batch = range(lo + 1, min(len(jobs), lo + len(self._inboxes) + 1))
            for inbox, i in zip(self._inboxes, batch):
                inbox.put((fn, jobs[i], results, i, done))
            try:
                results[lo] = fn(*jobs[lo])
            except Exception as exc:  # noqa: BLE001 - raised once the others have ended
                error = error or exc
            for _ in batch:
                got = done.get()
                error = error or got
        if error is not None:
            raise error
        return results

    def close(self) -> None:
        """End the kept threads (after the jobs they hold)."""
        for inbox in self._inboxes:
            inbox.put(None)
        for t in self._threads:
            t.join()
        self._inboxes, self._threads = [], []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
