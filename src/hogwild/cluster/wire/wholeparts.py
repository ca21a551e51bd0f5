"""Topology tree: the parts of a delta held until every one is in, so a message counts whole or not at all.

A delta larger than ``chunk_bytes`` travels in parts. In a mesh or a star each part is
applied as it arrives: what a sender that dies mid-message got through is its own work, and
nobody sends it again. In a tree an interior worker's messages carry its subtree's sums, and
when it dies its orphans re-send their own messages to their new parent, which tells the
ones it holds already apart by whole messages (sync: rounds complete; async: the counts a
message carries). Parts of a dead worker's last message applied before it died would then
be summed twice: once in those parts, once in the orphans' re-sends. Held until complete,
a message cut off by its sender's death is never summed, and the re-sends make it up.
"""

from __future__ import annotations

from hogwild.cluster.wire.codec import DecodedDelta
from hogwild.errors import Busy

# Messages of one sender held open at once. Parts of one message are sent one after the
# other, and a sender's next message waits for its previous one's parts: two cover a retry
# overlapping the next message.
OPEN_PER_SENDER = 4


class WholeParts:
    """Parts of multi-part deltas, per (sender, seq), until the last one is in.

    Not thread-safe: the caller holds its own lock (the coordinator's state lock, a
    worker's tree lock)."""

    def __init__(self, open_per_sender: int = OPEN_PER_SENDER) -> None:
        self.open_per_sender = open_per_sender
        self._held: dict[tuple[int, int], dict[int, DecodedDelta]] = {}
        self.discarded = 0  # parts dropped with their sender (it died mid-message)

    def room(self, delta: DecodedDelta) -> None:
        """Busy if ``delta`` would open one message too many for its sender (call before
        recording anything of it)."""
        h = delta.header
        if h.parts <= 1 or (h.worker_id, h.seq) in self._held:
            return
        open_now = sum(1 for sender, _ in self._held if sender == h.worker_id)
        if open_now >= self.open_per_sender:
            raise Busy(f"worker {h.worker_id} has {open_now} messages in parts open already; "
                       "retry")

    def add(self, delta: DecodedDelta) -> list[DecodedDelta] | None:
        """``delta`` itself (one part), or every part of its message in part order once
        this one completes it; None while parts are missing. The caller dropped duplicates
        already, and asked :meth:`room` first."""
        h = delta.header
        if h.parts <= 1:
            return [delta]
        key = (h.worker_id, h.seq)
        parts = self._held.setdefault(key, {})
        parts.setdefault(h.part, delta)
        if len(parts) < h.parts:
            return None
        del self._held[key]
        return [parts[p] for p in range(h.parts)]

    def holds(self, delta: DecodedDelta) -> bool:
        """Whether this very part is held (a retry of it is a duplicate)."""
        parts = self._held.get((delta.header.worker_id, delta.header.seq))
        return parts is not None and delta.header.part in parts

    def forget(self, sender: int) -> None:
        """``sender`` is gone: its unfinished messages are dropped, never summed."""
        for key in [k for k in self._held if k[0] == sender]:
            self.discarded += len(self._held.pop(key))

    def senders(self) -> set[int]:
        """The senders with parts held."""
        return {sender for sender, _ in self._held}

    def held_parts(self) -> int:
        return sum(len(p) for p in self._held.values())
