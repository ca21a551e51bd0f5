"""Members whose deltas were refused for their values: counted per sender, never taken back.

Credentials say who a sender is, not that its deltas are sane. A delta refused for its
values (protocol.codec's RefusedValues: an index out of range, a value not finite or beyond
the run's bound, a size far beyond the other senders') quarantines its sender: dropped as a
dead worker is (the others stop waiting for it), and its later registrations refused, so it
cannot rejoin and send the same again. The run goes on without it and says so: metrics.json
(refused_deltas, quarantined_workers), the done line, and the exit code (EXIT_QUARANTINED).
"""

from __future__ import annotations

from hogwild.errors import Quarantined


class Quarantine:
    """Refused deltas per sender and why each sender was quarantined (the caller locks)."""

    def __init__(self) -> None:
        self.refused: dict[int, int] = {}  # worker id -> deltas refused for their values
        self.why: dict[int, str] = {}      # worker id -> the first refusal's reason

    def refuse(self, worker_id: int, why: str) -> bool:
        """Count a refused delta of ``worker_id``; True if that quarantines it now."""
        self.refused[worker_id] = self.refused.get(worker_id, 0) + 1
        if worker_id in self.why:
            return False
        self.why[worker_id] = why
        return True

    def check(self, worker_id: int) -> None:
        """Quarantined if ``worker_id`` is quarantined (its registration is refused)."""
        why = self.why.get(worker_id)
        if why is not None:
            raise Quarantined(f"worker {worker_id} sent a delta that was refused ({why}); it "
                              "is out of this run for good")

    def summary(self) -> str:
        """"worker 2 (3 refused)", one per quarantined sender; empty if none."""
        return ", ".join(f"worker {wid} ({self.refused.get(wid, 0)} refused)"
                         for wid in sorted(self.why))
