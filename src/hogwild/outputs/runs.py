"""The run history of a runs root: list the run directories, and prune it to the newest N.

Only what looks like a run this package wrote is ever removed: a directory (not a link) whose
name is a run name (``TIME-ID``, :func:`hogwild.outputs.artifacts.run_name`) and that holds
a run's files (metrics.json or model.json). Incomplete runs (``NAME.incomplete``: under way,
failed, or waiting to be resumed) and the run ``latest`` names are never removed; a run
renamed by its user is no longer a run name, and is kept.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hogwild.outputs.artifacts import INCOMPLETE, METRICS_FILE, MODEL_META_FILE, published

log = logging.getLogger("hogwild.outputs")

RUN_NAME = re.compile(r"\d{8}-\d{6}-[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class RunEntry:
    """One run directory of a runs root."""

    path: Path
    complete: bool
    latest: bool
    size: int  # bytes of its files

    @property
    def name(self) -> str:
        return self.path.name


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _latest_target(root: Path) -> Path | None:
    link = published(root)
    if not link.is_symlink():
        return None
    try:
        return link.resolve(strict=True)
    except OSError:
        return None


def list_runs(root: str | Path, sizes: bool = True) -> list[RunEntry]:
    """The run directories of ``root``, oldest first (run names begin with their start)."""
    root = Path(root)
    latest = _latest_target(root)
    entries = []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    for path in children:
        name = path.name.removesuffix(INCOMPLETE)
        if path.is_symlink() or not path.is_dir() or not RUN_NAME.fullmatch(name):
            continue
        complete = not path.name.endswith(INCOMPLETE)
        if complete and not any((path / f).is_file() for f in (METRICS_FILE, MODEL_META_FILE)):
            continue  # named as a run, but not one this package wrote
        entries.append(RunEntry(path, complete, latest is not None and path.resolve() == latest,
                                _size(path) if sizes else 0))
    return entries


def prune(root: str | Path, keep: int, protect: Iterable[Path] = ()) -> list[Path]:
    """Remove the oldest complete runs of ``root`` beyond the newest ``keep`` (0: none
    removed), never the one ``latest`` names nor those in ``protect``; the paths removed.
    A directory that cannot be removed is logged and left."""
    if keep <= 0:
        return []
    kept = {Path(p).resolve() for p in protect}
    runs = [r for r in list_runs(root, sizes=False) if r.complete]
    removed = []
    for run in runs[:max(0, len(runs) - keep)]:
        if run.latest or run.path.resolve() in kept:
            continue
        try:
            shutil.rmtree(run.path)
        except OSError as exc:
            log.warning("cannot remove the old run %s: %s", run.path, exc.strerror or exc)
            continue
        removed.append(run.path)
    return removed
