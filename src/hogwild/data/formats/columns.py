"""A table's columns as the encodings read them, whatever the file format, as flat numpy arrays.

Numbers, values, tokens and index/value pairs: the row of each entry and what it holds.

A CSV file is one table (:class:`TableColumns`); a Parquet or Arrow data set is read a row
group at a time and each part's columns are gathered here (:func:`gather`), so the encodings
never see a file format and see the same arrays for the same rows from either.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from hogwild.data.formats.csvtable import (
    F64,
    I64,
    Table,
    categorical_column,
    line_of_row,
    number_lists,
    numeric_column,
    text_tokens,
)
from hogwild.errors import DataError

BOOL = npt.NDArray[np.bool_]
# Feature indices of a sparse pair are int32 in the CSR rows.
MAX_PAIR_INDEX = 2 ** 31 - 2
Values = tuple[list[str], I64, I64]          # distinct values, row of each cell, its value
# Entries in each row; index (an integer dtype) and value (a number dtype) of each, as read.
Pairs = tuple[I64, npt.NDArray[Any], npt.NDArray[Any]]


class Columns(Protocol):
    """The columns of one table (a file, a row group, or a whole data set gathered)."""

    @property
    def path(self) -> str:
        """The file (or data set) the rows come from, for errors."""

    @property
    def n_rows(self) -> int:
        """Number of rows."""

    @property
    def names(self) -> list[str]:
        """Column names in file order."""

    def numeric(self, name: str, required: bool) -> tuple[F64, BOOL]:
        """(values, present); ``required``: no cell may be missing (label, weight)."""

    def categorical(self, name: str) -> Values:
        """Distinct non-empty values (first appearance order), row and value of each cell."""

    def tokens(self, name: str) -> Values:
        """Tokens of a text (lower-cased, split on blanks) or token-list column."""

    def pairs(self, indices: str, values: str) -> Pairs:
        """The entries of a sparse pair of columns (indices, values), checked: how many
        each row holds, and each entry's index and value, row after row."""

    def locate(self, row: int) -> str:
        """Where row ``row`` (0-based) is, for errors: FILE:LINE or FILE, row N."""

    def locator(self) -> Callable[[int], str]:
        """``locate`` without holding the columns' arrays (kept after they are dropped)."""


def check_pairs(cols: Columns, names: tuple[str, str], counts_i: I64,
                index: npt.NDArray[Any], counts_v: I64, values: npt.NDArray[Any]) -> Pairs:
    """The entries of a sparse pair once both lists are read (``counts_*``: list length of
    each row): same length in every row, indices whole numbers in [0, 2**31 - 2]; else a
    DataError naming the row."""
    idx_name, val_name = names
    if not np.array_equal(counts_i, counts_v):
        row = int(np.flatnonzero(counts_i != counts_v)[0])
        raise DataError(f"{cols.locate(row)}: columns {idx_name!r} and {val_name!r} hold "
                        f"{int(counts_i[row])} indices but {int(counts_v[row])} values")
    # Integer lists are kept as they are (int32 stays int32: no copy).
    integer = bool(np.issubdtype(index.dtype, np.integer))
    as_int = index if integer else index.astype(np.int64)
    # min/max first: the common case (all fine) makes no mask of every entry.
    whole = integer or bool(np.array_equal(as_int, index))
    if index.size and not (whole and int(as_int.min()) >= 0
                           and int(as_int.max()) <= MAX_PAIR_INDEX):
        bad = (as_int != index) | (as_int < 0) | (as_int > MAX_PAIR_INDEX)
        at = int(np.flatnonzero(bad)[0])
        raise DataError(f"{cols.locate(row_of(counts_i, at))}: column {idx_name!r}: index "
                        f"{index[at]} is not a whole number in [0, {MAX_PAIR_INDEX}]")
    return counts_i, as_int, values


def row_of(counts: I64, entry: int) -> int:
    """The row of flat entry ``entry`` of lists whose lengths are ``counts``."""
    return int(np.searchsorted(np.cumsum(counts), entry, side="right"))


def pair_rows(counts: I64) -> I64:
    """The row of each entry of lists whose lengths are ``counts``."""
    return np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)


@dataclass
class TableColumns:
    """The columns of a CSV file read whole (:class:`hogwild.data.formats.csvtable.Table`)."""

    table: Table

    @property
    def path(self) -> str:
        return self.table.path

    @property
    def n_rows(self) -> int:
        return self.table.n_rows

    @property
    def names(self) -> list[str]:
        return self.table.header

    def numeric(self, name: str, required: bool) -> tuple[F64, BOOL]:
        return numeric_column(self.table, name, required)

    def categorical(self, name: str) -> Values:
        return categorical_column(self.table, name)

    def tokens(self, name: str) -> Values:
        return text_tokens(self.table, name)

    def pairs(self, indices: str, values: str) -> Pairs:
        counts_i, index = number_lists(self.table, indices)
        counts_v, vals = number_lists(self.table, values)
        return check_pairs(self, (indices, values), counts_i, index, counts_v, vals)

    def locate(self, row: int) -> str:
        return f"{self.table.path}:{line_of_row(self.table, row)}"

    def locator(self) -> Callable[[int], str]:
        return self.locate


# ------------------------------------------------------------------------- gathering


@dataclass(frozen=True)
class Needs:
    """Which columns to read, and as what (numeric: name -> required)."""

    numeric: dict[str, bool] = field(default_factory=dict)
    categorical: frozenset[str] = frozenset()
    tokens: frozenset[str] = frozenset()
    pairs: frozenset[tuple[str, str]] = frozenset()

    def columns(self) -> set[str]:
        """Every column name these needs read."""
        out = set(self.numeric) | self.categorical | self.tokens
        for pair in self.pairs:
            out.update(pair)
        return out


class _ValueParts:
    """One column's values over many parts: one vocabulary, rows shifted to the whole."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.rows: list[I64] = []
        self.which: list[I64] = []

    def add(self, part: Values, base: int) -> None:
        uniq, rows, which = part
        # New values get the next numbers (through C calls: no bytecode per value).
        new = list(itertools.filterfalse(self.index.__contains__, uniq))
        self.index.update(zip(new, itertools.count(len(self.index))))
        pos = np.fromiter(map(self.index.__getitem__, uniq), dtype=np.int64, count=len(uniq))
        self.rows.append(rows + base)
        self.which.append(pos[which])

    def whole(self) -> Values:
        return (list(self.index), _cat(self.rows, np.int64), _cat(self.which, np.int64))


def _cat(parts: Sequence[npt.NDArray[Any]], dtype: type) -> npt.NDArray[Any]:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


class _PairBuffer:
    """One sparse pair's entries over many parts, copied into arrays sized once from the
    format's own count of them (Parquet's value counts: an upper bound), so that the parts
    and their join never live side by side. A part that does not fit (more entries than
    counted, or a wider dtype than the first part's) makes :meth:`add` return False."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.counts: list[I64] = []
        self.index: npt.NDArray[Any] | None = None
        self.values: npt.NDArray[Any] | None = None
        self.used = 0

    def add(self, part: Pairs) -> bool:
        counts, index, values = part
        if self.index is None or self.values is None:
            self.index = np.empty(self.capacity, dtype=index.dtype)
            self.values = np.empty(self.capacity, dtype=values.dtype)
        n = index.shape[0]
        if (self.used + n > self.capacity or np.result_type(self.index, index) != self.index.dtype
                or np.result_type(self.values, values) != self.values.dtype):
            return False
        self.index[self.used:self.used + n] = index
        self.values[self.used:self.used + n] = values
        self.counts.append(counts)
        self.used += n
        return True

    def whole(self) -> Pairs:
        if self.index is None or self.values is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        return (_cat(self.counts, np.int64), self.index[:self.used], self.values[:self.used])


@dataclass
class Gathered:
    """The columns of many parts (row groups, record batches, files) in one, read once."""

    path: str
    names: list[str]
    n_rows: int = 0
    _numeric: dict[str, tuple[list[F64], list[BOOL]]] = field(default_factory=dict)
    _values: dict[tuple[str, str], _ValueParts] = field(default_factory=dict)
    _pairs: dict[tuple[str, str], list[Pairs]] = field(default_factory=dict)
    # Per pair, the entries the format counts (an upper bound): they go into one buffer of
    # that size as they are read (no join), while they fit.
    capacity: dict[tuple[str, str], int] = field(default_factory=dict)
    _buffers: dict[tuple[str, str], _PairBuffer] = field(default_factory=dict)
    _joined: dict[tuple[str, str], Pairs] = field(default_factory=dict)
    # First row and ``locate`` of each part, for errors found after gathering.
    _starts: list[int] = field(default_factory=list)
    _places: list[Callable[[int], str]] = field(default_factory=list)

    def add(self, part: Columns, needs: Needs) -> None:
        """Read what ``needs`` asks of ``part`` (its rows follow those added before)."""
        base = self.n_rows
        for name, required in needs.numeric.items():
            vals, present = part.numeric(name, required)
            store = self._numeric.setdefault(name, ([], []))
            store[0].append(vals)
            store[1].append(present)
        for kind, names in (("categorical", needs.categorical), ("tokens", needs.tokens)):
            for name in sorted(names):
                read = part.categorical(name) if kind == "categorical" else part.tokens(name)
                self._values.setdefault((kind, name), _ValueParts()).add(read, base)
        for pair in sorted(needs.pairs):
            self._add_pairs(pair, part.pairs(*pair))
        self._starts.append(base)
        self._places.append(part.locator())
        self.n_rows += part.n_rows

    def _add_pairs(self, pair: tuple[str, str], read: Pairs) -> None:
        buffer = self._buffers.get(pair)
        if buffer is None and pair in self.capacity and pair not in self._pairs:
            buffer = self._buffers[pair] = _PairBuffer(self.capacity[pair])
        if buffer is not None:
            if buffer.add(read):
                return
            # Past the count (or wider): what is in goes on as one part, the rest as parts.
            self._pairs[pair] = [buffer.whole()]
            del self._buffers[pair]
        # Owned copies: a part may be a view of its reader's buffers (Arrow's), which would
        # keep all of them until the join (and Arrow's pool keeps them after).
        counts, index, values = read
        self._pairs.setdefault(pair, []).append((counts, np.array(index), np.array(values)))

    def numeric(self, name: str, required: bool) -> tuple[F64, BOOL]:
        vals, present = self._numeric[name]
        return _cat(vals, np.float64), _cat(present, np.bool_)

    def categorical(self, name: str) -> Values:
        return self._values[("categorical", name)].whole()

    def tokens(self, name: str) -> Values:
        return self._values[("tokens", name)].whole()

    def pairs(self, indices: str, values: str) -> Pairs:
        key = (indices, values)
        if key not in self._joined and key in self._buffers:
            self._joined[key] = self._buffers.pop(key).whole()
        if key not in self._joined:  # joined once, then the parts are let go
            parts = self._pairs.pop(key, [])
            self._joined[key] = (_cat([p[0] for p in parts], np.int64),
                                 _cat([p[1] for p in parts], np.int64),
                                 _cat([p[2] for p in parts], np.float64))
        return self._joined[key]

    def locate(self, row: int) -> str:
        at = int(np.searchsorted(self._starts, row, side="right")) - 1
        if at < 0:
            return self.path
        return self._places[at](row - self._starts[at])

    def locator(self) -> Callable[[int], str]:
        return self.locate


def gather(parts: Iterable[Columns], needs: Needs, path: str, names: list[str],
           capacity: dict[tuple[str, str], int] | None = None) -> Gathered:
    """Every part's needed columns in one :class:`Gathered` (parts read one at a time);
    ``capacity``: per sparse pair, how many entries the parts hold at most, if known."""
    whole = Gathered(path, names, capacity=dict(capacity or {}))
    for part in parts:
        whole.add(part, needs)
    return whole
