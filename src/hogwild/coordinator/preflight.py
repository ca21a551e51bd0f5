"""Checks the coordinator makes before it binds a port: failures here cost nobody a run."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from hogwild.errors import ConfigError

PROBE_PREFIX = ".hogwild-write-probe-"


def check_out_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` if needed and prove it writable by writing and removing a probe file.

    The outputs are only written at the end of a run; without this check a read-only or
    mistyped out_dir would be found after every worker has trained. ConfigError (naming the
    key, the path and the OS reason) otherwise.
    """
    path = Path(out_dir)
    probe: str | None = None
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=PROBE_PREFIX, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"hogwild\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.unlink(probe)
        probe = None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError("out_dir", f"cannot create or write {str(path)!r}: {reason}") from None
    finally:
        if probe is not None:
            with contextlib.suppress(OSError):
                os.unlink(probe)
    return path
