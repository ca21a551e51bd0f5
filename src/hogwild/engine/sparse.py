"""Sparse vectors as (ascending int32 indices, values): the sums relays and senders keep."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def merge_sparse(idx_a: npt.NDArray[np.int32], val_a: npt.NDArray[np.floating[Any]],
                 idx_b: npt.NDArray[np.int32], val_b: npt.NDArray[np.floating[Any]]
                 ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]:
    """The sum of two sparse vectors as (ascending unique indices, float64 values), vectorised:
    one stable sort of both index lists, then a segmented sum over equal indices."""
    idx = np.concatenate((idx_a, idx_b)).astype(np.int32, copy=False)
    val = np.concatenate((np.asarray(val_a, dtype=np.float64),
                          np.asarray(val_b, dtype=np.float64)))
    if idx.shape[0] == 0:
        return idx, val
    order = np.argsort(idx, kind="stable")
    idx, val = idx[order], val[order]
    starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
    sums = np.add.reduceat(val, starts)
    keep = sums != 0.0
    return idx[starts][keep], sums[keep]


def sum_sparse(parts: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.floating[Any]]]]
               ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]:
    """The sum of several sparse vectors at once: one dense accumulation (bincount) over the
    largest index, O(entries + that index); pairwise merge_sparse would sort the growing sum
    once per part."""
    if len(parts) == 1:
        return parts[0][0], np.asarray(parts[0][1], dtype=np.float64)
    idx = np.concatenate([p[0] for p in parts])
    if idx.shape[0] == 0:
        return idx.astype(np.int32), np.zeros(0)
    val = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in parts])
    dense: npt.NDArray[np.float64] = np.bincount(idx, weights=val).astype(np.float64)
    nz = np.flatnonzero(dense)
    return nz.astype(np.int32), dense[nz]
