"""Per worker incarnation: which (seq, part) the global model took, and the parts it holds whole."""

from __future__ import annotations

from hogwild.cluster.wire.sequence import SequenceTracker
from hogwild.cluster.wire.wholeparts import WholeParts


class Sequences:
    """The deltas the global model took of each worker's current incarnation, so each
    (worker, seq, part) is applied once. Under the run state's lock: the roster starts a
    worker's count again (and forgets a dropped one's unfinished messages), the model admits
    deltas against it."""

    def __init__(self) -> None:
        self.seen: dict[int, SequenceTracker] = {}  # per worker: (seq, part) dedup
        # Topology tree: multi-part messages summed whole or not at all (protocol/wholeparts).
        self.whole_parts = WholeParts()

    def restart(self, worker_id: int) -> None:
        """(Lock held.) ``worker_id`` numbers its deltas from 1 again (a new incarnation)."""
        self.seen[worker_id] = SequenceTracker()
        self.whole_parts.forget(worker_id)
