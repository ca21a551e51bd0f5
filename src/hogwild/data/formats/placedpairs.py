"""A Parquet table of one sparse pair (with its label and weight) loaded into shuffled CSR rows directly.

The general path gathers every column of every row group, then encodes and shuffles them
into the CSR arrays: the gathered entries and the shuffled ones live side by side, twice
the rows' size (2M RCV1-shaped rows: 3.9 GB at the peak, where the text loader needs 1.5).
A table that holds a sparse pair alone (the usual layout of sparse rows in Parquet) needs no
encoding but the pair's own: its rows go to their shuffled places as they are read. The
row groups are read twice: one column of the pair for each row's length (with the label
and the weight), then the pair to copy each row into its place. Rows that are not in
canonical order (indices out of order or repeated, which the general path sorts and sums)
send the load back to the general path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.data._threads import KernelThreads, default_threads
from hogwild.data.csr import CSRData
from hogwild.data.formats.columnar import ArrowPart
from hogwild.data.formats.columns import Needs
from hogwild.data.formats.placement import RowTarget
from hogwild.data.hashing.tables import column_mapping, weight_column
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.errors import DataError

I64 = npt.NDArray[np.int64]


def the_pair(needs: Needs, label: str | None, weight: str | None) -> tuple[str, str] | None:
    """The sparse pair of a table that holds nothing else to encode (a label and a weight
    aside), or None."""
    if len(needs.pairs) != 1 or needs.categorical or needs.tokens:
        return None
    if set(needs.numeric) - {label, weight}:
        return None
    return next(iter(needs.pairs))


class _Lengths:
    """What the first pass keeps: each row's list length, label and weight."""

    def __init__(self) -> None:
        self.counts: list[I64] = []
        self.labels: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []
        self.watch = LabelWatch()
        self.rows = 0


def load_placed(parts: Callable[[Iterable[str] | None], Iterable[ArrowPart]],
                pair: tuple[str, str], *, label: str | None,
                weight: str | None, width: int | None, seed: int | None, source: str,
                count_with: str | None = None) -> tuple[CSRData, int] | None:
    """The rows of the table whose parts ``parts(columns)`` yields (a fresh pass each call;
    None: every mapped column), in ``shuffle_order(n_rows, seed)`` (in file order when
    ``seed`` is None): (rows, width); ``width`` None fits it (the largest index + 1). None
    when a row's indices are out of order (the caller takes the general path). DataError
    (naming the row) for bad values, as the general path's.

    The first pass reads one column of the pair (``count_with``, by default the indices;
    the narrower one as stored costs less to decode) with the label and weight: each row's
    list length sizes its slot. The second reads the pair, checks it (each row's indices
    strictly increasing), and copies each row's entries but its zero values (and those
    beyond ``width``) into its slot; slots a dropped entry left short are closed up after.
    What the row groups' decoding used stays in Arrow's pool for the next one: the caller
    gives it back once the load is done."""
    index_name, _ = pair
    count_with = count_with or index_name
    first = _Lengths()
    for part in parts([c for c in (count_with, label, weight) if c is not None]):
        first.counts.append(part.list_lengths(count_with))
        labels = (part.numeric(label, True)[0] if label is not None
                  else np.zeros(part.n_rows))
        first.watch.add(np.asarray(labels, dtype=np.float64), first.rows)
        first.labels.append(labels)
        weights = weight_column(part, weight)
        if weights is not None:
            first.weights.append(weights)
        first.rows += part.n_rows
        del part
    n = first.rows
    # Fitting, the width is the largest index + 1, found as the second pass copies.
    fitting = width is None
    limit = np.iinfo(np.int64).max if width is None else width
    top = -1
    counts = np.concatenate(first.counts) if first.counts else np.zeros(0, dtype=np.int64)
    labels = np.concatenate(first.labels) if first.labels else np.zeros(0)
    threads = default_threads()
    with KernelThreads(threads, "place") as pool:
        target = RowTarget.create(counts, seed, threads, pool.run)
        base = 0
        for part in parts(None):
            raw, index, vals = part.pairs(*pair)
            if not np.array_equal(raw, counts[base:base + part.n_rows]):
                raise DataError(f"{source} changed while it was read (at {part.locate(0)})")
            own = np.zeros(raw.shape[0] + 1, dtype=np.int64)
            np.cumsum(raw, out=own[1:])
            # Zero values and indices beyond the width are left out as the rows are copied; a
            # row out of order sends the load to the general path, which sorts and sums (or
            # names a bad index's row). Checked here rather than in the first pass: one scan
            # of the indices instead of two, and tables in order are the rule.
            if not target.put_pairs(own, index, vals, labels[base:base + part.n_rows], base,
                                    limit, source):
                return None
            if fitting and index.size:
                top = max(top, int(index.max()))
            base += part.n_rows
            del part, index, vals, own
        if base != n:
            raise DataError(f"{source} changed while it was read ({n:,} rows, then {base:,})")
    width = max(top + 1, 1) if fitting else limit
    data = target.finish(width, first.watch.note(source))
    if weight is None:
        return data, width
    weights = np.empty(n, dtype=np.float64)
    weights[target.pos_of] = np.concatenate(first.weights)
    return dataclasses.replace(data, weights=weights), width


def pair_params(pair: tuple[str, str], width: int, *, label: str | None, weight: str | None,
                seed: int) -> dict[str, Any]:
    """The column mapping fitting such a table gives: the pair's features from 0."""
    index, values = pair
    return column_mapping([{"name": index, "kind": "sparse", "indices": index,
                            "values": values, "offset": 0, "width": width}], width,
                          seed=seed, label=label, weight=weight)
