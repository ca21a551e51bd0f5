"""Block momentum: each worker's own round change, averaged and filtered before it is sent.

``combine: momentum`` is blockwise model-update filtering (BMUF; Chen and Huo, ICASSP 2016)
with Nesterov's look-ahead, taken apart per worker. BMUF keeps long rounds (a quarter epoch
and more) and still converges like summing: the W workers' round changes are averaged,
``g_r = (1/W) sum_i d_i``, and the global model moves by a momentum over those averages,
``v_r = eta v_{r-1} + g_r`` with ``eta = 1 - 1/W``, so that in a steady state it moves W
times the average (the sum) while a single round's overshoot is damped. Workers start the
next round from the look-ahead ``w_r + eta v_r``.

Everything there is linear in the workers' changes, so it splits into one filter per worker:
``v_{i,r} = eta v_{i,r-1} + d_{i,r} / W`` and the look-ahead model moves by
``sum_i ((1 + eta) v_{i,r} - eta v_{i,r-1})``. Each worker sends its own term and everyone
adds what arrives, exactly as with ``combine: sum``: no extra message, no global step, and
the same code for sync and async, mesh, star and tree (whose relays only ever add). The
final round sends ``v_{i,F} - eta v_{i,F-1}``, which takes the look-ahead out again, so the
coordinator's model ends on ``w_F`` itself.

Measured in the simulator on 2M RCV1-shaped rows (engine/simulate.py, bench/NOTES.md):
8 workers reached the one-worker accuracy in 0.95 epochs with rounds of a quarter epoch,
where summed deltas took 2.4 epochs (overshooting) and plain averaging never got there.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def block_momentum(workers: int) -> float:
    """The momentum of W contributing workers: 1 - 1/W (0 for one worker: nothing to damp)."""
    return 1.0 - 1.0 / max(1, workers)


class BlockMomentum:
    """One worker's filter state: its momentum ``v`` and the part of its last term not sent
    yet (compression's residual), which is owed as it is rather than filtered again.

    Every round works in the same four model-sized buffers (the momentum, the previous
    round's, two temporaries), allocated on the first round: the filter used to allocate
    seven arrays of the model's size a round, each a fresh mapping the kernel zero-fills.
    The arithmetic is the same, operation for operation, so the results are bit-identical."""

    def __init__(self) -> None:
        self.v: F64 | None = None
        self.unsent: F64 | None = None
        self._spare: F64 | None = None    # the previous round's momentum, overwritten next
        self._change: F64 | None = None   # the change, then the term sent
        self._scaled: F64 | None = None   # eta * v_{r-1}
        self._owed: F64 | None = None     # what unsent points to

    def clear(self) -> None:
        """Forget the momentum (new weights were loaded: a run resumed, a resync)."""
        self.v = None
        self.unsent = None

    def _buffers(self, w: F64) -> tuple[F64, F64, F64, F64]:
        if self.v is None or self.v.shape != w.shape:
            self.v = np.zeros_like(w)
            self._spare = None
        if self._spare is None or self._spare.shape != w.shape:
            self._spare = np.empty_like(w)
            self._change = np.empty_like(w)
            self._scaled = np.empty_like(w)
        assert self._change is not None and self._scaled is not None
        return self.v, self._spare, self._change, self._scaled

    def filter(self, w: F64, snap: F64, workers: int, final: bool) -> None:
        """Replace this worker's own change in ``w`` (``w - snap``, less what an earlier round
        left unsent) by the term it sends for this round; ``snap`` stays."""
        v_old, v_new, term, scaled = self._buffers(w)
        owed = self.unsent
        change = np.subtract(w, snap, out=term)
        if owed is not None:
            change -= owed
        eta = block_momentum(workers)
        # v_r = eta v_{r-1} + change / W
        np.multiply(v_old, eta, out=scaled)
        np.multiply(change, 1.0 / max(1, workers), out=change)
        np.add(scaled, change, out=v_new)
        # Look-ahead on every round but the last: (1 + eta) v_r - eta v_{r-1}; the last one
        # takes the look-ahead of the round before out: v_F - eta v_{F-1}.
        if final:
            np.subtract(v_new, scaled, out=term)
        else:
            np.multiply(v_new, 1.0 + eta, out=term)
            np.subtract(term, scaled, out=term)
        if owed is not None:
            term += owed
        np.add(snap, term, out=w)
        self.v, self._spare = v_new, v_old

    def sent(self, w: F64, snap: F64) -> None:
        """After the delta was built: what compression kept back (and float32 rounded off)
        stays owed as it is."""
        if self._owed is None or self._owed.shape != w.shape:
            self._owed = np.empty_like(w)
        self.unsent = np.subtract(w, snap, out=self._owed)
