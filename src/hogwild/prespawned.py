"""Entry point of a pre-started process of `hogwild run`: ``python -m hogwild.prespawned ROLE``."""

from __future__ import annotations

import sys

from hogwild.base.startup import long_lived, single_blas_thread
from hogwild.cluster.localrun.prespawn import ROLES, run


def main(argv: list[str] | None = None) -> int:
    """Import (and, for a worker, load) now, then run the command line that arrives on stdin
    (see hogwild.cluster.localrun.prespawn). ``argv``: ROLE [SECRETS_DIR], default sys.argv[1:]."""
    args = sys.argv[1:] if argv is None else argv
    role = args[0] if args else "worker"
    problem = (f"role must be one of {', '.join(ROLES)}, not {role!r}" if role not in ROLES
               else "too many arguments" if len(args) > 2 else "")
    if problem:
        print(f"hogwild.prespawned: {problem} (usage: python -m "
              "hogwild.prespawned ROLE [SECRETS_DIR])", file=sys.stderr)
        return 2
    single_blas_thread()  # before anything imports numpy
    with long_lived():  # kept for the whole process, as the role's own libraries are
        # deferred: the command line's modules load inside long_lived(), which freezes them
        from hogwild.cli import main_process

    return run(role, main_process, secrets_dir=args[1] if len(args) == 2 else None)


if __name__ == "__main__":
    sys.exit(main())
