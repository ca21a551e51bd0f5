"""The coordinator's run state in plain Python: registrations, the global model, progress.

No gRPC here. The servicer decodes messages into calls on :class:`RunState`; the run driver
reads snapshots of it. The global model is the sum of every delta received (each
(worker, seq, part) applied once), starting from the same vector as every worker's model
(zeros, or the MLP's seeded initialisation).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.peer_reports import PeerReports
from hogwild.cluster.coordinator.quarantine import Quarantine
from hogwild.cluster.coordinator.records import (
    Totals,
    WorkerRecord,
    counters_of,
    entries_of,
    records_from,
    totals_of,
)
from hogwild.cluster.transport.keys import COORDINATOR, KeyRing
from hogwild.cluster.transport.security import same_key
from hogwild.cluster.wire.codec import DecodedDelta, DeltaHeader, check_values
from hogwild.cluster.wire.deltanorms import NormWatch
from hogwild.cluster.wire.sequence import SequenceTracker
from hogwild.cluster.wire.wholeparts import WholeParts
from hogwild.engine.tree import AppliedCounts
from hogwild.engine.treeshape import ancestors
from hogwild.engine.treeview import EdgeSums
from hogwild.errors import ClusterError, NotAllowed, NotReady, StaleOrUnknown
from hogwild.model import kernels

T = TypeVar("T")


class RunState:
    """Everything the coordinator knows about the run; every method is thread-safe."""

    def __init__(self, n_workers: int, run_id: str | None = None,
                 keys: KeyRing | None = None) -> None:
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.keys = keys if keys is not None else KeyRing()
        self.n_workers = n_workers
        self._lock = threading.Condition()
        self.workers: dict[int, WorkerRecord] = {}
        self._by_address: dict[str, int] = {}
        self.closed = False               # no more registrations (but for free places)
        # Places given back before the run started (their holder did not answer when its
        # rows were shipped): the next new registrations take them, lowest id first.
        self._free: list[int] = []
        # Times each place was given back: a new holder gets keys of its own, so the one
        # before it (a crashed pod, or a stranger) holds none that still count.
        self._generation: dict[int, int] = {}
        self.w: npt.NDArray[np.float64] | None = None
        self._empty = np.zeros(0, dtype=np.float64)
        self._seen: dict[int, SequenceTracker] = {}  # per worker: (seq, part) dedup
        self.deltas_received = 0
        self.loss_reports = 0  # training losses the workers reported (to tell a fresh one)
        self.duplicates = 0
        self.bytes_received = 0
        self.apply_seconds = 0.0         # time spent adding deltas to the global model
        self.sealed = False               # the run is over: the model takes no more deltas
        self.handed_over = False          # left to a successor: registrations wait for it
        # Workers that reported their own weights non-finite, not yet judged by the driver
        # (worker -> round; one entry per worker: bounded by the run's size).
        self._divergence_claims: dict[int, int] = {}
        self.divergence_reports_dismissed = 0  # claims the global model did not bear out
        # What the workers said about their peers (under this lock, dropping through it).
        self.reports = PeerReports(self._lock, self.check_sender, self._droppable,
                                   self._holding, self._drop, lambda wid: self.workers.get(wid))
        self._rejoins: list[int] = []     # workers that registered again during the run
        self.quarantine = Quarantine()    # senders whose deltas were refused (under the lock)
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
        # Topology tree: its fan-out. Deltas come only from the coordinator's children:
        # workers whose heap ancestors are all dead (none, at first, for 0..k-1).
        self.tree_fanout: int | None = None
        # Topology tree: workers taken back as leaves of the coordinator. Their heap places
        # stay routed around: the layout counts them dead, the run does not. Added under
        # this lock and the tree root's; read under either.
        self.detached: set[int] = set()
        # Topology tree (set by the tree root), recorded in apply_delta's critical section
        # with the apply: async, per origin, the messages up the model holds; per sender,
        # the sum of what the model took from it (engine/treeview.py).
        self.tree_counts: AppliedCounts | None = None
        self.tree_sums: EdgeSums | None = None
        # Topology tree: multi-part messages summed whole or not at all (protocol/wholeparts).
        self.whole_parts = WholeParts()

    # ---------------------------------------------------------------- registration

    def register(self, address: str, threads: int, hostname: str = "", pid: int = 0,
                 verified: bool = False, secret: bytes = b"") -> int:
        """The worker id for ``address``.

        The same process (host, pid and ``secret``: its registration secret) registering
        again gets its id again. Another process claiming a registered address raises
        AddressClaimed unless ``verified`` (the caller checked that this process is the one
        answering at the address now: the old one is gone). Host and pid alone prove nothing:
        any worker can ask a peer for them. Once the run is under way, a known address
        registering again is a worker rejoining (restarted, or resynchronising): it keeps its
        id and is queued for :meth:`take_rejoins`.
        """
        digest = hashlib.sha256(secret).digest() if secret else b""
        if not address:
            raise StaleOrUnknown("registration without an address")
        with self._lock:
            if self.handed_over:  # UNAVAILABLE: the worker retries, and finds the successor
                raise NotReady(f"the coordinator is handing run {self.run_id} over to a "
                               "successor that resumes it: register with that one")
            known = self._by_address.get(address)
            if known is None and not self.closed:
                # Resuming: a worker of the checkpoint at a new address takes a free place.
                known = next((r.worker_id for r in self.workers.values() if not r.registered),
                             None)
                if known is not None:
                    del self._by_address[self.workers[known].address]
                    self.workers[known].address = address
                    self._by_address[address] = known
            if known is not None:
                self.quarantine.check(known)
                record = self.workers[known]
                if not record.registered and self.sealed:  # resumed, and over already
                    raise StaleOrUnknown(f"run {self.run_id} is over")
                record.claim(hostname, pid, threads, digest, verified)
                if self.closed:  # under way: it rejoins (restarted, or resynchronising)
                    if self.sealed:
                        raise StaleOrUnknown(f"run {self.run_id} is over")
                    record.incarnation += 1
                    if known not in self._rejoins:
                        self._rejoins.append(known)
                self._lock.notify_all()
                return known
            if not self._free and (self.closed or len(self.workers) >= self.n_workers):
                raise StaleOrUnknown("this run already has all its workers")
            worker_id = self._free.pop(0) if self._free else len(self.workers)
            record = WorkerRecord(worker_id, address, max(1, threads), hostname, pid,
                                  secret_digest=digest)
            # A new mapping in id order (a place given back comes before later ids): readers
            # that iterate the old one unlocked are not disturbed.
            self.workers = dict(sorted({**self.workers, worker_id: record}.items()))
            self._new_sequence(worker_id)
            self._by_address[address] = worker_id
            self._lock.notify_all()
            return worker_id

    def wait_for_workers(self, timeout: float,
                         cancelled: Callable[[], bool] = lambda: False,
                         go_on_without: bool = False) -> list[WorkerRecord]:
        """Block until every expected worker registered; ClusterError naming who is missing.

        Returns early (registration closed, fewer workers) once ``cancelled()`` is true: the
        caller checks it again and gives up. ``go_on_without`` (a resumed run): once at least
        one worker is back, the ones missing at the deadline are dropped instead (each
        rejoins if it registers later) and every record is returned.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            # Short waits: a SIGTERM handler cannot notify this condition, so look again often.
            while self._registered() < self.n_workers and not cancelled():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 0.1))
            self.closed = True
            if cancelled():
                return list(self.workers.values())
            missing = [r for r in self.workers.values() if not r.registered]
            if missing and go_on_without and len(missing) < self.n_workers:
                for r in missing:
                    self._drop(r, f"did not register again within register_timeout="
                                  f"{timeout:g}s of the resume")
                return list(self.workers.values())
            if self._registered() < self.n_workers:
                have = ", ".join(f"{r.worker_id}@{r.address}" for r in self.workers.values()
                                 if r.registered)
                raise ClusterError(
                    f"only {self._registered()} of {self.n_workers} workers registered within "
                    f"register_timeout={timeout:g}s ({self.n_workers - self._registered()} "
                    f"missing; registered: {have or 'none'})")
            return list(self.workers.values())

    def release(self, worker_id: int) -> None:
        """Before the run starts: give ``worker_id``'s place back (its holder did not answer).
        The next new registration takes it, with new keys: whatever the holder was told
        counts for nothing any more."""
        with self._lock:
            record = self.workers[worker_id]
            self.workers = {k: v for k, v in self.workers.items() if k != worker_id}
            if self._by_address.get(record.address) == worker_id:
                del self._by_address[record.address]
            self._generation[worker_id] = self._generation.get(worker_id, 0) + 1
            self._new_sequence(worker_id)
            self._free.append(worker_id)
            self._free.sort()
            self._lock.notify_all()

    def engage(self, workers: int) -> None:
        """Before the run starts: keep the first ``workers`` places (``engage: auto``); the
        others' holders are released, and refused as any worker past the roster is."""
        with self._lock:
            for record in [r for wid, r in self.workers.items() if wid >= workers]:
                if self._by_address.get(record.address) == record.worker_id:
                    del self._by_address[record.address]
                self._seen.pop(record.worker_id, None)
            self.workers = {k: v for k, v in self.workers.items() if k < workers}
            self._free, self.n_workers = [w for w in self._free if w < workers], workers

    def wait_for_places(self, places: list[int], timeout: float,
                        cancelled: Callable[[], bool] = lambda: False) -> list[WorkerRecord]:
        """Block until every place in ``places`` (given back by :meth:`release`) is taken;
        their new records. Returns early, with those taken, once ``cancelled()`` is true;
        ClusterError naming the places still free after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(p in self._free for p in places) and not cancelled():
                left = deadline - time.monotonic()
                if left <= 0:
                    free = [p for p in places if p in self._free]
                    raise ClusterError(
                        f"no worker registered for the place of worker(s) "
                        f"{', '.join(map(str, free))} within register_timeout={timeout:g}s "
                        "after its holder did not answer (start another worker sooner, or "
                        "raise register_timeout)")
                self._lock.wait(min(left, 0.1))  # short waits: see wait_for_workers
            return [self.workers[p] for p in places if p in self.workers]

    def _registered(self) -> int:
        return sum(1 for r in self.workers.values() if r.registered)

    def restore(self, ckpt: Checkpoint) -> None:
        """Start from a checkpoint: its workers (each waiting to register again, at its old
        address or a new one) and its counters. The model comes with start_model."""
        with self._lock:
            for record in records_from(ckpt.workers):
                self.workers[record.worker_id] = record
                self._by_address[record.address] = record.worker_id
                self._new_sequence(record.worker_id)
            self.deltas_received = ckpt.deltas_received
            self.bytes_received = ckpt.bytes_received
            self.duplicates = ckpt.duplicates

    def checkpoint(self, elapsed: float, history_rows: int) -> Checkpoint:
        """The model, counters and workers, read together, as a checkpoint (``history_rows``:
        the evaluations metrics.jsonl holds)."""
        with self._lock:
            totals = self.totals()
            return Checkpoint(
                run_id=self.run_id, w=totals.w, round=totals.rounds, elapsed=elapsed,
                deltas_received=totals.deltas_received, bytes_received=totals.bytes_received,
                duplicates=totals.duplicates, history_rows=history_rows,
                workers=entries_of(list(self.workers.values())))

    def take_rejoins(self) -> list[int]:
        """Workers that registered again since the last call (each to be brought back)."""
        with self._lock:
            taken, self._rejoins = self._rejoins, []
            return taken

    def detach(self, worker_id: int) -> None:
        """Topology tree: ``worker_id`` comes back as a leaf of the coordinator."""
        with self._lock:
            self.detached.add(worker_id)

    def rejoined(self, worker_id: int, round_: int) -> None:
        """A worker is back in the run from after ``round_``."""
        with self._lock:
            record = self.workers[worker_id]
            record.dead, record.dead_reason = False, ""
            record.done = record.final_delta = False
            record.round = record.delta_round = round_
            record.last_seen = time.monotonic()
            # Its new incarnation numbers its deltas from 1 again.
            self._new_sequence(worker_id)
            self._lock.notify_all()

    def start_model(self, dim: int, initial: npt.NDArray[np.float64] | None = None) -> None:
        """Allocate the global model once the size is known: ``initial`` (the vector every
        worker starts from; the MLP's seeded initialisation) or zeros (the linear model)."""
        with self._lock:
            if initial is not None and initial.shape != (dim,):
                raise ValueError(f"initial model has shape {initial.shape}, expected ({dim},)")
            self.w = (np.zeros(dim, dtype=np.float64) if initial is None
                      else np.array(initial, dtype=np.float64))

    # ------------------------------------------------------------------- messages

    def worker_key(self, worker_id: int) -> str:
        """What worker ``worker_id`` presents on its calls to the coordinator."""
        return self.keys.key(self._holder(worker_id), COORDINATOR)

    def coordinator_key(self, worker_id: int) -> str:
        """What the coordinator presents on its calls to worker ``worker_id``."""
        return self.keys.key(COORDINATOR, self._holder(worker_id))

    def _holder(self, worker_id: int) -> int | str:
        """Who holds place ``worker_id`` in the keys' terms: the id, with the number of
        times the place was given back (keys of one holder are no keys of the next)."""
        generation = self._generation.get(worker_id, 0)
        return worker_id if generation == 0 else f"{worker_id}.{generation}"

    def check_sender(self, run_id: str, worker_id: int, key: str | None = None) -> WorkerRecord:
        """The record of a known worker of this run; StaleOrUnknown otherwise (naming neither
        this run nor its size: the caller may be a stranger), NotAllowed if ``key`` is not
        that worker's key (None: the caller's key was checked already)."""
        if run_id != self.run_id:
            raise StaleOrUnknown(f"message for run {run_id!r}, which is not this run")
        record = self.workers.get(worker_id)
        if record is None:
            raise StaleOrUnknown(f"unknown worker {worker_id}")
        if not record.registered:
            # A resumed coordinator issued this worker no key yet: whoever calls, the worker
            # must register again (told so, it leaves the run it had and does).
            raise StaleOrUnknown(f"worker {worker_id} has not registered with this "
                                 "coordinator since it was resumed: register again")
        if key is not None and not same_key(key, self.worker_key(worker_id)):
            raise NotAllowed(f"the caller is not worker {worker_id}")
        return record

    def _new_sequence(self, worker_id: int) -> None:
        """(Lock held.) ``worker_id`` numbers its deltas from 1 again (a new incarnation)."""
        self._seen[worker_id] = SequenceTracker()
        self.whole_parts.forget(worker_id)

    @property
    def dim(self) -> int | None:
        return None if self.w is None else int(self.w.shape[0])

    def apply_delta(self, delta: DecodedDelta) -> bool:
        """Add a validated delta to the global model; False if it was a duplicate."""
        h = delta.header
        # Outside the lock: O(entries), and the bound never changes once the run started.
        check_values(delta, self.max_delta_value)
        if self.norms is not None:  # refused beyond its bound; clipped (star) beyond clip
            delta = self.norms.check(delta)
        known = self.relay_check is not None and self.relay_check(h.worker_id, h.round, h)
        with self._lock:
            record = self.check_sender(h.run_id, h.worker_id)
            if self.w is None:
                raise StaleOrUnknown("delta received before the run started")
            if self.sealed:
                raise StaleOrUnknown("delta received after the run ended")
            if self.tree_fanout is not None and h.worker_id not in self.detached:
                above = [a for a in ancestors(h.worker_id, self.tree_fanout)
                         if not self.workers[a].dead and a not in self.detached]
                if above:
                    raise StaleOrUnknown(f"worker {h.worker_id} is not a child of the "
                                         f"coordinator in the tree (worker {above[0]} is its "
                                         "parent)")
            if record.dead:
                # Its peers dropped it too: what it sends now would reach the global model but
                # not theirs. Refused, it registers again and resynchronises.
                raise StaleOrUnknown(f"worker {h.worker_id} was dropped from the run "
                                     f"({record.dead_reason})")
            whole = self.whole_parts if self.tree_fanout is not None else None
            tracker = self._seen[h.worker_id]
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

    def progress(self, run_id: str, worker_id: int, round_: int, examples: int,
                 train_loss: float, done: bool, max_staleness: int,
                 diverged: bool = False, key: str | None = None) -> None:
        with self._lock:
            record = self.check_sender(run_id, worker_id, key)
            if record.dead:
                # Alive after all (frozen, or cut off from a peer): refused, it registers
                # again and resynchronises. A star or tree worker waiting on the relay may
                # send nothing else (one was seen idling, dropped, until the run ended).
                # Refused means refused: not even its divergence ends the run.
                raise StaleOrUnknown(f"worker {worker_id} was dropped from the run "
                                     f"({record.dead_reason})")
            if diverged:
                # Its word about its own weights, which a deceived or buggy member could send
                # on a healthy run: the driver weighs it against the global model.
                self._divergence_claims.setdefault(worker_id, round_)
            record.round = max(record.round, round_)
            record.examples = max(record.examples, examples)
            if math.isfinite(train_loss):  # NaN: none yet (the servicer refuses infinity)
                record.train_loss = train_loss
                self.loss_reports += 1
            record.done = record.done or done
            record.max_staleness = max(record.max_staleness, max_staleness)
            record.last_seen = time.monotonic()
            self._lock.notify_all()

    def take_divergence_claims(self) -> dict[int, int]:
        """The workers that reported their weights non-finite since the last call, with the
        round each did (for the driver to judge)."""
        with self._lock:
            taken, self._divergence_claims = self._divergence_claims, {}
            return taken

    def dismiss_divergence(self, worker_id: int, round_: int, why: str) -> int:
        """A divergence report the global model did not bear out: it was about the reporter's
        own weights, so the reporter is dropped (its deltas and reports are refused from now
        on; it may register again and rejoin from the global model), the run goes on. Returns
        its drop count (for the caller that announced it)."""
        with self._lock:
            record = self.workers[worker_id]
            self.divergence_reports_dismissed += 1
            self._drop(record, f"it reported its weights non-finite at round {round_}; {why}")
            self._lock.notify_all()
            return record.drops

    def _holding(self, record: WorkerRecord) -> tuple[int, int]:
        """(Lock held.) Which holder of its place ``record`` is: the place's generation and
        the record's incarnation."""
        return self._generation.get(record.worker_id, 0), record.incarnation

    def _droppable(self, record: WorkerRecord) -> bool:
        """(Lock held.) Whether a peer's report may drop ``record``. In a tree a finished
        worker still relays: its loss matters until the end. A worker taken back as the
        coordinator's leaf is dead to its old neighbours by design: their reports do not drop
        it (the relay watches it)."""
        return (record.worker_id not in self.detached
                and (not record.done or self.tree_fanout is not None))

    def mark_dead(self, worker_id: int, reason: str) -> None:
        with self._lock:
            self._drop(self.workers[worker_id], reason)
            self._lock.notify_all()

    def refuse(self, worker_id: int, why: str) -> None:
        """A delta of ``worker_id`` was refused for its values: counted, and its sender
        quarantined (dropped, and refused if it registers again)."""
        with self._lock:
            record = self.workers.get(worker_id)
            if record is not None and self.quarantine.refuse(worker_id, why):
                self._drop(record, f"quarantined: a delta it sent was refused ({why})")
                self._lock.notify_all()

    def _drop(self, record: WorkerRecord, reason: str) -> None:
        """(Lock held.) ``record`` is dead from now on, for ``reason``; a drop is counted
        once (and announced once), however many say so."""
        if not record.dead:
            record.dead, record.dead_reason = True, reason
            record.drops += 1
            self.whole_parts.forget(record.worker_id)  # its unfinished messages: never summed

    def totals(self, unchanged: tuple[int, npt.NDArray[np.float64]] | None = None) -> Totals:
        """The model and its counters, read together (an evaluation's view).

        ``unchanged``: (deltas_received, a copy of the model then); that copy is returned
        instead of a new one if no delta has been summed since (a trace copy costs about
        0.3 ms for 47k weights, mostly the page faults of new memory)."""
        with self._lock:
            assert self.w is not None
            shared = unchanged is not None and unchanged[0] == self.deltas_received
            w = unchanged[1] if unchanged is not None and shared else self.w.copy()
            return totals_of(list(self.workers.values()), w, self.deltas_received,
                             self.bytes_received, self.duplicates)

    def counters(self) -> dict[str, int]:
        """The run's counters without the model (what /metrics reports at each scrape)."""
        with self._lock:
            return counters_of(list(self.workers.values()), self.deltas_received,
                               self.bytes_received, self.duplicates)

    def hand_over(self) -> None:
        """Refuse registrations from now on: they are for the coordinator resuming the run."""
        with self._lock:
            self.handed_over = True

    def seal(self) -> Totals:
        """End the run: refuse every later delta and return the model with the counters that
        describe exactly it (what metrics.json and the last printed line report)."""
        with self._lock:
            self.sealed = True
            return self.totals()

    # ------------------------------------------------------------------- queries

    @property
    def peer_reports(self) -> list[tuple[int, int, int, str]]:
        """The peer reports kept for metrics.json: (reporter, peer, round, why)."""
        return self.reports.kept

    @property
    def peer_reports_refused(self) -> int:
        """Reports not acted on: the peer answered, or they came too soon."""
        return self.reports.refused

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

    def examples(self) -> int:
        with self._lock:
            return sum(r.examples for r in self.workers.values())

    def all_finished(self) -> bool:
        """Every worker is done, sent its final delta, or is dead."""
        with self._lock:
            return bool(self.workers) and all(
                r.dead or r.done or r.final_delta for r in self.workers.values())

    def live_workers(self) -> list[WorkerRecord]:
        with self._lock:
            return [r for r in self.workers.values() if not r.dead]

    def others(self, worker_id: int) -> tuple[list[WorkerRecord], list[WorkerRecord]]:
        """The workers other than ``worker_id`` and not finished, live and dead, read
        together (a rejoin's peers and the ones it names as down)."""
        with self._lock:
            others = [r for r in self.workers.values()
                      if r.worker_id != worker_id and not r.done]
            return [r for r in others if not r.dead], [r for r in others if r.dead]

    def dead_workers(self) -> list[WorkerRecord]:
        """Workers dropped and not (yet) back, finished ones excepted."""
        with self._lock:
            return [r for r in self.workers.values() if r.dead and not r.done]

    def max_staleness(self) -> int:
        """Largest round gap between live workers (as seen here) or reported by a worker."""
        with self._lock:
            live = [r.round for r in self.workers.values() if not r.dead and not r.done]
            gap = (max(live) - min(live)) if live else 0
            reported = max((r.max_staleness for r in self.workers.values()), default=0)
            return max(gap, reported)

    def max_round(self) -> int:
        with self._lock:
            return max((r.round for r in self.workers.values()), default=0)
