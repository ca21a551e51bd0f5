"""``python -m hogwild.protocol.build [OUT_DIR]``: (re)generate the gRPC stubs from protos/."""

from __future__ import annotations

import sys
from pathlib import Path

from hogwild.protocol._stubs import DEFAULT_OUT, BuildError, generate


def main(argv: list[str] | None = None) -> int:
    """Regenerate the stubs into OUT_DIR (default: hogwild/protocol/generated); exit code."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]).resolve() if args else DEFAULT_OUT
    try:
        generate(out, force=True)
    except BuildError as exc:
        print(f"hogwild.protocol.build: error: {exc}", file=sys.stderr)
        return 1
    print(f"generated gRPC stubs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
