"""One worker's weights and the arithmetic of its rounds: apply, average, build, compress.

A worker's model is ``w`` (written by its training threads without a lock) and ``snap``,
what its peers and the coordinator already hold of it: ``w - snap`` is the worker's own
change not yet sent. At a round boundary :meth:`RoundEngine.build` turns that change into
the delta to send (the averaged part cut to 1/W first, see ``averaging``, or the whole change
filtered by block momentum with ``combine: momentum``, see ``momentum``; compression keeps
the rest in the residual); :meth:`RoundEngine.apply` adds what arrived from others to both,
so it is never sent back. The engine knows no transport, no threads and no clock: the
cluster's worker calls it under its exchange lock, the simulator calls it from one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
import numpy.typing as npt

from hogwild.engine.averaging import OwnAverage
from hogwild.engine.momentum import BlockMomentum
from hogwild.engine.rules import ExchangeRules, PeerView, contributing
from hogwild.errors import InvalidMessage
from hogwild.model import kernels
from hogwild.model.compression import compress_delta
from hogwild.model.evaluation import is_finite

Indices = npt.NDArray[np.int32]
Values = npt.NDArray[np.float32]
Peers = Callable[[], Mapping[int, PeerView]]


class ModelNotFinite(Exception):
    """The worker's weights (or its delta in float32) are no longer finite: never sent on."""


class RoundEngine:
    """The exchange arithmetic of one worker (not thread-safe: one caller at a time)."""

    def __init__(self, rules: ExchangeRules, w: npt.NDArray[np.float64]) -> None:
        self.rules = rules
        self.w = w
        self.snap = w.copy()
        self.averaging = OwnAverage()  # own changes to the averaged part, cut to 1/W
        self.momentum = BlockMomentum()  # combine momentum: the filter of own changes
        # build_delta's output buffers, kept from round to round: two model-sized arrays
        # allocated (and page-faulted in) every round cost more than the kernel itself
        # on a sparse delta. What build returns is a copy of the part used.
        self._idx = np.empty(0, dtype=np.int32)
        self._val = np.empty(0, dtype=np.float32)

    def load(self, weights: npt.NDArray[np.float64]) -> None:
        """Start from ``weights`` (a run under way): nobody's new update, so no delta is
        built from them, and nothing is owed on earlier rounds."""
        self.w[:] = weights
        self.snap[:] = weights
        self.averaging.clear()
        self.momentum.clear()

    def apply(self, deltas: Iterable[tuple[Indices, Values]]) -> int:
        """Add others' deltas to ``w`` and ``snap``; returns how many were applied.

        The kernel re-checks lengths and bounds; the decoder already did, so a refusal here
        is a bug, raised rather than ignored."""
        count = 0
        for indices, values in deltas:
            result = kernels.apply_delta(self.w, self.snap, indices, values)
            if result != 0:
                raise InvalidMessage(f"delta rejected by apply_delta ({result})")
            count += 1
        return count

    def settle(self, peers: Mapping[int, PeerView]) -> None:
        """Take out the part of own deferred rounds that every live peer has caught up with."""
        if self.averaging.deferred:
            self.averaging.settle(self.w, self.snap, peers)

    def build(self, round_: int, final: bool, peers: Peers) -> tuple[Indices, Values]:
        """The delta of own changes to send for ``round_`` (everything, in float32, when
        ``final``); ``snap`` moves by exactly what is returned. Raises ModelNotFinite."""
        rules = self.rules
        deferring = rules.defers and not final
        if not deferring:
            # The final delta settles everything: the model then ends as its peers' do.
            view = peers()  # one copy of the peer table for both
            if rules.combine == "momentum":
                self.momentum.filter(self.w, self.snap, contributing(rules, view), final)
            else:
                self.averaging.settle(self.w, self.snap, view, everything=True)
                self.averaging.cut(rules, self.w, self.snap, view)
        # O(dim), like build_delta: a diverged model is reported, never sent on.
        if not is_finite(self.w):
            raise ModelNotFinite("the weights are no longer finite")
        if self._idx.size < self.w.size:
            self._idx = np.empty(self.w.size, dtype=np.int32)
            self._val = np.empty(self.w.size, dtype=np.float32)
        idx, val = self._idx, self._val
        n = int(kernels.build_delta(self.w, self.snap, idx, val))
        if n < 0:
            raise InvalidMessage("build_delta: buffers shorter than the model")
        if not np.isfinite(val[:n]).all():  # finite in float64, beyond float32's range
            raise ModelNotFinite("a weight change overflows float32")
        sent_idx, sent_val = self.compress(idx[:n], val[:n], final)
        # Compression returns new arrays; what still points into the buffers is copied.
        if np.may_share_memory(sent_idx, idx):
            sent_idx = sent_idx.copy()
        if np.may_share_memory(sent_val, val):
            sent_val = sent_val.copy()
        if rules.combine == "momentum":
            self.momentum.sent(self.w, self.snap)
        if deferring:
            self.averaging.defer(rules, round_, sent_idx, sent_val, self.w, self.snap, peers())
        return sent_idx, sent_val

    def compress(self, idx: Indices, val: Values, final: bool) -> tuple[Indices, Values]:
        """The part of this round's delta to send (delta_threshold / delta_topk /
        delta_dtype); the rest stays in the residual. The final delta sends everything, in
        float32, so that every model ends with the same sum."""
        if final or not self.rules.compression.active:
            return idx, val
        return compress_delta(idx, val, self.snap, self.rules.compression)
