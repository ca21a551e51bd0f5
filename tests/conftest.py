"""Fixtures shared by every test folder."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads started from now on in this test, in order."""
    started: list[str] = []
    start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    return started


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs: room for a Reuters run's outputs, and quick to fill (root only;
    skipped, saying why, elsewhere)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
