"""Delta compression with error feedback: what a round does not send stays in the residual.

A worker's residual is ``w - snap`` (``snap`` = everything it has sent so far). ``build_delta``
emits every changed coordinate and moves ``snap`` by it; :func:`compress_delta` then keeps
only part of that delta (entries at or above a threshold, the k largest, values rounded to
float16) and moves ``snap`` back by exactly what it did not keep, so the dropped part goes out
in a later round once it has grown. Invariant: kept + residual == the uncompressed delta.
Vectorised numpy throughout (one ``argpartition`` for top-k); no loop per entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class Compression:
    """What a round's delta keeps: |value| >= threshold (0 = all), at most topk entries (0 =
    all), values as float16 (``half``) or float32."""

    threshold: float = 0.0
    topk: int = 0
    half: bool = False

    @property
    def active(self) -> bool:
        return self.threshold > 0.0 or self.topk > 0 or self.half


def dense_pays(entries: int, dim: int) -> bool:
    """True when all ``dim`` values take fewer bytes on the wire than ``entries`` (index,
    value) pairs, i.e. more than half the coordinates changed: the delta then travels dense."""
    return 2 * entries > dim


def wire_bytes(entries: int, dim: int, half: bool = False) -> int:
    """The payload bytes of a delta of ``entries`` coordinates of a ``dim``-long model as the
    wire codec sends it: dense (every value) where that is smaller, else int32 indices with
    the values; values are float16 (``half``) or float32."""
    value = 2 if half else 4
    return dim * value if dense_pays(entries, dim) else entries * (4 + value)


def compress_delta(indices: npt.NDArray[np.int32], values: npt.NDArray[np.float32],
                   snap: npt.NDArray[np.float64], how: Compression
                   ) -> tuple[npt.NDArray[np.int32], npt.NDArray[Any]]:
    """The part of a delta to send (ascending indices; float16 or float32 values); ``snap`` is
    moved back by everything not sent, which thereby stays in the residual ``w - snap``.

    ``indices`` must be unique (as build_delta emits them) and ``snap`` already include
    ``values`` (build_delta moved it)."""
    keep: npt.NDArray[np.bool_] | None = None
    magnitude = np.abs(values)
    if how.threshold > 0.0:
        keep = magnitude >= how.threshold
    if how.topk > 0:
        candidates = np.flatnonzero(keep) if keep is not None else None
        count = values.shape[0] if candidates is None else candidates.shape[0]
        if count > how.topk:
            pool = magnitude if candidates is None else magnitude[candidates]
            # The topk largest of the candidates, in no particular order (O(n) selection).
            top = np.argpartition(pool, count - how.topk)[count - how.topk:]
            chosen = top if candidates is None else candidates[top]
            keep = np.zeros(values.shape[0], dtype=np.bool_)
            keep[chosen] = True
    if keep is not None:
        dropped = ~keep
        snap[indices[dropped]] -= values[dropped].astype(np.float64)
        indices, values = indices[keep], values[keep]  # boolean masks keep ascending order
    if not how.half:
        return indices, values
    # Clip to float16's range (the excess stays in the residual, never an infinity on the
    # wire), round, and put the rounding error back into the residual too.
    half = np.clip(values, -F16_MAX, F16_MAX).astype(np.float16)
    rest = values.astype(np.float64) - half.astype(np.float64)
    changed = np.flatnonzero(rest)
    snap[indices[changed]] -= rest[changed]
    nonzero = half != 0  # an entry that rounds to zero is all residual: nothing to send
    return indices[nonzero], half[nonzero]
