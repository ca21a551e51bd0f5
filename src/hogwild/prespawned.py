"""Entry point of a pre-started process of `hogwild run`: ``python -m hogwild.prespawned ROLE``."""

from __future__ import annotations

import sys

from hogwild.runtime.prespawn import ROLES


def main(argv: list[str] | None = None) -> int:
    """Import (and, for a worker, load) now, then run the command line that arrives on stdin
    (see hogwild.runtime.prespawn). ``argv``: ROLE [SECRETS_DIR], default sys.argv[1:]."""
    args = sys.argv[1:] if argv is None else argv
    role = args[0] if args else "worker"
    problem = (f"role must be one of {', '.join(ROLES)}, not {role!r}" if role not in ROLES
               else "too many arguments" if len(args) > 2 else "")
    if problem:
        print(f"hogwild.prespawned: {problem} (usage: python -m "
              "hogwild.prespawned ROLE [SECRETS_DIR])", file=sys.stderr)
        return 2
    from hogwild.startup import single_blas_thread

    single_blas_thread()  # before anything imports numpy
    from hogwild.runtime.prespawn import run
    from hogwild.startup import long_lived

    with long_lived():  # kept for the whole process, as the role's own libraries are
        from hogwild.cli import main_process

    return run(role, main_process, secrets_dir=args[1] if len(args) == 2 else None)


if __name__ == "__main__":
    sys.exit(main())
