"""Each sender's delta against what honest deltas look like: a relative bound, and clipping.

The absolute bound (codec.value_bound) refuses what no run could make; a member may still
send values below it that wreck a model (deltas of 1e5 took a validation loss to 1e6 under a
bound of 2.6e5). Honest deltas of one run are alike in size: every sender runs the same
steps on rows of the same data. So a receiver keeps, per sender, the L2 norms per round of
its last HISTORY accepted deltas, and judges each new delta against the reference: the
median over the senders heard from lately of each one's median. One sender cannot move it
(however often it sends) while most senders are honest. Beyond ``bound`` times it a delta
is refused (RefusedValues, which quarantines its sender); beyond ``clip`` times it (topology
star, the coordinator's robust combine) it is scaled down to that size. Nothing is judged
until MIN_SENDERS senders have been heard from MIN_HISTORY times each: before, the reference
could be the bad sender's own (so a receiver that hears fewer senders, a mesh worker of a
3-worker run, judges nothing; the coordinator hears them all), or rest on the first deltas
after a (re)start, which can be far smaller than the ones after them (a resumed run's
first ones were 1/250 of the next: judged against those, honest workers were refused).

A delta may carry several rounds (queued rounds summed while a link was slow), so its norm
is divided by the rounds since its sender's previous one, at most MAX_SPAN (a sender cannot
buy more headroom than that by the rounds it labels its deltas with). A multi-part delta is
judged part by part: parts of one delta are cut from it, so each is at most its norm. A
sender's final delta may carry what compression held back all run: clipped, not refused.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from hogwild.cluster.wire.codec import DecodedDelta
from hogwild.errors import RefusedValues

HISTORY = 8       # accepted norms kept per sender
MIN_HISTORY = 4   # norms a sender needs before its median counts in the reference
MIN_SENDERS = 3   # senders heard from before any delta is judged
RECENT = 64       # a sender counts in the reference while it sent one of the last this many
MAX_SPAN = 8      # most rounds one delta's norm is divided by


@dataclass
class NormStats:
    """What a watch saw: the largest ratio to the reference it accepted, refusals, clips."""

    peak_ratio: float = 0.0
    refused: int = 0
    clipped: int = 0


@dataclass
class _Sender:
    norms: deque[float]
    median: float = 0.0
    latest: int = 0       # the highest round it labelled a delta with
    previous: int = 0     # the one before
    heard: int = 0        # the watch's count of accepted deltas when it was last heard


class NormWatch:
    """The relative bound of one receiver (thread-safe). ``bound`` and ``clip``: multiples of
    the reference norm per round (0 = off)."""

    def __init__(self, bound: float, clip: float = 0.0, min_senders: int = MIN_SENDERS) -> None:
        self.bound = bound
        self.clip = clip
        self.min_senders = min_senders
        self._senders: dict[int, _Sender] = {}
        self._accepted = 0
        self._lock = threading.Lock()
        self.stats = NormStats()

    @property
    def active(self) -> bool:
        return self.bound > 0 or self.clip > 0

    def _span(self, sender: _Sender, round_: int) -> int:
        """(Lock held.) Rounds a delta of ``sender`` labelled ``round_`` covers, 1..MAX_SPAN."""
        if round_ > sender.latest:
            sender.latest, sender.previous = round_, sender.latest
        return max(1, min(MAX_SPAN, sender.latest - sender.previous))

    def reference(self) -> float:
        """The median over the senders heard from lately of each one's median norm per
        round; 0 while fewer than ``min_senders`` were, MIN_HISTORY times each."""
        with self._lock:
            return self._reference()

    def _reference(self) -> float:
        lately = [s.median for s in self._senders.values()
                  if len(s.norms) >= MIN_HISTORY and self._accepted - s.heard <= RECENT]
        return statistics.median(lately) if len(lately) >= self.min_senders else 0.0

    def check(self, delta: DecodedDelta) -> DecodedDelta:
        """``delta`` if its norm per round is within bounds, scaled down if beyond ``clip``
        times the reference; RefusedValues if beyond ``bound`` times it (nothing kept)."""
        if not self.active:
            return delta
        values = delta.values
        norm = math.sqrt(float(np.dot(values, values)))
        h = delta.header
        with self._lock:
            sender = self._senders.get(h.worker_id)
            if sender is None:
                sender = self._senders[h.worker_id] = _Sender(
                    deque(maxlen=HISTORY), latest=h.round - 1, previous=h.round - 1)
            per_round = norm / self._span(sender, h.round)
            reference = self._reference()
            ratio = per_round / reference if reference > 0 else 0.0
            # A final delta may carry what compression held back over the whole run (its
            # residual): clipped, never refused.
            if self.bound > 0 and ratio > self.bound and not h.final:
                self.stats.refused += 1
                raise RefusedValues(
                    f"delta of norm {per_round:.3g} a round, {ratio:.3g} times the median "
                    f"of {len(self._senders)} senders' recent deltas ({reference:.3g}; at "
                    f"most {self.bound:g} times)")
            clipping = self.clip > 0 and ratio > self.clip
            if per_round > 0:
                # A clipped delta counts at its clipped size: a member cannot drag its own
                # median up with deltas it is not let through whole.
                sender.norms.append(self.clip * reference if clipping else per_round)
                sender.median = float(np.median(sender.norms))
                self._accepted += 1
                sender.heard = self._accepted
            self.stats.peak_ratio = max(self.stats.peak_ratio, ratio)
            if not clipping:
                return delta
            self.stats.clipped += 1
            scale = self.clip / ratio
        clipped = (values.astype(np.float64) * scale).astype(np.float32)
        clipped.flags.writeable = False
        return replace(delta, values=clipped)
