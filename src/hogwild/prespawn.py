"""A worker process of `hogwild run` started before its command line is known.

The launcher learns the coordinator's port only once the coordinator has imported its
libraries and bound it. Rather than start the workers then, it starts them with the
coordinator: each imports the worker's libraries (numpy, numba, grpc) and loads its compiled
kernels meanwhile, then reads its `hogwild` arguments (one JSON list) from stdin and runs them
like ``python -m hogwild.cli ARGS`` would. Arguments never appear on a command line; an empty
stdin (the launcher gave up before the coordinator announced) ends the process with 0.
"""

from __future__ import annotations

import contextlib
import json
import sys


def main() -> int:
    """Import and load now, then run the command line that arrives on stdin."""
    from hogwild.startup import import_long_lived, long_lived

    import_long_lived("hogwild.cli", "hogwild.worker")
    with contextlib.suppress(Exception), long_lived():  # the real calls report any error
        from hogwild.model.trainer import warmup
        from hogwild.protocol.codec import warmup as codec_warmup

        warmup()
        codec_warmup()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    argv = json.loads(line)
    from hogwild.cli import main_process

    return main_process([str(arg) for arg in argv])


if __name__ == "__main__":
    sys.exit(main())
