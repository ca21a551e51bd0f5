"""Column encodings of tabular data: one-hot vocabularies, signed k-way hashing, sqrt buckets."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from hogwild.data.formats.columns import Columns, pair_rows
from hogwild.data.formats.csvtable import F64, I64
from hogwild.errors import DataError

DEFAULT_K = 2                  # with buckets=sqrt
DEFAULT_HASHED_K = 1           # with 2**hash_bits buckets: a value rarely shares its bucket
DEFAULT_HASH_BITS = 18
# One-hot up to this many values per column: 65,536 stored strings in model.json and as many
# weights, both small; beyond it the vocabulary itself becomes the cost.
DEFAULT_ONEHOT_MAX = 2 ** 16
BUCKET_RULES = ("bits", "sqrt")
# Values of a hashed or text column kept with its parameters (the most frequent), so that
# `hogwild inspect` can name what a bucket's weight stands for: bounded, as model.json is read
# whole by every predict.
TOP_VALUES = 1000
MAX_K = 4                      # 128 hash bits = four 32-bit slices
MAX_HASH_BITS = 24
SCALES = ("maxabs", "none")


@dataclass(frozen=True)
class HashOptions:
    """What the user asks for (from ``csv:FILE?...``, ``parquet:PATH?...`` or ``hogwild
    hash`` flags): each column's role, and how values become features."""

    label: str | None = None
    categorical: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    numeric: tuple[str, ...] | None = None     # None = every other column
    ignore: tuple[str, ...] = ()
    hash_bits: int | None = None               # None = DEFAULT_HASH_BITS (buckets=bits)
    k: int | None = None                       # None = 1 (buckets=bits) or 2 (buckets=sqrt)
    buckets: str = "bits"                      # bits: 2**hash_bits signed; sqrt: ceil(sqrt(D))
    onehot_max: int = DEFAULT_ONEHOT_MAX
    scale: str = "maxabs"
    sep: str | None = None                     # None = by suffix (.tsv/.tab: tab, else comma)
    seed: int = 0
    weight: str | None = None                  # per-row weights
    sparse: tuple[tuple[str, str], ...] = ()   # (indices, values) list columns
    cross: tuple[tuple[str, ...], ...] = ()    # crossed columns, e.g. (("a", "b"),)

    def __post_init__(self) -> None:
        if self.k is not None and not 1 <= self.k <= MAX_K:
            raise DataError(f"hashing: k must be between 1 and {MAX_K}, got {self.k}")
        if self.buckets not in BUCKET_RULES:
            raise DataError(f"hashing: buckets must be one of {', '.join(BUCKET_RULES)}, got "
                            f"{self.buckets!r}")
        if self.buckets == "sqrt" and self.hash_bits is not None:
            raise DataError("hashing: buckets=sqrt and hash_bits both set (sqrt chooses the "
                            "bucket count itself)")
        if self.hash_bits is not None and not 1 <= self.hash_bits <= MAX_HASH_BITS:
            raise DataError(f"hashing: hash_bits must be between 1 and {MAX_HASH_BITS}, got "
                            f"{self.hash_bits}")
        if self.onehot_max < 0:
            raise DataError(f"hashing: onehot_max must be >= 0, got {self.onehot_max}")
        if self.scale not in SCALES:
            raise DataError(f"hashing: scale must be one of {', '.join(SCALES)}, got "
                            f"{self.scale!r}")
        if self.sep is not None and len(self.sep) != 1:
            raise DataError(f"hashing: sep must be one character, got {self.sep!r}")
        named = [*self.categorical, *self.text, *(self.numeric or ()), *self.ignore,
                 *(c for pair in self.sparse for c in pair)]
        named += [c for c in (self.label, self.weight) if c is not None]
        short = [c for c in self.cross if len(c) < 2]
        if short:
            raise DataError(f"hashing: a cross names two columns or more (a*b), got "
                            f"{'*'.join(short[0])!r}")
        twice = sorted({c for c in named if named.count(c) > 1})
        if twice:
            raise DataError(f"hashing: column(s) {', '.join(twice)} named in two roles")

    def hashed_layout(self, distinct: int) -> tuple[int, int, bool]:
        """(k, buckets per sub-block, signed) of a hashed column of ``distinct`` values."""
        if self.buckets == "sqrt":
            return self.k or DEFAULT_K, sqrt_buckets(distinct), False
        return (self.k or DEFAULT_HASHED_K, 2 ** (self.hash_bits or DEFAULT_HASH_BITS), True)


# ---------------------------------------------------------------------------- hashing


def hash_slices(column: str, values: Sequence[str], seed: int) -> npt.NDArray[np.uint32]:
    """Four independent 32-bit hashes of each value (xxh3-128 of column + '\\x1f' + value),
    shape (len(values), 4): one xxhash call per value, chained through ``map`` (C calls, no
    Python bytecode per value)."""
    keys = map(str.encode, map((column + "\x1f").__add__, values))
    raw = b"".join(map(xxhash.xxh3_128_digest, keys, itertools.repeat(seed)))
    return np.frombuffer(raw, dtype="<u4").reshape(len(values), 4)


def buckets_for(column: str, values: Sequence[str], k: int, buckets: int, seed: int) -> I64:
    """The (len(values), k) bucket of each value in each of the k sub-blocks."""
    words = hash_slices(column, values, seed)[:, :k].astype(np.int64)
    return words % buckets


def signed_buckets_for(column: str, values: Sequence[str], k: int, buckets: int,
                       seed: int) -> tuple[I64, F64]:
    """(bucket, sign) of each value in each of the k sub-blocks, both (len(values), k): the
    sign is the slice's top bit, the bucket comes from its other 31 bits (independent)."""
    words = hash_slices(column, values, seed)[:, :k].astype(np.int64)
    signs = np.where(words >> 31, -1.0, 1.0)
    return (words & 0x7FFFFFFF) % buckets, signs


def sqrt_buckets(distinct: int) -> int:
    """The rule of thumb: about sqrt(D) buckets per sub-block (at least 2)."""
    return max(2, math.ceil(math.sqrt(distinct)))


def top_values(uniq: Sequence[str], which: I64, cap: int = TOP_VALUES) -> list[str]:
    """The ``cap`` most frequent of the values ``uniq`` (``which``: each cell's value index),
    most frequent first (ties in order of first appearance)."""
    counts = np.bincount(which, minlength=len(uniq))
    order = np.argsort(-counts, kind="stable")[:cap]
    return [uniq[i] for i in order.tolist()]


def code_collisions(codes: I64) -> int:
    """Distinct values whose whole k-bucket code equals another value's."""
    if codes.shape[0] == 0:
        return 0
    _, counts = np.unique(codes, axis=0, return_counts=True)
    return int(counts[counts > 1].sum())


# ------------------------------------------------------------------------ column entries


@dataclass
class Block:
    """One column's entries: (row, feature id, value) triples as three arrays."""

    rows: I64
    cols: I64
    vals: F64
    # Set instead of rows when the entries come row after row: row r holds
    # entries indptr[r]:indptr[r + 1].
    indptr: I64 | None = None


def hashed_block(name: str, uniq: Sequence[str], rows: I64, which: I64, offset: int,
                 k: int, buckets: int, seed: int, signed: bool = False) -> tuple[Block, int]:
    """The entries of a hashed (or text) column whose cells hold the values ``uniq[which]``
    in ``rows``, and how many distinct values share their whole code with another."""
    if signed:
        codes, signs = signed_buckets_for(name, uniq, k, buckets, seed)   # (U, k) each
        vals = signs[which].ravel()
    else:
        codes = buckets_for(name, uniq, k, buckets, seed)
        vals = np.ones(which.shape[0] * k, dtype=np.float64)
    sub = offset + np.arange(k, dtype=np.int64) * buckets           # start of each sub-block
    cols = (codes[which] + sub).ravel()
    block = Block(np.repeat(rows, k), cols, vals)
    return block, code_collisions(codes)


def _sparse_block(cols: Columns, spec: dict[str, Any] | Any) -> Block:
    """A sparse pair's entries: feature offset + index (indices beyond the fitted width,
    which no training row had, store nothing)."""
    counts, index, vals = cols.pairs(str(spec["indices"]), str(spec["values"]))
    width = int(spec["width"])
    # Reductions first: the common case (every entry kept) builds no mask.
    if index.size == 0 or (int(index.max()) < width and np.count_nonzero(vals) == vals.size):
        # Rows already in CSR shape: no row index per entry.
        indptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        # int32 as the CSR rows hold them (offset + width fits: they are feature ids); the
        # common case, a table of pairs alone stored as int32, takes no copy.
        offset = int(spec["offset"])
        feats = (index if offset == 0 and index.dtype == np.int32
                 else np.add(index, offset, dtype=np.int32))
        return Block(np.zeros(0, dtype=np.int64), feats, vals, indptr)
    keep = (index < width) & (vals != 0)
    rows = pair_rows(counts)
    return Block(rows[keep], np.add(index[keep], int(spec["offset"]), dtype=np.int64),
                 vals[keep])


def fit_column(cols: Columns, name: str, role: str, offset: int,
               options: HashOptions) -> tuple[dict[str, Any], Block]:
    """The encoding of one column (``role``: numeric, categorical, text, or sparse: the
    index column of a pair) fitted on ``cols``, its features numbered from ``offset``:
    (its parameters, its entries)."""
    if role == "sparse":
        values_of = dict(options.sparse)[name]
        _, index, _ = cols.pairs(name, values_of)
        pair: dict[str, Any] = {"name": name, "kind": "sparse", "indices": name,
                                "values": values_of, "offset": offset,
                                "width": int(index.max()) + 1 if index.size else 1}
        return pair, _sparse_block(cols, pair)
    if role == "numeric":
        values, present = cols.numeric(name, False)
        peak = float(np.max(np.abs(values[present]))) if present.any() else 0.0
        scale = 1.0 / peak if options.scale == "maxabs" and peak > 0 else 1.0
        spec: dict[str, Any] = {"name": name, "kind": "numeric", "offset": offset,
                                "width": 1, "scale": scale}
        rows = np.flatnonzero(present & (values != 0)).astype(np.int64)
        return spec, Block(rows, np.full(rows.shape[0], offset, dtype=np.int64),
                           values[rows] * scale)
    uniq, rows, which = cols.tokens(name) if role == "text" else cols.categorical(name)
    distinct = len(uniq)
    if role == "categorical" and distinct <= options.onehot_max:
        # Sorted vocabulary: the layout does not depend on the order of the rows.
        order = sorted(range(distinct), key=uniq.__getitem__)
        rank = np.empty(distinct, dtype=np.int64)
        rank[order] = np.arange(distinct)
        spec = {"name": name, "kind": "onehot", "offset": offset, "width": distinct,
                "values": [uniq[i] for i in order]}
        return spec, Block(rows, offset + rank[which], np.ones(rows.shape[0], dtype=np.float64))
    k, buckets, signed = options.hashed_layout(distinct)
    block, collided = hashed_block(name, uniq, rows, which, offset, k, buckets, options.seed,
                                   signed)
    spec = {"name": name, "kind": "text" if role == "text" else "hashed",
            "offset": offset, "width": k * buckets, "k": k, "buckets": buckets,
            "signed": signed, "distinct": distinct, "code_collisions": collided,
            "rule": options.buckets}
    if role == "categorical":
        spec["onehot_max"] = options.onehot_max  # why it was not one-hot
    # What the buckets stand for, for `hogwild inspect` (hashes cannot be undone).
    spec["top_values"] = top_values(uniq, which)
    return spec, block


def column_block(cols: Columns, spec: dict[str, Any], seed: int) -> Block:
    """The (row, feature, value) entries of one column under its fitted parameters."""
    name, kind, offset = spec["name"], spec["kind"], int(spec["offset"])
    if kind == "sparse":
        return _sparse_block(cols, spec)
    if kind == "numeric":
        values, present = cols.numeric(name, False)
        rows = np.flatnonzero(present & (values != 0)).astype(np.int64)
        return Block(rows, np.full(rows.shape[0], offset, dtype=np.int64),
                     values[rows] * float(spec.get("scale", 1.0)))
    if kind == "onehot":
        uniq, rows, which = cols.categorical(name)
        vocab = {v: i for i, v in enumerate(spec["values"])}
        pos = np.fromiter(map(vocab.get, uniq, itertools.repeat(-1)), dtype=np.int64,
                          count=len(uniq))
        keep = pos[which] >= 0  # a value unseen at fit time stores nothing
        return Block(rows[keep], offset + pos[which[keep]],
                     np.ones(int(keep.sum()), dtype=np.float64))
    uniq, rows, which = cols.tokens(name) if kind == "text" else cols.categorical(name)
    block, _ = hashed_block(name, uniq, rows, which, offset, int(spec["k"]),
                            int(spec["buckets"]), seed, bool(spec.get("signed", False)))
    return block
