"""A worker that sends wrong deltas: `hogwild worker` with its deltas' values altered.

Test-only (no setting of hogwild's does this): run as

    python tests/cluster/bad_member.py --bad=KIND@ROUND[:SECONDS] worker --flag=value ...

From round ROUND on (and for SECONDS after the first altered delta, if given) every delta this
worker encodes has its values replaced: KIND is ``1e30`` (every value 1e30), ``nan``,
``xN`` (scaled by N) or ``flip`` (sign flipped). The rest of the command line is hogwild's.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np


def altered(kind: str) -> Any:
    """values -> the values a bad member sends instead."""
    if kind == "nan":
        return lambda v: np.full_like(v, np.nan)
    if kind == "flip":
        return lambda v: -v
    if kind.startswith("x"):
        factor = float(kind[1:])
        return lambda v: v * factor
    value = float(kind)
    return lambda v: np.full_like(v, value)


def install(spec: str) -> None:
    """Patch the worker's delta encoder as ``spec`` (KIND@ROUND[:SECONDS]) says."""
    from hogwild.cluster.worker import roundloop as rounds

    kind, _, when = spec.partition("@")
    first, _, seconds = when.partition(":")
    from_round, lasting = int(first), float(seconds) if seconds else None
    change = altered(kind)
    encode = rounds.encode_delta_parts
    began: list[float] = []

    def bad_encode(header: Any, indices: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
        if header.round >= from_round and np.asarray(values).size:
            if not began:
                began.append(time.monotonic())
                print(f"bad member: altering deltas ({kind}) from round {header.round}",
                      flush=True)
            if lasting is None or time.monotonic() - began[0] < lasting:
                values = change(np.asarray(values, dtype=np.float32)).astype(np.float32)
        return encode(header, indices, values, *args, **kwargs)

    rounds.encode_delta_parts = bad_encode  # type: ignore[assignment]


def main() -> int:
    args = sys.argv[1:]
    spec = next(a for a in args if a.startswith("--bad="))
    args.remove(spec)
    install(spec.removeprefix("--bad="))
    from hogwild.cli import main_process

    return main_process(args)


if __name__ == "__main__":
    sys.exit(main())
