"""``python -m hogwild.cluster.wire.build [--force] [OUT_DIR]``: generate the gRPC stubs from protos/
when they are missing or older than the .proto (``--force``: in any case)."""

from __future__ import annotations

import sys
from pathlib import Path

from hogwild.cluster.wire._stubs import DEFAULT_OUT, BuildError, generate, is_fresh


def main(argv: list[str] | None = None) -> int:
    """Generate the stubs into OUT_DIR (default: hogwild/cluster/wire/generated) unless they are
    up to date; exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    force = "--force" in args
    args = [a for a in args if a != "--force"]
    out = Path(args[0]).resolve() if args else DEFAULT_OUT
    if not force and is_fresh(out):
        print(f"gRPC stubs in {out} are up to date")
        return 0
    try:
        generate(out, force=True)
    except BuildError as exc:
        print(f"hogwild.cluster.wire.build: error: {exc}", file=sys.stderr)
        return 1
    print(f"generated gRPC stubs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
