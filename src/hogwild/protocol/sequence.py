"""Which deltas of one sender were seen, in bounded memory: a high-water mark plus a window.

A sender numbers its deltas 1, 2, 3, ... (``seq``), each cut into ``parts`` messages; it sends
them in order and retries a message until it is acknowledged, so a receiver sees each
(seq, part) in order, possibly twice. The tracker keeps the highest seq below which
everything arrived and, above it, the parts seen of at most ``window`` seqs. A message at or
below the mark, or seen in the window, is a duplicate; one further ahead than the window (a
gap, or a sender squatting on future numbers) is refused.
"""

from __future__ import annotations

from hogwild.errors import InvalidMessage

WINDOW = 8


class SequenceTracker:
    """Dedup and gap check of one sender's (seq, part) messages; not thread-safe (the caller
    holds its own lock)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.complete = 0  # every seq <= complete arrived whole
        self._open: dict[int, tuple[int, set[int]]] = {}  # seq -> (parts, parts seen)

    def admit(self, seq: int, part: int, parts: int) -> bool | None:
        """None for a duplicate; else True if this message completed its seq, False if parts
        of it are still missing. InvalidMessage for a seq beyond the window or a parts count
        that differs from the seq's other parts (nothing is recorded then)."""
        if seq <= self.complete:
            return None
        if seq > self.complete + self.window:
            raise InvalidMessage(
                f"delta seq {seq} is more than {self.window} ahead of this sender's last "
                f"complete delta ({self.complete}): a gap")
        count, seen = self._open.get(seq, (parts, set()))
        if count != parts:
            raise InvalidMessage(f"delta seq {seq} part {part} says {parts} parts, its other "
                                 f"parts said {count}")
        if part in seen:
            return None
        seen.add(part)
        self._open[seq] = (count, seen)
        while True:  # move the mark over every seq now complete
            head = self._open.get(self.complete + 1)
            if head is None or len(head[1]) < head[0]:
                break
            del self._open[self.complete + 1]
            self.complete += 1
        return len(seen) == count

    @property
    def pending(self) -> int:
        """Seqs above the mark with parts recorded (at most ``window``)."""
        return len(self._open)
