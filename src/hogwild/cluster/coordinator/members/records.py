"""What the coordinator's run state hands out: worker records, accusations, model totals."""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.checkpoints.checkpoint_file import WorkerEntry
from hogwild.cluster.wire.codec import DeltaHeader
from hogwild.errors import StaleOrUnknown


@dataclass
class WorkerRecord:
    """One registered worker and what the coordinator has heard from it."""

    worker_id: int
    address: str
    threads: int
    hostname: str = ""
    pid: int = 0
    round: int = 0
    examples: int = 0
    train_loss: float | None = None
    done: bool = False           # reported done or sent its final delta
    final_delta: bool = False
    dead: bool = False
    dead_reason: str = ""
    deltas_applied: int = 0      # delta messages (parts) from this worker applied here
    # Its rounds whose updates the global model holds: a message may hold several (queued
    # behind a slow send, they are summed into one), so messages are no stable count of
    # them; each message's round (the highest it holds) says how far it got.
    rounds_held: int = 0
    delta_round: int = 0         # the highest round of its deltas summed so far
    bytes_received: int = 0
    max_staleness: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    incarnation: int = 0         # times it registered again during the run (restart, resync)
    drops: int = 0               # times it was dropped (each one announced once)
    registered: bool = True      # False: known from a checkpoint, not registered again yet
    secret_digest: bytes = b""   # SHA-256 of the registering process's secret

    def claim(self, hostname: str, pid: int, threads: int, digest: bytes,
              verified: bool) -> None:
        """The process registering at this record's address takes the record: the process the
        run knows (host, pid and the digest of its registration secret; for a record resumed
        from a checkpoint, whose process never registered here, the digest alone), or,
        ``verified``, the one that answers at the address now. AddressClaimed otherwise."""
        if not verified:
            if self.registered:
                known = ((self.hostname, self.pid) == (hostname, pid)
                         and hmac.compare_digest(self.secret_digest, digest))
            else:
                known = (not self.secret_digest
                         or hmac.compare_digest(self.secret_digest, digest))
            if not known:
                raise AddressClaimed(self)
        self.registered = True
        self.hostname, self.pid, self.threads = hostname, pid, max(1, threads)
        self.secret_digest = digest

    def took(self, header: DeltaHeader, nbytes: int) -> None:
        """One part of its delta of ``nbytes`` went in (summed, or held already)."""
        self.deltas_applied += 1
        self.bytes_received += nbytes
        self.round = max(self.round, header.round)
        if header.part == header.parts - 1 and header.round > self.delta_round:
            self.rounds_held += header.round - self.delta_round
            self.delta_round = header.round
        self.examples = max(self.examples, header.examples)
        self.last_seen = time.monotonic()
        if header.final and header.part == header.parts - 1:
            self.final_delta = True


class AddressClaimed(StaleOrUnknown):
    """Another process registered this address already (see Roster.register)."""

    def __init__(self, record: WorkerRecord) -> None:
        super().__init__(f"address {record.address} is registered by worker {record.worker_id} "
                         f"(host {record.hostname or '?'}, pid {record.pid})")
        self.record = record


@dataclass(frozen=True)
class Accusation:
    """A worker to probe on its peers' word: where it is, and which registration of it was
    accused (its place's generation, its incarnation and its secret's digest), so that a
    verdict about a process that has since been replaced drops nobody."""

    peer: int
    address: str
    secret_digest: bytes
    holder: tuple[int, int]


@dataclass
class Totals:
    """The global model and the counters of the deltas summed into it, read together."""

    w: npt.NDArray[np.float64]
    deltas_received: int
    bytes_received: int
    duplicates: int
    applied_from: dict[int, int]
    examples: int
    rounds: int
    # Worker rounds whose deltas the model holds (WorkerRecord.rounds_held, summed): what
    # the progress rows and the done line call deltas.
    delta_rounds: int = 0


def totals_of(records: list[WorkerRecord], w: npt.NDArray[np.float64], deltas_received: int,
              bytes_received: int, duplicates: int) -> Totals:
    """The model ``w`` (not copied) with its counters and the workers' figures."""
    return Totals(w=w, deltas_received=deltas_received, bytes_received=bytes_received,
                  duplicates=duplicates,
                  applied_from={r.worker_id: r.deltas_applied for r in records},
                  examples=sum(r.examples for r in records),
                  rounds=max((r.round for r in records), default=0),
                  delta_rounds=sum(r.rounds_held for r in records))


def records_from(entries: list[WorkerEntry]) -> list[WorkerRecord]:
    """A checkpoint's workers, each waiting to register again."""
    # (the checkpoint's model holds each worker's rounds up to the one it had reached)
    return [WorkerRecord(e.worker_id, e.address, e.threads, e.hostname, e.pid, round=e.round,
                         rounds_held=e.round, delta_round=e.round, examples=e.examples, deltas_applied=e.deltas_applied,
                         bytes_received=e.bytes_received, registered=False,
                         secret_digest=bytes.fromhex(e.secret_digest))
            for e in entries]


def entries_of(records: list[WorkerRecord]) -> list[WorkerEntry]:
    """The workers as a checkpoint keeps them."""
    return [WorkerEntry(r.worker_id, r.address, r.threads, r.hostname, r.pid, r.examples,
                        r.round, r.deltas_applied, r.bytes_received, r.secret_digest.hex())
            for r in records]


def counters_of(records: list[WorkerRecord], deltas_received: int, bytes_received: int,
                duplicates: int) -> dict[str, int]:
    """The run's counters without the model (what /metrics reports at each scrape)."""
    live = [r.round for r in records if not r.dead and not r.done]
    return {"rounds": max((r.round for r in records), default=0),
            "examples": sum(r.examples for r in records),
            "deltas_received": deltas_received,
            "bytes_received": bytes_received, "duplicates": duplicates,
            "staleness": max([max(live) - min(live) if live else 0]
                             + [r.max_staleness for r in records]),
            "live": sum(1 for r in records if not r.dead),
            "dead": sum(1 for r in records if r.dead and not r.done),
            "drops": sum(r.drops for r in records)}
