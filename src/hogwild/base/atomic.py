"""Files written whole or not at all (temp file, fsync, rename), and JSON that strict readers accept."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` only when the block ends without an error
    (temp file in the same directory, fsync, rename); on an error nothing is left behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes 0600 files; give the result the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file + rename: readers never see half a file."""
    with atomic_open(path) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def dumps(value: Any, indent: int | None = None) -> str:
    """JSON text that also accepts numpy scalars/arrays and paths. A number that is not
    finite (a loss that overflowed, a metric not measured) is written as null: JSON has no
    Infinity or NaN, and strict readers (jq, JavaScript, most languages' parsers) refuse
    the whole file over one."""
    try:
        return json.dumps(value, default=_json_default, sort_keys=True, indent=indent,
                          allow_nan=False)
    except ValueError:  # rare: only then is the value walked
        return json.dumps(_finite(value), default=_json_default, sort_keys=True,
                          indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite number replaced by None (numpy values as Python's)."""
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.tolist()  # a numpy scalar's tolist() is its Python value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
