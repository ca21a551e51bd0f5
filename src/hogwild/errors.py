"""The error hierarchy of hogwild: expected failures, each naming what went wrong.

    HogwildError                  anything the user can fix; the CLI prints one line, exits non-zero
    ├── ConfigError               a bad setting (names the key)
    ├── DataError                 a data set that cannot be used
    │   └── DataFormatError       malformed input (names file and line)
    ├── ProtocolError             a message that breaks the wire contract
    │   ├── InvalidMessage        bad content (index out of range, NaN, length mismatch) -> INVALID_ARGUMENT
    │   │   └── RefusedValues     a delta no honest sender makes (its sender is quarantined)
    │   ├── StaleOrUnknown        unknown run / worker / version mismatch -> FAILED_PRECONDITION
    │   ├── NotAllowed            a caller without the key of the sender it claims -> PERMISSION_DENIED
    │   │   └── Quarantined       a member whose deltas were refused, for the rest of the run
    │   └── Conflict              a claim on something another holds (an address) -> ALREADY_EXISTS
    ├── Busy                      too many long calls at once -> RESOURCE_EXHAUSTED
    ├── ClusterError              the cluster cannot go on (workers missing, coordinator unreachable)
    ├── ModelError                a saved model that cannot be read or used
    │   └── ModelFormatError      a model file of another format version (says which)
    └── TrainingDiverged          the weights or the loss became inf/NaN (the step size is too big)

Anything else that escapes is a bug and is reported with its traceback.
"""

from __future__ import annotations


class HogwildError(Exception):
    """Base class of every expected hogwild failure."""


class ConfigError(HogwildError):
    """A setting is unknown or has a bad value; ``key`` names it, ``reason`` says why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"setting {key!r}: {message}")
        self.key = key
        self.reason = message


class UsageError(HogwildError):
    """A command-line flag outside the settings schema has a bad value (exit 2, as
    ConfigError)."""


class DataError(HogwildError):
    """A data set cannot be loaded or used."""


class DataFormatError(DataError):
    """Malformed input; the message names the file and the 1-based line number."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


class ProtocolError(HogwildError):
    """A message breaks the wire contract."""


class InvalidMessage(ProtocolError):
    """The content of a message is invalid (maps to INVALID_ARGUMENT)."""


class RefusedValues(InvalidMessage):
    """A delta whose values no honest sender makes: an index out of range, a value not finite
    or beyond the run's bound, a size far beyond what the other senders' deltas have. Its
    sender is quarantined (maps to INVALID_ARGUMENT)."""


class StaleOrUnknown(ProtocolError):
    """A message refers to an unknown run or worker or speaks another protocol version
    (maps to FAILED_PRECONDITION)."""


class NotReady(ProtocolError):
    """The node cannot take the call yet: a process (re)starting that has no run config; the
    caller should retry, not conclude it was dropped (maps to UNAVAILABLE)."""


class NotAllowed(ProtocolError):
    """The caller may reach the server but not act as the sender it names (maps to
    PERMISSION_DENIED)."""


# How the refusal of a quarantined member's registration begins: the worker reads it to tell
# "quarantined" (exit EXIT_QUARANTINED) from any other refusal (exit 1).
QUARANTINED_PREFIX = "quarantined: "


class Quarantined(NotAllowed):
    """A member whose deltas were refused: its deltas, reports and registrations are refused
    for the rest of the run (maps to PERMISSION_DENIED)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{QUARANTINED_PREFIX}{message}")


class Busy(HogwildError):
    """A server refuses a call because too many like it are running (maps to
    RESOURCE_EXHAUSTED)."""


class Conflict(ProtocolError):
    """A request claims what another party holds, e.g. a worker address already registered
    by a process that still answers there (maps to ALREADY_EXISTS)."""


class ClusterError(HogwildError):
    """The cluster cannot continue: peers missing, coordinator unreachable, run aborted."""


class OutputError(HogwildError):
    """The run's outputs (model, metrics, history) could not be written."""

    @classmethod
    def writing(cls, out_dir: object, exc: OSError) -> OutputError:
        """The error for ``exc``, raised while writing into ``out_dir`` (a full disk, a
        directory made read-only under way)."""
        where = f": {exc.filename}" if exc.filename else ""
        return cls(f"cannot write the outputs to {out_dir} ({exc.strerror or exc}{where})")


class ModelError(HogwildError):
    """A saved model cannot be read or used (missing file, bad contents, wrong use)."""


class ModelFormatError(ModelError):
    """A model file written in a format version this hogwild does not read."""


class TrainingDiverged(HogwildError):
    """The model's weights or loss stopped being finite numbers; no model is saved."""

    def __init__(self, where: str, learning_rate: float) -> None:
        super().__init__(f"training diverged ({where}): the weights or the loss are no longer "
                         f"finite numbers, so no model was saved; try a smaller learning_rate "
                         f"(now {learning_rate:g})")


# Exit code of a process that left a run still under way because it was sent SIGTERM: a
# worker after its final delta, a coordinator with `on_sigterm: checkpoint` after its
# checkpoint. 128 + SIGTERM, as a shell reports a process the signal ended. Not 0, so that
# a supervisor that restarts failed processes (a Kubernetes Job: an evicted pod) starts it
# again, and it rejoins or resumes; a run's own end, or the coordinator's Stop, gives 0.
EXIT_LEFT = 143

# Exit code of a run that ended and wrote its outputs without some of its members: the
# coordinator quarantined one or more senders whose deltas it refused (metrics.json's
# refused_deltas and quarantined_workers say which). The run did not finish as asked, so not
# 0; not 1 either, which says no outputs were written. A quarantined worker exits with it
# too, and `hogwild run` goes on without it (as without a worker that left on SIGTERM).
EXIT_QUARANTINED = 3

# Exit code of a run the coordinator ended because training stalled (no delta through three
# stall warnings: metrics.json's stop_reason "stalled"): the model so far is written, but
# the run did not train what was asked, so not 0; nor 1, which says no outputs were written.
EXIT_STALLED = 4
