"""The workers' reports about their peers: kept for metrics.json, probed, refused for a while."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hogwild.cluster.coordinator.members.records import Accusation, WorkerRecord

# Peer reports kept for metrics.json (a drop is reported by one or two peers; a flood of
# them from one misbehaving worker is not stored), and the length of each reason kept.
MAX_PEER_REPORTS = 1000
MAX_REASON_LENGTH = 500
# A report that a peer is down is one member's word: the coordinator asks the peer itself
# before it drops it (see RunState.accuse and settle). A reporter whose report was refused
# (the peer answered) is not heard about that peer again for this many seconds, so no member
# can keep the coordinator probing; an honest worker reports a peer once per drop.
PEER_REPORT_COOLDOWN = 10.0


class PeerReports:
    """The workers' reports that a peer is down, weighed under the run state's lock: each is
    kept (bounded), probed, then acted on (the peer dropped) or refused."""

    def __init__(self, lock: threading.Condition,
                 check_sender: Callable[..., WorkerRecord],
                 droppable: Callable[[WorkerRecord], bool],
                 holding: Callable[[WorkerRecord], tuple[int, int]],
                 drop: Callable[[WorkerRecord, str], None],
                 find: Callable[[int], WorkerRecord | None]) -> None:
        # The run state's lock and what it knows of its workers (each called under the lock):
        # the record of a sender (refusing a stranger), whether a report may drop a worker,
        # which holder of its place a record is, the drop itself, and a worker's record.
        self._lock = lock
        self._check_sender = check_sender
        self._droppable = droppable
        self._holding = holding
        self._drop = drop
        self._find = find
        self.kept: list[tuple[int, int, int, str]] = []  # (reporter, peer, round, why)
        self.refused = 0  # reports not acted on: the peer answered, or too soon
        # The accused workers being probed (peer -> reporter -> (round, why)), and until
        # when a refused reporter is not heard about a peer again. Both are keyed by the
        # run's worker ids, so bounded by its size (squared).
        self._probing: dict[int, dict[int, tuple[int, str]]] = {}
        self._refused_until: dict[tuple[int, int], float] = {}

    def keep(self, reporter: int, peer: int, round_: int, reason: str) -> None:
        """Kept for metrics.json: bounded, as is each reason (a worker's own words, cut by
        the caller)."""
        if len(self.kept) < MAX_PEER_REPORTS:
            self.kept.append((reporter, peer, round_, reason))

    def cooling(self, reporter: int, peer: int) -> bool:
        """Whether a report of ``reporter``'s about ``peer`` was refused too recently to hear
        another."""
        return self._refused_until.get((reporter, peer), 0.0) > time.monotonic()

    def wait_on(self, peer: int, reporter: int, round_: int, reason: str) -> bool:
        """Add the report to those waiting on ``peer``'s probe; True if it starts one (none
        was under way)."""
        waiting = self._probing.get(peer)
        if waiting is not None:
            waiting.setdefault(reporter, (round_, reason))
            return False
        self._probing[peer] = {reporter: (round_, reason)}
        return True

    def verdict(self, peer: int) -> dict[int, tuple[int, str]]:
        """The reports that waited on ``peer``'s probe (reporter -> (round, why)), now done."""
        return self._probing.pop(peer, {})

    def refuse(self, peer: int, reporters: list[int]) -> None:
        """``peer`` answered: the reports are refused, and their reporters not heard about it
        for PEER_REPORT_COOLDOWN seconds."""
        self.refused += len(reporters)
        until = time.monotonic() + PEER_REPORT_COOLDOWN
        for reporter in reporters:
            self._refused_until[(reporter, peer)] = until

    # ------------------------------------------------ the reports (the lock taken here)

    def peer_down(self, run_id: str, reporter: int, peer: int, round_: int, reason: str,
                  key: str | None = None) -> None:
        """A worker dropped ``peer`` and the report is taken as it is (the servicer first
        probes the peer: see :meth:`accuse`); the coordinator stops counting on it."""
        with self._lock:
            if self._check_sender(run_id, reporter, key).dead:
                return  # a dropped worker's view of the others is out of date
            record = self._check_sender(run_id, peer)
            reason = reason[:MAX_REASON_LENGTH]
            self.keep(reporter, peer, round_, reason)
            if self._droppable(record):
                self._drop(record, f"reported by worker {reporter} at round {round_}: {reason}")
            self._lock.notify_all()

    def accuse(self, run_id: str, reporter: int, peer: int, round_: int, reason: str,
               key: str | None = None) -> Accusation | None:
        """Worker ``reporter`` says ``peer`` is down. What to probe (the caller asks the peer,
        then calls :meth:`settle` with the answer), or None: nothing to probe, because the
        peer is dropped or finished already, a probe of it is under way (this report waits
        for its verdict), or the report is refused (its reporter was dropped, or a report of
        it about this peer was refused less than PEER_REPORT_COOLDOWN seconds ago)."""
        reason = reason[:MAX_REASON_LENGTH]
        with self._lock:
            if self._check_sender(run_id, reporter, key).dead:
                self.refused += 1  # a dropped worker's view is out of date
                return None
            record = self._check_sender(run_id, peer)
            if self.cooling(reporter, peer):
                self.refused += 1
                return None
            self.keep(reporter, peer, round_, reason)
            if (record.dead or not self._droppable(record)
                    or not self.wait_on(peer, reporter, round_, reason)):
                return None
            return Accusation(peer, record.address, record.secret_digest, self._holding(record))

    def settle(self, accused: Accusation, why_down: str | None) -> list[int]:
        """The probe's verdict on ``accused``. ``why_down`` None (it answered as the process
        that registered, and serving): every report waiting on it is refused, and the
        reporters of them are not heard about it for PEER_REPORT_COOLDOWN seconds; the
        reporters are returned. Else it is dropped, for the first report and ``why_down``
        (unless it registered again meanwhile: the verdict was about a process gone)."""
        with self._lock:
            reports = self.verdict(accused.peer)
            if why_down is None:
                self.refuse(accused.peer, list(reports))
                return sorted(reports)
            record = self._find(accused.peer)
            if (record is not None and reports and self._droppable(record)
                    and self._holding(record) == accused.holder
                    and record.secret_digest == accused.secret_digest):
                reporter, (round_, reason) = next(iter(reports.items()))
                self._drop(record, f"reported by worker {reporter} at round {round_}: {reason}; "
                                   f"{why_down}")
                self._lock.notify_all()
            return []
