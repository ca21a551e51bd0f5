"""SIGTERM handling that cannot deadlock: the handler only flips a flag; a thread acts on it.

A Python signal handler runs on the main thread between two bytecodes, possibly while that
thread holds a lock the handler would take (a health servicer's, a condition's, an Event's),
and then waits forever for itself. So the handler does nothing but assign a boolean, and a
watcher thread, polling it every POLL seconds, runs the real reaction once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

POLL = 0.05


class SignalWatch:
    """Run ``on_signal`` (once, on a watcher thread) after ``signum`` arrives."""

    def __init__(self, signum: int, on_signal: Callable[[], None]) -> None:
        self.signum = signum
        self.on_signal = on_signal
        self.received = False
        self._previous: Any = None
        self._installed = False
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="signal-watch", daemon=True)

    def install(self) -> SignalWatch:
        """Install the handler (main thread only; elsewhere this does nothing)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._handler)
            self._installed = True
            self._thread.start()
        return self

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received = True  # nothing else: see the module docstring

    def _watch(self) -> None:
        while not self._closed.wait(POLL):
            if self.received:
                self.on_signal()
                return

    def restore(self) -> None:
        """Put the previous handler back and stop watching."""
        self._closed.set()
        if self._installed:
            signal.signal(self.signum, self._previous)
            self._installed = False
