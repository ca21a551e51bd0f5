"""The global model: the sum of every delta the coordinator received, each applied once."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.coordinator.members.roster import Roster
from hogwild.cluster.coordinator.sums.sequences import Sequences
from hogwild.cluster.wire.codec import DecodedDelta, DeltaHeader, check_values
from hogwild.cluster.wire.deltanorms import NormWatch
from hogwild.engine.tree import AppliedCounts
from hogwild.engine.treeshape import ancestors
from hogwild.engine.treeview import EdgeSums
from hogwild.errors import StaleOrUnknown
from hogwild.model import kernels

T = TypeVar("T")


class GlobalModel:
    """The global model and its counters: deltas checked against the roster, deduplicated
    and summed. Every method is thread-safe, under the run state's lock (shared with the
    roster): a delta's sender is checked and its sum recorded in one critical section."""

    def __init__(self, lock: threading.Condition, roster: Roster,
                 sequences: Sequences) -> None:
        self._lock = lock
        self.roster = roster
        self.sequences = sequences
        self.w: npt.NDArray[np.float64] | None = None
        self._empty = np.zeros(0, dtype=np.float64)
        self.deltas_received = 0
        self.duplicates = 0
        self.bytes_received = 0
        self.apply_seconds = 0.0         # time spent adding deltas to the global model
        # Topology star: called (outside the lock) with every delta applied here, whether
        # it completed its (worker, seq) and the model's version once it was in (see
        # model_version); the relay forwards the sums to the other workers.
        self.relay: Callable[[DecodedDelta, bool, int], None] | None = None
        # Topology star: called (outside the lock, before anything is recorded) with a
        # delta's sender and round; raises InvalidMessage for a round the relay never let
        # start, so such a delta leaves the global model untouched. Outside the lock since
        # the relay calls into this state under its own lock; its bound only grows, so a
        # delta that passed is still within it when applied.
        # True: the model holds that delta's content already (a tree node re-sent it after
        # its parent died, which had passed it on): its seq is taken, its sum is not.
        self.relay_check: Callable[[int, int, DeltaHeader], bool] | None = None
        # The largest |value| a legitimate delta of this run carries (codec.value_bound), set
        # once the run's settings and data are known; beyond it a delta is refused
        # (INVALID_ARGUMENT) before anything of it is recorded.
        self.max_delta_value = math.inf
        # Each sender's delta against the recent ones' norms (protocol/deltanorms), where the
        # coordinator receives each worker's own delta (mesh, star); None: not judged.
        self.norms: NormWatch | None = None
        # Topology tree (set by the tree root), recorded in apply_delta's critical section
        # with the apply: async, per origin, the messages up the model holds; per sender,
        # the sum of what the model took from it (engine/treeview.py).
        self.tree_counts: AppliedCounts | None = None
        self.tree_sums: EdgeSums | None = None

    def start_model(self, dim: int, initial: npt.NDArray[np.float64] | None = None) -> None:
        """Allocate the global model once the size is known: ``initial`` (the vector every
        worker starts from; the MLP's seeded initialisation) or zeros (the linear model)."""
        with self._lock:
            if initial is not None and initial.shape != (dim,):
                raise ValueError(f"initial model has shape {initial.shape}, expected ({dim},)")
            self.w = (np.zeros(dim, dtype=np.float64) if initial is None
                      else np.array(initial, dtype=np.float64))

    def restore(self, ckpt: Checkpoint) -> None:
        """Start from a checkpoint's counters (the model comes with start_model)."""
        with self._lock:
            self.deltas_received = ckpt.deltas_received
            self.bytes_received = ckpt.bytes_received
            self.duplicates = ckpt.duplicates

    @property
    def dim(self) -> int | None:
        return None if self.w is None else int(self.w.shape[0])

    def apply_delta(self, delta: DecodedDelta) -> bool:
        """Add a validated delta to the global model; False if it was a duplicate."""
        h = delta.header
        roster = self.roster
        # A dropped sender hears that first (checked again under the lock below): refused for
        # its values alone, a quarantined member that goes on sending them would never learn
        # that it is out of the run, and would end as if it had finished it.
        early = roster.workers.get(h.worker_id)
        if early is not None and early.dead:
            raise _dropped(h.worker_id, early.dead_reason)
        # Outside the lock: O(entries), and the bound never changes once the run started.
        check_values(delta, self.max_delta_value)
        if self.norms is not None:  # refused beyond its bound; clipped (star) beyond clip
            delta = self.norms.check(delta)
        known = self.relay_check is not None and self.relay_check(h.worker_id, h.round, h)
        with self._lock:
            record = roster.check_sender(h.run_id, h.worker_id)
            if self.w is None:
                raise StaleOrUnknown("delta received before the run started")
            if roster.sealed:
                raise StaleOrUnknown("delta received after the run ended")
            if roster.tree_fanout is not None and h.worker_id not in roster.detached:
                above = [a for a in ancestors(h.worker_id, roster.tree_fanout)
                         if not roster.workers[a].dead and a not in roster.detached]
                if above:
                    raise StaleOrUnknown(f"worker {h.worker_id} is not a child of the "
                                         f"coordinator in the tree (worker {above[0]} is its "
                                         "parent)")
            if record.dead:
                # Its peers dropped it too: what it sends now would reach the global model but
                # not theirs. Refused, it registers again and resynchronises.
                raise _dropped(h.worker_id, record.dead_reason)
            whole = self.sequences.whole_parts if roster.tree_fanout is not None else None
            tracker = self.sequences.seen[h.worker_id]
            if whole is not None and not tracker.seen(h.seq, h.part):
                whole.room(delta)  # Busy before anything of it is recorded
            fresh = tracker.admit(h.seq, h.part, h.parts)
            if fresh is None:
                self.duplicates += 1
                return False
            parts = [delta] if whole is None else whole.add(delta)
            if parts is None:  # held until its last part is in
                record.last_seen = time.monotonic()
                return True
            versions = [self._sum_part(part, record, known) for part in parts]
            self._lock.notify_all()
        if self.relay is not None:
            for i, part in enumerate(parts):
                # (Only the last of a message held whole completes it.)
                self.relay(part, bool(fresh) and i == len(parts) - 1, versions[i])
        return True

    def _sum_part(self, delta: DecodedDelta, record: WorkerRecord, known: bool) -> int:
        """(Lock held.) Sum one admitted part into the model (unless ``known``: held there
        already) and count it; returns the model's version after it."""
        h = delta.header
        assert self.w is not None
        if self.tree_counts is not None and h.covers:
            # In this critical section, which applies the dead parent's messages too:
            # one of them is either in the counts already or refused (its sender dead).
            known = self.tree_counts.take(h.worker_id, h.seq, h.part, h.parts, h.covers,
                                          h.resent, known)
        if not known:
            t0 = time.perf_counter()
            result = kernels.apply_delta(self.w, self._empty, delta.indices, delta.values)
            self.apply_seconds += time.perf_counter() - t0
            if result != 0:  # decode_delta checked this; a non-zero result is a bug
                raise StaleOrUnknown(f"apply_delta refused delta {delta.key} ({result})")
            self.deltas_received += 1
            if self.tree_sums is not None:
                self.tree_sums.add(h.worker_id, delta.indices, delta.values)
        self.bytes_received += delta.nbytes
        record.took(h, delta.nbytes)
        return self.deltas_received

    def tree_applied(self, view: Callable[[AppliedCounts], T], default: T) -> T:
        """Topology tree, async: ``view`` of what the model holds per origin and edge."""
        with self._lock:
            return default if self.tree_counts is None else view(self.tree_counts)

    def model_copy(self) -> npt.NDArray[np.float64]:
        with self._lock:
            assert self.w is not None
            return self.w.copy()

    def model_version(self) -> tuple[npt.NDArray[np.float64], int]:
        """A copy of the model and its version: the count of deltas summed into it, so the
        delta the relay is told of with version v is in the copy if and only if v <= it."""
        with self._lock:
            assert self.w is not None
            return self.w.copy(), self.deltas_received


def _dropped(worker_id: int, reason: str) -> StaleOrUnknown:
    """The refusal of a delta from a worker dropped from the run (it registers again)."""
    return StaleOrUnknown(f"worker {worker_id} was dropped from the run ({reason})")
