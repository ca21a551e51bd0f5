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

from hogwild.model.delta_kernels import momentum_step

F64 = npt.NDArray[np.float64]
Index = npt.NDArray[np.int32]
_NOTHING_OWED: F64 = np.zeros(0)  # the kernel's "owed" when nothing is


def block_momentum(workers: int) -> float:
    """The momentum of W contributing workers: 1 - 1/W (0 for one worker: nothing to damp)."""
    return 1.0 - 1.0 / max(1, workers)


# The filter works on the touched coordinates alone while they are fewer than this share of
# the model; past it, in model-sized buffers kept from round to round. Gathering and
# scattering cost more per coordinate than whole-vector arithmetic: on 47,236 features, all
# touched, a sparse round took ~10 ms against 0.7 ms dense; on 2^22 features, 2 % touched,
# 160 ms against 230 ms (bench/NOTES.md; the dense filter is one compiled pass since).
SPARSE_SHARE = 1 / 8


class BlockMomentum:
    """One worker's filter state: its momentum ``v`` and the part of its last term not sent
    yet (compression's residual, float32's rounding), which is owed as it is rather than
    filtered again.

    While the coordinates a round touches (its change, ``v``'s and the owed part's
    non-zeros) are fewer than SPARSE_SHARE of the model, as with hashed features (2^22 and
    more, a small share of them used), both are kept sparse and a round works on those
    coordinates gathered into short arrays: everywhere else the change, the momentum and the
    term are zero, so the dense formula leaves ``w`` as it is there. That costs a byte per
    feature for the round's mask and 12 bytes per touched coordinate, where three
    model-sized float64 buffers cost 24 bytes per feature. Once more are touched the filter
    moves to those buffers for good (until :meth:`clear`), allocated then: the momentum, the
    previous round's and the owed part, and runs as one compiled pass over every weight
    (model.delta_kernels.momentum_step). The arithmetic on each coordinate is the same,
    operation for operation, either way, so the results are bit-identical."""

    def __init__(self) -> None:
        self._dim = 0
        self._dense = False
        # Sparse: the non-zero coordinates (ascending) and values of v and of the owed part.
        self._v_idx: Index | None = None
        self._v_val = np.zeros(0)
        self._owed_idx: Index | None = None
        self._owed_val = np.zeros(0)
        # Dense: v, the owed part, and the round's buffers.
        self._v: F64 | None = None
        self._unsent: F64 | None = None
        self._spare: F64 | None = None    # the previous round's momentum, overwritten next
        self._owed: F64 | None = None     # what unsent points to

    def clear(self) -> None:
        """Forget the momentum (new weights were loaded: a run resumed, a resync)."""
        self._dense = False
        self._v_idx = self._owed_idx = None
        self._v = self._unsent = None
        self._spare = self._owed = None

    @property
    def v(self) -> F64 | None:
        """The momentum as a dense vector (None before the first round)."""
        if self._dense:
            return self._v
        return None if self._v_idx is None else _dense(self._dim, self._v_idx, self._v_val)

    @property
    def unsent(self) -> F64 | None:
        """What is owed from the last round, as a dense vector (None if nothing is)."""
        if self._dense:
            return self._unsent
        if self._owed_idx is None:
            return None
        return _dense(self._dim, self._owed_idx, self._owed_val)

    def filter(self, w: F64, snap: F64, workers: int, final: bool) -> None:
        """Replace this worker's own change in ``w`` (``w - snap``, less what an earlier round
        left unsent) by the term it sends for this round; ``snap`` stays."""
        if self._dim != w.shape[0]:
            self.clear()
            self._dim = int(w.shape[0])
        if self._dense:
            self._filter_dense(w, snap, workers, final)
            return
        # The coordinates that may move: changed (bit for bit, so that a zero's sign
        # change counts as the dense formula would see it), or with momentum or owed.
        mask = _differs(w, snap)
        if self._v_idx is not None:
            mask[self._v_idx] = True
        if self._owed_idx is not None:
            mask[self._owed_idx] = True
        at = np.flatnonzero(mask).astype(np.int32)
        del mask
        if at.shape[0] > SPARSE_SHARE * self._dim:
            self._to_dense()
            self._filter_dense(w, snap, workers, final)
            return
        v_old = np.zeros(at.shape[0])
        if self._v_idx is not None:
            v_old[np.searchsorted(at, self._v_idx)] = self._v_val
        owing = self._owed_idx is not None
        owed = np.zeros(at.shape[0])
        if self._owed_idx is not None:
            owed[np.searchsorted(at, self._owed_idx)] = self._owed_val
        base = snap[at]
        change = np.subtract(w[at], base)
        if owing:
            change -= owed
        eta = block_momentum(workers)
        # v_r = eta v_{r-1} + change / W
        scaled = np.multiply(v_old, eta)
        np.multiply(change, 1.0 / max(1, workers), out=change)
        v_new = np.add(scaled, change)
        # Look-ahead on every round but the last: (1 + eta) v_r - eta v_{r-1}; the last one
        # takes the look-ahead of the round before out: v_F - eta v_{F-1}.
        if final:
            term = np.subtract(v_new, scaled)
        else:
            term = np.multiply(v_new, 1.0 + eta)
            np.subtract(term, scaled, out=term)
        if owing:
            term += owed
        w[at] = np.add(base, term)
        keep = np.flatnonzero(v_new.view(np.int64))
        self._v_idx, self._v_val = at[keep], v_new[keep]

    def _to_dense(self) -> None:
        """Move the sparse state into model-sized vectors (zeros elsewhere, as it was)."""
        if self._v_idx is not None:
            self._v = _dense(self._dim, self._v_idx, self._v_val)
        if self._owed_idx is not None:
            self._owed = _dense(self._dim, self._owed_idx, self._owed_val)
            self._unsent = self._owed
        self._v_idx = self._owed_idx = None
        self._dense = True

    def _filter_dense(self, w: F64, snap: F64, workers: int, final: bool) -> None:
        if self._v is None or self._v.shape != w.shape:
            self._v = np.zeros_like(w)
            self._spare = None
        if self._spare is None or self._spare.shape != w.shape:
            self._spare = np.empty_like(w)
        v_old, v_new = self._v, self._spare
        owed = self._unsent if self._unsent is not None else _NOTHING_OWED
        eta = block_momentum(workers)
        momentum_step(w, snap, v_old, v_new, owed, eta, 1.0 / max(1, workers), final)
        self._v, self._spare = v_new, v_old

    def sent(self, w: F64, snap: F64) -> None:
        """After the delta was built: what compression kept back (and float32 rounded off)
        stays owed as it is."""
        self._dim = int(w.shape[0])
        if self._dense:
            if self._owed is None or self._owed.shape != w.shape:
                self._owed = np.empty_like(w)
            self._unsent = np.subtract(w, snap, out=self._owed)
            return
        at = np.flatnonzero(_differs(w, snap)).astype(np.int32)
        self._owed_idx, self._owed_val = at, np.subtract(w[at], snap[at])


def _differs(a: F64, b: F64) -> npt.NDArray[np.bool_]:
    """Where two float64 vectors differ bit for bit (a byte per coordinate)."""
    return np.not_equal(a.view(np.int64), b.view(np.int64))


def _dense(dim: int, idx: Index, val: F64) -> F64:
    out = np.zeros(dim)
    out[idx] = val
    return out
