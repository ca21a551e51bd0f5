"""Own changes shared as an average, not a sum: the bias (and the MLP's dense layers; every
weight with ``combine: average``) is cut to 1/W before a worker sends its delta.

Every example of every worker touches the bias, so in one round each worker's bias change is
a full correction towards the same balance point; summing the changes of the W contributing
workers overshoots W-fold and the bias oscillates (measured: synthetic RCV1-like data, 2
workers, sync rounds of 8,750 examples, test accuracy 0.63 instead of 0.88). Averaging them
is stable at any round size, in both modes. Sparse feature weights, each touched by a few
examples per round, keep the plain sum. The same holds for every parameter of the MLP after
its first layer (the dense layers and b1, all touched by every example): they are averaged,
W1's rows are summed (``ExchangeRules.averaged_from``, the spec's ``shared_from``, is where the averaged part starts). With
``combine: average`` every weight is averaged: periodic model averaging, which stays stable
with rounds far larger than summing tolerates (see engine.round_size.choose_round_size).

The change is made in ``w`` itself before the delta is built, so a worker, its peers and the
coordinator add the same value. A worker runs all of it on its exchange thread, under its
exchange lock (round.RoundEngine).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from hogwild.engine.rules import ExchangeRules, PeerView, contributing
from hogwild.errors import InvalidMessage
from hogwild.model import kernels

# Async mesh: own rounds whose averaged part is kept in full until the peers' deltas of the
# same round arrive (OwnAverage.defer); beyond this many the oldest is settled anyway.
MAX_DEFERRED_ROUNDS = 4


class OwnAverage:
    """The averaging of one worker's own changes, and the rounds it still owes a cut."""

    def __init__(self) -> None:
        # Async mesh: (round, indices, -(part kept beyond 1/W), float64 rounding) of own
        # rounds sent averaged but still held in full in w (see defer).
        self.deferred: deque[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = deque()

    def clear(self) -> None:
        """Forget the deferred rounds (new weights were loaded: nothing is owed on them)."""
        self.deferred.clear()

    def cut(self, rules: ExchangeRules, w: np.ndarray, snap: np.ndarray,
            peers: Mapping[int, PeerView]) -> None:
        """Keep 1/W of this round's own change to the averaged part, in ``w`` (W: the
        contributing workers).

        (In async mode a training thread may update the bias during this read-modify-write
        and lose that one step, as any two Hogwild threads may.)
        """
        workers = contributing(rules, peers)
        if workers <= 1:
            return
        if kernels.cut_changes(w, snap, rules.averaged_from, 1.0 - 1.0 / workers) < 0:
            raise InvalidMessage("averaging own changes: snapshot shorter than the model")

    def defer(self, rules: ExchangeRules, round_: int, idx: np.ndarray, val: np.ndarray,
              w: np.ndarray, snap: np.ndarray, peers: Mapping[int, PeerView]) -> None:
        """Async mesh: send 1/W of the averaged part of this round's change but keep all of
        it in ``w`` until every live peer's delta of the same round has arrived, then take
        the rest out (settle). ``val`` (what is sent) is scaled in place.

        The sync way (cut ``w`` to 1/W at once) leaves an async worker training from a model
        that lacks (W-1)/W of its own round until its peers' deltas arrive, a round later or
        more when the exchange takes as long as a round: an async run needed 1.2-1.9 epochs
        where a sync one needed 0.95. Kept in full meanwhile, the worker trains on its own
        progress, and once settled its model is what its peers and the coordinator add up.
        """
        workers = contributing(rules, peers)
        if workers <= 1:
            return
        k = int(np.searchsorted(idx, rules.averaged_from))  # ascending: the tail is averaged
        if k >= idx.size:
            return
        full = val[k:].astype(np.float64)
        val[k:] = (full / workers).astype(np.float32)
        kept = full - val[k:].astype(np.float64)  # exact: a difference of two float32 values
        kept32 = kept.astype(np.float32)
        rounding = kept - kept32.astype(np.float64)  # all zero when W is a power of two
        self.deferred.append((round_, idx[k:].copy(), -kept32, rounding))
        if len(self.deferred) > MAX_DEFERRED_ROUNDS:
            self.settle(w, snap, peers)

    def settle(self, w: np.ndarray, snap: np.ndarray, peers: Mapping[int, PeerView],
               everything: bool = False) -> None:
        """Take out of ``w`` the part of own deferred rounds that was not sent, for every
        round all live peers have also sent (all of them with ``everything``, and the oldest
        beyond MAX_DEFERRED_ROUNDS)."""
        if not self.deferred:
            return
        rounds = [p.round for p in peers.values() if not p.settled]
        caught_up = min(rounds) if rounds else None
        while self.deferred:
            round_, idx, minus, rounding = self.deferred[0]
            if not (everything or caught_up is None or caught_up >= round_
                    or len(self.deferred) > MAX_DEFERRED_ROUNDS):
                return
            self.deferred.popleft()
            # w and snap both move, so w - snap (own changes not sent yet) is untouched and
            # w ends on what was sent, exactly: the float32 part, then what float32 lost.
            if kernels.apply_delta(w, snap, idx, minus) != 0:
                raise InvalidMessage("settling a deferred average: indices outside the model")
            lost = np.flatnonzero(rounding)
            if lost.size:
                w[idx[lost]] -= rounding[lost]
                snap[idx[lost]] -= rounding[lost]
