"""Which deltas of one sender were seen, in bounded memory: a high-water mark plus a window.

A sender numbers its deltas 1, 2, 3, ... (``seq``), each cut into ``parts`` messages; it sends
them in order and retries a message until it is acknowledged, so a receiver sees each
(seq, part) in order, possibly twice. The tracker keeps the highest seq below which
everything arrived and, above it, of at most ``window`` seqs, how many parts arrived in order
(a count, whatever ``parts`` says) and the few that came early. A message at or below the
mark, or seen in the window, is a duplicate; one further ahead than the window (a gap, or a
sender squatting on future numbers) is refused, and so is an early part beyond
``out_of_order`` of them held at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hogwild.errors import InvalidMessage

WINDOW = 8
# Parts held that arrived before an earlier part of their seq, over the whole window. A
# sender's parts come in order (each one is retried until acknowledged before the next one
# goes), so only a part refused on the way leaves a hole; held as a set of part numbers they
# would let one sender make a receiver keep up to window x parts entries.
OUT_OF_ORDER = 64


@dataclass
class _Open:
    """The parts seen of one seq above the mark."""

    parts: int
    next: int = 0                                       # every part below it arrived
    early: set[int] = field(default_factory=set)        # arrived, above a missing one

    def seen(self, part: int) -> bool:
        return part < self.next or part in self.early

    @property
    def whole(self) -> bool:
        return self.next >= self.parts


class SequenceTracker:
    """Dedup and gap check of one sender's (seq, part) messages; not thread-safe (the caller
    holds its own lock)."""

    def __init__(self, window: int = WINDOW, out_of_order: int = OUT_OF_ORDER) -> None:
        self.window = window
        self.out_of_order = out_of_order
        self.complete = 0  # every seq <= complete arrived whole
        self._open: dict[int, _Open] = {}
        self._early = 0    # parts held in the _Open.early sets

    def admit(self, seq: int, part: int, parts: int) -> bool | None:
        """None for a duplicate; else True if this message completed its seq, False if parts
        of it are still missing. InvalidMessage for a seq beyond the window, a part number
        outside ``parts``, a parts count that differs from the seq's other parts, or an early
        part beyond ``out_of_order`` (nothing is recorded then)."""
        if seq <= self.complete:
            return None
        if seq > self.complete + self.window:
            raise InvalidMessage(
                f"delta seq {seq} is more than {self.window} ahead of this sender's last "
                f"complete delta ({self.complete}): a gap")
        if not 0 <= part < parts:
            raise InvalidMessage(f"delta seq {seq} part {part} of {parts}")
        entry = self._open.get(seq)
        if entry is None:
            entry = _Open(parts)
        elif entry.parts != parts:
            raise InvalidMessage(f"delta seq {seq} part {part} says {parts} parts, its other "
                                 f"parts said {entry.parts}")
        if entry.seen(part):
            return None
        if part == entry.next:
            entry.next += 1
            while entry.next in entry.early:  # the hole is filled: take in what came early
                entry.early.discard(entry.next)
                self._early -= 1
                entry.next += 1
        else:
            if self._early >= self.out_of_order:
                raise InvalidMessage(
                    f"delta seq {seq} part {part}: more than {self.out_of_order} parts of "
                    "this sender arrived before an earlier part")
            entry.early.add(part)
            self._early += 1
        self._open[seq] = entry
        while True:  # move the mark over every seq now complete
            head = self._open.get(self.complete + 1)
            if head is None or not head.whole:
                break
            del self._open[self.complete + 1]
            self.complete += 1
        return entry.whole

    def seen(self, seq: int, part: int) -> bool:
        """Whether (seq, part) arrived already (admit would call it a duplicate)."""
        if seq <= self.complete:
            return True
        entry = self._open.get(seq)
        return entry is not None and entry.seen(part)

    @property
    def pending(self) -> int:
        """Seqs above the mark with parts recorded (at most ``window``)."""
        return len(self._open)

    @property
    def held(self) -> int:
        """Entries kept for the open seqs: one per seq, plus the parts that came early."""
        return len(self._open) + self._early
