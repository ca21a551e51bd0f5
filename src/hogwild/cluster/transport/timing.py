"""Where a process's time goes: named wall-clock accumulators, cheap enough for every round."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timers:
    """Thread-safe totals of (seconds, count) per name; read once at the end of a run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, list[float]] = {}

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        with self._lock:
            total = self._totals.setdefault(name, [0.0, 0.0])
            total[0] += seconds
            total[1] += count

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def snapshot(self) -> dict[str, tuple[float, int]]:
        """name -> (seconds, count), sorted by name."""
        with self._lock:
            return {name: (t[0], int(t[1])) for name, t in sorted(self._totals.items())}
