"""Checks the coordinator makes before it binds a port: failures here cost nobody a run."""

from __future__ import annotations

# The check lives with the other output-file code, so that `hogwild train` (which must not
# import the gRPC side) makes the same one.
from hogwild.outputs.artifacts import PROBE_PREFIX, check_out_dir, out_dir_held

__all__ = ["PROBE_PREFIX", "check_out_dir", "out_dir_held"]
