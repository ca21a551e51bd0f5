"""Wire code: stubs generated from protos/ (checked fresh at import), the delta codec, arrays and streams.

Importing this package makes sure ``hogwild.cluster.wire.generated`` matches
``protos/hogwild/v1/hogwild.proto``: if the stubs are missing or stale and the directory is
writable they are regenerated; otherwise the import fails saying how to build them.
"""

from __future__ import annotations

from hogwild.cluster.wire import _stubs as _build

# 3: LocalRange.digest is xxh3-128 (it was blake2b-128): nodes of another version refuse each
# other's messages with FAILED_PRECONDITION instead of reading the same file as "another".
# 4: LocalSource.sampled (a plan from a sample, whose ranges a worker of version 3 would
# check against the wrong digests).
# 5: LocalSource.format (Parquet row groups, which a worker of version 4 would read as text).
PROTOCOL_VERSION = 5


def ensure_generated() -> None:
    """Regenerate the stubs if they are missing or older than the .proto; raise ImportError
    with the command to run if that is impossible."""
    if _build.is_fresh():
        return
    try:
        _build.generate()
    except _build.BuildError as exc:
        raise ImportError(
            f"the gRPC stubs in {_build.DEFAULT_OUT} are missing or out of date and cannot be "
            f"generated here ({exc}); run `python -m hogwild.cluster.wire.build` in a writable "
            "checkout, or reinstall the package with `pip install .`") from None


ensure_generated()

from hogwild.cluster.wire.generated import hogwild_pb2 as pb
from hogwild.cluster.wire.generated import hogwild_pb2_grpc as pb_grpc

__all__ = ["PROTOCOL_VERSION", "ensure_generated", "pb", "pb_grpc"]
