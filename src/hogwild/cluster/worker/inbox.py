"""Incoming deltas of one worker: dedup by (sender, seq, part), queue, and per-peer round tracking.

Dedup keeps, per peer, a high-water mark and a small window (protocol/sequence.py), so its
memory does not grow with the run, and a delta numbered far ahead of the peer's last one is
refused. So is a delta labelled with a round further ahead than the protocol lets a peer
run (the node works out how far): its round would stand in for deltas never sent, and
release barriers and staleness bounds that should wait for them. What waits to be applied
is bounded per sender (``max_queued`` coordinates): beyond it a delta is refused as Busy
(RESOURCE_EXHAUSTED, which a sender retries with the same seq, so nothing is lost), else a
peer sending numbered deltas faster than this worker drains them (a sync worker drains once
a round) would grow the queue without end.

Receiving (RPC threads) and applying (the one exchange thread) are decoupled: a validated
delta is queued here and acknowledged; the exchange thread drains the queue with apply_delta,
serialised with build_delta. The tracker also answers the questions the barrier asks: which
round has each peer completed, which peers sent their final delta, which were dropped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hogwild.cluster.wire.codec import DecodedDelta
from hogwild.cluster.wire.sequence import SequenceTracker
from hogwild.errors import Busy, InvalidMessage, StaleOrUnknown


@dataclass
class PeerStatus:
    """What this worker knows of one peer."""

    worker_id: int
    address: str
    round: int = 0              # highest round whose delta arrived complete
    final: bool = False         # sent its last delta
    dropped: bool = False       # missed a deadline; no longer waited for or accepted
    last_seen: float = field(default_factory=time.monotonic)
    applied: int = 0            # delta messages (parts) applied
    # The round before this incarnation's first, as the coordinator said when it took the
    # peer back (0: not said): a rejoiner starts at the run's round, which a receiver that
    # lags the run (slow, just unfrozen) may be far behind.
    since: int = 0
    # Its last delta was refused as further ahead than a peer can be (lost: a sender does
    # not retry a refusal); cleared by its next delta taken.
    refused_ahead: bool = False

    @property
    def settled(self) -> bool:
        """Never to be waited for again."""
        return self.final or self.dropped


Predicate = Callable[[dict[int, PeerStatus]], bool]


class Inbox:
    """Thread-safe queue of validated deltas plus the peer table the barriers wait on."""

    def __init__(self, peers: dict[int, str], rounds_done: int = 0,
                 max_queued: int | None = None) -> None:
        """``rounds_done``: the rounds every peer has completed when this worker starts (a
        resumed run's workers all start after the checkpoint's round; counted from 0, one
        bounded by ``staleness`` waited for rounds nobody would send, and never started).
        ``max_queued``: the most coordinates of one sender's deltas queued at once (None:
        no bound)."""
        self._cond = threading.Condition()
        self._queue: deque[DecodedDelta] = deque()
        self.max_queued = max_queued
        self._queued_from: dict[int, int] = dict.fromkeys(peers, 0)
        self.refused_busy = 0
        self.refused: dict[int, int] = {}  # per sender: deltas refused for their values
        self._seen: dict[int, SequenceTracker] = {pid: SequenceTracker() for pid in peers}
        self._rounds_done = rounds_done
        self.peers: dict[int, PeerStatus] = {
            pid: PeerStatus(pid, address, rounds_done) for pid, address in peers.items()}
        self.duplicates = 0
        self.bytes_received = 0

    # -------------------------------------------------------------- receiving side

    def offer(self, delta: DecodedDelta, max_round: int | None = None) -> bool:
        """Queue ``delta``; False (and nothing queued) if this (sender, seq, part) was seen.

        StaleOrUnknown if the sender is not a peer of this run or was dropped;
        InvalidMessage if its round is above ``max_round`` (nothing recorded but that, see
        :meth:`refused_ahead`); Busy if the sender's queued deltas would exceed
        ``max_queued`` coordinates (nothing recorded).
        """
        h = delta.header
        with self._cond:
            peer = self.peers.get(h.worker_id)
            if peer is None:
                raise StaleOrUnknown(f"delta from worker {h.worker_id}, not a peer of this run")
            if peer.dropped:
                raise dropped_sender("delta", h.worker_id)
            if max_round is not None and h.round > max_round:
                peer.refused_ahead = True
                raise InvalidMessage(f"delta round {h.round} is further ahead of this worker "
                                     f"than a peer can be (at most {max_round})")
            size = int(delta.values.shape[0])
            queued = self._queued_from.get(h.worker_id, 0)
            if (self.max_queued is not None and queued + size > self.max_queued
                    and not self._seen[h.worker_id].seen(h.seq, h.part)):
                self.refused_busy += 1
                raise Busy(f"{queued:,} coordinates from worker {h.worker_id} wait to be "
                           "applied already; retry")
            complete = self._seen[h.worker_id].admit(h.seq, h.part, h.parts)
            if complete is None:
                self.duplicates += 1
                return False
            self._queue.append(delta)
            peer.refused_ahead = False
            self._queued_from[h.worker_id] = queued + size
            self.bytes_received += delta.nbytes
            peer.last_seen = time.monotonic()
            if complete:
                peer.round = max(peer.round, h.round)
                if h.final:
                    peer.final = True
            self._cond.notify_all()
            return True

    def seen(self, key: tuple[int, int, int]) -> bool:
        """Whether (sender, seq, part) ``key`` was queued already (offer would refuse it)."""
        with self._cond:
            tracker = self._seen.get(key[0])
            return tracker is not None and tracker.seen(key[1], key[2])

    def dropped(self, sender: int) -> bool:
        """Whether ``sender`` is a peer this worker dropped."""
        with self._cond:
            peer = self.peers.get(sender)
            return peer is not None and peer.dropped

    def room(self, sender: int, coordinates: int) -> None:
        """Busy unless ``coordinates`` more from ``sender`` fit in its bound (a message held
        whole is offered part by part only once all of it fits)."""
        with self._cond:
            queued = self._queued_from.get(sender, 0)
            if self.max_queued is not None and queued + coordinates > self.max_queued:
                self.refused_busy += 1
                raise Busy(f"{queued:,} coordinates from worker {sender} wait to be applied "
                           "already; retry")

    # ---------------------------------------------------------------- applying side

    def drain(self) -> list[DecodedDelta]:
        """Everything queued so far, oldest first (the caller applies them in that order)."""
        with self._cond:
            items = list(self._queue)
            self._queue.clear()
            self._queued_from = dict.fromkeys(self._queued_from, 0)
        return items

    def count_refused(self, sender: int) -> None:
        """One more delta of ``sender`` refused for its values."""
        with self._cond:
            self.refused[sender] = self.refused.get(sender, 0) + 1

    def count_applied(self, deltas: list[DecodedDelta]) -> None:
        with self._cond:
            for d in deltas:
                self.peers[d.header.worker_id].applied += 1

    def wait(self, ready: Predicate, timeout: float) -> bool:
        """Block until ``ready(peers)`` holds or ``timeout`` seconds pass; returns ready()."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not ready(self.peers):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def queued(self) -> int:
        """Deltas waiting to be drained."""
        with self._cond:
            return len(self._queue)

    def wake(self) -> None:
        """Wake every waiter so that it re-checks (e.g. after a stop request)."""
        with self._cond:
            self._cond.notify_all()

    def touch(self, worker_id: int) -> None:
        """A sign of life from a peer (heartbeat); StaleOrUnknown if it is not a live peer."""
        with self._cond:
            peer = self.peers.get(worker_id)
            if peer is None:
                raise StaleOrUnknown(f"heartbeat from worker {worker_id}, not a peer of this run")
            if peer.dropped:
                raise dropped_sender("heartbeat", worker_id)
            peer.last_seen = time.monotonic()

    def touch_all(self) -> None:
        """Start every peer's silence clock now (the run starts)."""
        now = time.monotonic()
        with self._cond:
            for peer in self.peers.values():
                peer.last_seen = now

    def silent(self, seconds: float) -> list[int]:
        """Live peers not heard from (delta or heartbeat) for more than ``seconds``."""
        now = time.monotonic()
        with self._cond:
            return [p.worker_id for p in self.peers.values()
                    if not p.settled and now - p.last_seen > seconds]

    def refused_ahead(self) -> list[int]:
        """Live peers whose last delta was refused as labelled too far ahead. A worker waiting
        drops them: it would wait for a round it refused, while the peer, alive (its
        heartbeats come), may wait for this one: neither was ever dropped, and the run
        stalled for good."""
        with self._cond:
            return [p.worker_id for p in self.peers.values()
                    if not p.settled and p.refused_ahead]

    def drop(self, worker_id: int) -> bool:
        """Stop waiting for and accepting deltas from a peer; True if it was live."""
        with self._cond:
            peer = self.peers.get(worker_id)
            if peer is None or peer.dropped:
                return False
            peer.dropped = True
            self._cond.notify_all()
            return True

    def rejoin(self, worker_id: int, address: str, round_: int, since: int = 0) -> None:
        """A peer is back (restarted or resynchronised): live again, its round ``round_`` (or
        ``since``, the round before the first the coordinator starts it at, if later), its
        silence clock started now, its sequence numbers from 1. Its counters go on."""
        with self._cond:
            peer = self.peers.get(worker_id)
            if peer is None:
                raise StaleOrUnknown(f"worker {worker_id} is not a peer of this run")
            peer.address = address
            peer.dropped = False
            peer.final = False
            peer.round = max(round_, since)
            peer.since, peer.refused_ahead = since, False
            peer.last_seen = time.monotonic()
            # Its new incarnation numbers its deltas to us from 1 again.
            self._seen[worker_id] = SequenceTracker()
            self._cond.notify_all()

    def add(self, worker_id: int, address: str) -> None:
        """A new peer (topology tree: a neighbour after a re-attachment), heard from now."""
        with self._cond:
            if worker_id in self.peers:
                return
            self.peers[worker_id] = PeerStatus(worker_id, address, self._rounds_done)
            self._seen[worker_id] = SequenceTracker()
            self._cond.notify_all()

    def snapshot(self) -> dict[int, PeerStatus]:
        """A copy of the peer table (for reports)."""
        with self._cond:
            return {pid: PeerStatus(p.worker_id, p.address, p.round, p.final, p.dropped,
                                    p.last_seen, p.applied, p.since, p.refused_ahead)
                    for pid, p in self.peers.items()}


def dropped_sender(what: str, worker_id: int) -> StaleOrUnknown:
    """The refusal of a message (``what``: delta, heartbeat) from a peer this worker dropped:
    FAILED_PRECONDITION, which tells that peer to register again."""
    return StaleOrUnknown(f"{what} from worker {worker_id}, which was dropped")
