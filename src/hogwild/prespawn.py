"""A process of `hogwild run` started before its command line is known.

The launcher starts every process of a run at once, before it has written the run's
throw-away certificates (the coordinator) or learnt the coordinator's port (the workers).
Meanwhile each imports its libraries: ``python -m hogwild.prespawn coordinator`` starts the
loss plot's helper and imports the coordinator's (numpy, numba, grpc); ``... worker`` (the
default) imports the worker's and loads its compiled kernels too. Then it reads its `hogwild`
arguments (one JSON list) from stdin and runs them like ``python -m hogwild.cli ARGS`` would.
Arguments never appear on a command line; an empty stdin (the launcher gave up) ends the
process with 0.
"""

from __future__ import annotations

import contextlib
import json
import sys

ROLES = ("coordinator", "worker")


def main(argv: list[str] | None = None) -> int:
    """Import (and, for a worker, load) now, then run the command line that arrives on stdin."""
    args = sys.argv[1:] if argv is None else argv
    role = args[0] if args else "worker"
    if role not in ROLES:
        print(f"hogwild.prespawn: role must be one of {', '.join(ROLES)}, not {role!r}",
              file=sys.stderr)
        return 2
    from hogwild.startup import import_long_lived, long_lived, single_blas_thread

    single_blas_thread()  # before anything imports numpy
    plot = None
    if role == "coordinator":
        # Started first, as `hogwild coordinator` itself does: matplotlib imports meanwhile.
        from hogwild.plotter import BackgroundPlot

        plot = BackgroundPlot()
    try:
        import_long_lived("hogwild.cli", f"hogwild.{role}")
        if role == "worker":
            with contextlib.suppress(Exception), long_lived():  # the real calls report errors
                from hogwild.model.trainer import warmup
                from hogwild.protocol.codec import warmup as codec_warmup

                warmup()
                codec_warmup()
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        command = json.loads(line)
        from hogwild.cli import main_process

        code = main_process([str(arg) for arg in command], plot=plot)
        plot = None  # the command closed it
        return code
    finally:
        if plot is not None:
            plot.close()


if __name__ == "__main__":
    sys.exit(main())
