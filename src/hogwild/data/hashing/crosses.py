"""Feature crosses (``cross=a*b``, Vowpal Wabbit's ``-q``), hashed into a block of their own.

Each feature of one column times each feature of another in the same row.

A value of an operand column hashes to 64 bits (two slices of the xxh3-128 hash that column
hashing uses); a crossed feature's hash folds its operands' hashes in order (a multiply, an
add and the splitmix64 finaliser, all numpy ``uint64`` arithmetic over every entry at once),
so ``a*b`` and ``b*a`` differ and ``a*b*c`` is ``(a*b)*c``. The low bits choose the bucket of
``2**hash_bits`` (18 by default), the top bit the sign; the value is the product of the
operands' values (1 for a categorical value or a token, the scaled number of a numeric
column, the value of a sparse pair's entry). The most frequent crossed values are kept with
the parameters so that ``hogwild inspect`` can name a bucket, as for hashed columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.data.formats.columns import Columns, pair_rows
from hogwild.data.formats.csvtable import F64, I64
from hogwild.data.transform.encodings import hash_slices
from hogwild.errors import DataError

U64 = npt.NDArray[np.uint64]
# Operand columns by their fitted kind (one-hot, hashed, text, numeric, sparse pair).
OPERAND_KINDS = ("numeric", "onehot", "hashed", "text", "sparse")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def value_hashes(column: str, values: Sequence[str], seed: int) -> U64:
    """The 64-bit hash of each value of ``column`` (two slices of its xxh3-128 hash)."""
    words = hash_slices(column, values, seed).astype(np.uint64)
    return words[:, 0] | (words[:, 1] << np.uint64(32))


def fold(left: U64, right: U64) -> U64:
    """The hash of a crossed value from its operands' hashes (order matters)."""
    x = left * _GOLDEN + right      # uint64 arrays wrap on overflow, as intended
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


def bucket_and_sign(hashes: U64, buckets: int) -> tuple[I64, F64]:
    """(bucket, sign) of crossed hashes: low bits (``buckets`` is a power of two), top bit."""
    codes = (hashes & np.uint64(buckets - 1)).astype(np.int64)
    signs = np.where(hashes >> np.uint64(63), -1.0, 1.0)
    return codes, signs


class _Entries:
    """A (possibly crossed) column's entries: row, hash, value, and each operand's value."""

    def __init__(self, rows: I64, hashes: U64, vals: F64, uniq: list[list[str]],
                 which: list[I64]) -> None:
        self.rows, self.hashes, self.vals, self.uniq, self.which = rows, hashes, vals, uniq, which


def _operand(cols: Columns, spec: Mapping[str, Any], seed: int) -> _Entries:
    name, kind = str(spec["name"]), spec["kind"]
    if kind == "numeric":
        values, present = cols.numeric(name, False)
        rows = np.flatnonzero(present & (values != 0)).astype(np.int64)
        uniq, which = [""], np.zeros(rows.shape[0], dtype=np.int64)
        vals = values[rows] * float(spec.get("scale", 1.0))
    elif kind == "sparse":
        counts, index, raw = cols.pairs(str(spec["indices"]), str(spec["values"]))
        rows, vals = pair_rows(counts), np.asarray(raw, dtype=np.float64)
        distinct, which = np.unique(index, return_inverse=True)
        uniq = list(map(str, distinct.tolist()))
    else:
        uniq, rows, which = cols.tokens(name) if kind == "text" else cols.categorical(name)
        vals = np.ones(rows.shape[0], dtype=np.float64)
    if rows.size > 1 and (np.diff(rows) < 0).any():
        order = np.argsort(rows, kind="stable")
        rows, which, vals = rows[order], which[order], vals[order]
    hashes = value_hashes(name, uniq, seed)[which]
    return _Entries(rows, hashes, vals, [uniq], [which])


def _cross(left: _Entries, right: _Entries, n_rows: int) -> _Entries:
    """Every pair of a left and a right entry of the same row (rows ascending on both)."""
    counts = np.bincount(right.rows, minlength=n_rows)
    starts = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    reps = counts[left.rows]
    li = np.repeat(np.arange(left.rows.shape[0], dtype=np.int64), reps)
    first = np.cumsum(reps) - reps
    ri = starts[left.rows][li] + (np.arange(li.shape[0], dtype=np.int64) - first[li])
    return _Entries(left.rows[li], fold(left.hashes[li], right.hashes[ri]),
                    left.vals[li] * right.vals[ri], left.uniq + right.uniq,
                    [w[li] for w in left.which] + [w[ri] for w in right.which])


def operand_specs(names: Sequence[str], specs: Sequence[Mapping[str, Any]],
                  cross: str) -> list[Mapping[str, Any]]:
    """The fitted specs of a cross's operand columns; DataError if one is not a feature."""
    by_name = {str(s["name"]): s for s in specs}
    by_name.update({str(s["indices"]): s for s in specs if s.get("kind") == "sparse"})
    out = []
    for name in names:
        spec = by_name.get(name)
        if spec is None or spec.get("kind") not in OPERAND_KINDS:
            raise DataError(f"cross={cross}: column {name!r} is not a feature column (name "
                            "a numeric, categorical, text or sparse index column)")
        out.append(spec)
    return out


def _entries(cols: Columns, operands: Sequence[Mapping[str, Any]], seed: int) -> _Entries:
    entries = _operand(cols, operands[0], seed)
    for spec in operands[1:]:
        entries = _cross(entries, _operand(cols, spec, seed), cols.n_rows)
    return entries


def fit_cross(cols: Columns, names: Sequence[str], specs: Sequence[Mapping[str, Any]],
              offset: int, hash_bits: int, seed: int, top: int,
              ) -> tuple[dict[str, Any], tuple[I64, I64, F64]]:
    """A cross's parameters and its (row, feature, value) entries, from ``offset``."""
    label = "*".join(names)
    operands = operand_specs(names, specs, label)
    entries = _entries(cols, operands, seed)
    buckets = 2 ** hash_bits
    codes, signs = bucket_and_sign(entries.hashes, buckets)
    distinct, first, counts = np.unique(entries.hashes, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))[:top]  # most frequent first, ties as they came
    picked = first[order]
    top_values = [list(t) for t in zip(*(
        [uniq[i] for i in which[picked].tolist()]
        for uniq, which in zip(entries.uniq, entries.which)))] if picked.size else []
    spec = {"name": label, "kind": "cross", "columns": list(names), "offset": offset,
            "width": buckets, "k": 1, "buckets": buckets, "signed": True,
            "distinct": int(distinct.shape[0]), "code_collisions": 0,
            "top_values": top_values}
    return spec, (entries.rows, offset + codes, entries.vals * signs)


def apply_cross(cols: Columns, spec: Mapping[str, Any], specs: Sequence[Mapping[str, Any]],
                seed: int) -> tuple[I64, I64, F64]:
    """The (row, feature, value) entries of a fitted cross."""
    names = [str(n) for n in spec["columns"]]
    entries = _entries(cols, operand_specs(names, specs, str(spec["name"])), seed)
    codes, signs = bucket_and_sign(entries.hashes, int(spec["buckets"]))
    return entries.rows, int(spec["offset"]) + codes, entries.vals * signs


def tuple_buckets(names: Sequence[str], tuples: Sequence[Sequence[str]], buckets: int,
                  seed: int) -> tuple[I64, F64]:
    """(bucket, sign) of crossed values given as one value per operand (for ``inspect``)."""
    if not tuples:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    hashes = value_hashes(names[0], [t[0] for t in tuples], seed)
    for i, name in enumerate(names[1:], start=1):
        hashes = fold(hashes, value_hashes(name, [t[i] for t in tuples], seed))
    return bucket_and_sign(hashes, buckets)
