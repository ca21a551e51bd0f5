"""The coordinator's roster: who holds each place of the run, and what each worker reported."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable

from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.members.peer_reports import PeerReports
from hogwild.cluster.coordinator.members.quarantine import Quarantine
from hogwild.cluster.coordinator.members.records import WorkerRecord, records_from
from hogwild.cluster.coordinator.sums.sequences import Sequences
from hogwild.cluster.transport.keys import COORDINATOR, KeyRing
from hogwild.cluster.transport.security import same_key
from hogwild.errors import ClusterError, NotAllowed, NotReady, StaleOrUnknown


def _registered(workers: dict[int, WorkerRecord]) -> int:
    return sum(1 for r in workers.values() if r.registered)


class Roster:
    """The run's workers: registrations, places, drops and rejoins, and their reports. Every
    method is thread-safe, under the run state's lock (shared with the global model)."""

    def __init__(self, lock: threading.Condition, n_workers: int, run_id: str, keys: KeyRing,
                 sequences: Sequences) -> None:
        self.run_id = run_id
        self.keys = keys
        self.n_workers = n_workers
        self._lock = lock
        # The global model's count of each worker's deltas: started again here with each new
        # holder or incarnation of a place.
        self._sequences = sequences
        self.workers: dict[int, WorkerRecord] = {}
        self._by_address: dict[str, int] = {}
        self.closed = False               # no more registrations (but for free places)
        # Places given back before the run started (their holder did not answer when its
        # rows were shipped): the next new registrations take them, lowest id first.
        self._free: list[int] = []
        # Times each place was given back: a new holder gets keys of its own, so the one
        # before it (a crashed pod, or a stranger) holds none that still count.
        self._generation: dict[int, int] = {}
        self.loss_reports = 0  # training losses the workers reported (to tell a fresh one)
        # The run's end, set under this lock by RunState (seal, hand_over).
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
        # Topology tree: its fan-out. Deltas come only from the coordinator's children:
        # workers whose heap ancestors are all dead (none, at first, for 0..k-1).
        self.tree_fanout: int | None = None
        # Topology tree: workers taken back as leaves of the coordinator. Their heap places
        # stay routed around: the layout counts them dead, the run does not. Added under
        # this lock and the tree root's; read under either.
        self.detached: set[int] = set()

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
            self._sequences.restart(worker_id)
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
            while _registered(self.workers) < self.n_workers and not cancelled():
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
            registered = _registered(self.workers)
            if registered < self.n_workers:
                have = ", ".join(f"{r.worker_id}@{r.address}" for r in self.workers.values()
                                 if r.registered)
                raise ClusterError(
                    f"only {registered} of {self.n_workers} workers registered within "
                    f"register_timeout={timeout:g}s ({self.n_workers - registered} "
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
            self._sequences.restart(worker_id)
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
                self._sequences.seen.pop(record.worker_id, None)
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

    def restore(self, ckpt: Checkpoint) -> None:
        """Start from a checkpoint's workers, each waiting to register again (at its old
        address or a new one)."""
        with self._lock:
            for record in records_from(ckpt.workers):
                self.workers[record.worker_id] = record
                self._by_address[record.address] = record.worker_id
                self._sequences.restart(record.worker_id)

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
            self._sequences.restart(worker_id)
            self._lock.notify_all()

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
            # its unfinished messages: never summed
            self._sequences.whole_parts.forget(record.worker_id)

    # ------------------------------------------------------------------- queries

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
