"""Feature hashing of raw CSV/TSV columns (categorical, text, numeric) into CSR rows.

Every column gets its own block of feature ids, so columns never collide with each other:

* ``numeric``: one feature, the value (divided by the column's largest magnitude in the
  fitted data with ``scale=maxabs``, the default: SGD needs comparable scales and dividing
  keeps zeros zero). Empty cells and zeros store nothing.
* ``onehot``: a categorical column with at most ``onehot_max`` (default 65,536) distinct
  values: one feature per value, so a linear model learns every value's own effect (the
  sorted vocabulary is stored; a value unseen at fit time stores nothing, which is what a
  reserved "unknown" feature would hold too: no training row could move its weight).
* ``hashed``: a larger categorical column: k-way split hashing. The block is k sub-blocks of
  B buckets; a value sets one bucket in each sub-block, chosen by k independent 32-bit slices
  of one xxh3-128 hash of ``column + '\\x1f' + value``. By default B = 2**hash_bits
  (hash_bits 18) and k = 1, and the feature is signed (+1 or -1 by the slice's top bit, the
  bucket from its other 31 bits): values that share a bucket then pull its weight in
  opposite directions half the time instead of always adding up. ``buckets=sqrt`` keeps the
  small blocks of earlier versions (unsigned, k = 2, B = ceil(sqrt(D)) for D distinct
  values: k·B weights stand for D values, small enough for an MLP's first layer, but a
  linear model cannot learn per-value effects then). Two values are confused completely
  only when all k buckets agree, which happens to a share 1 - (1 - B**-k)**(D-1) of the
  values: about 63 % for sqrt buckets with k = 2 (B**2 ≈ D), 1-2 % for k = 3 with D in the
  thousands.
* ``text``: whitespace tokens (lower-cased) hashed like ``hashed``, value = count in the cell.

Hashing is vectorised per column: the distinct values are found by one dict built and
queried through ``map`` (each cell gets its value's index with C calls only, no Python
bytecode per cell; as fast as ``np.unique(..., return_inverse=True)`` here, about 20 ms per
50k-cell column, and it keeps the values as Python strings, ready to hash), only the
distinct values are hashed (one xxhash call each), and rows pick their buckets by fancy
indexing. The parameters (layout, vocabularies, bucket counts, scales) are a JSON-ready
dict, stored as ``hashing`` in model.json, so that new data is hashed exactly the same way
(:func:`apply_hashing`).
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import numpy as np
import numpy.typing as npt
import xxhash

from hogwild.data.csr import CSRData
from hogwild.data.labelcheck import LabelWatch
from hogwild.errors import DataError, DataFormatError

FORMAT = "hogwild-hashing"
# 2: hashed columns may be signed (``"signed": true``). Version 1 parameters (no sign) are
# still applied as they were fitted; an older hogwild refuses version 2 rather than drop signs.
VERSION = 2
READABLE_VERSIONS = (1, 2)
HASH = "xxh3_128"
KINDS = ("numeric", "onehot", "hashed", "text")
DEFAULT_K = 2                  # with buckets=sqrt
DEFAULT_HASHED_K = 1           # with 2**hash_bits buckets: a value rarely shares its bucket
DEFAULT_HASH_BITS = 18
# One-hot up to this many values per column: 65,536 stored strings in model.json and as many
# weights, both small; beyond it the vocabulary itself becomes the cost.
DEFAULT_ONEHOT_MAX = 2 ** 16
BUCKET_RULES = ("bits", "sqrt")
# Columns named one per line in `hogwild hash` and the training log; the rest are counted.
SUMMARY_LINES = 24
# Values of a hashed or text column kept with its parameters (the most frequent), so that
# `hogwild inspect` can name what a bucket's weight stands for: bounded, as model.json is read
# whole by every predict.
TOP_VALUES = 1000
# A cell with blanks around its value (searched in the column joined by newlines).
_PADDED = re.compile(r"^\s|\s$", re.MULTILINE)
MAX_K = 4                      # 128 hash bits = four 32-bit slices
MAX_HASH_BITS = 24
SCALES = ("maxabs", "none")
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class HashOptions:
    """What the user asks for (from ``csv:FILE?...`` or ``hogwild hash`` flags)."""

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
        named = [*self.categorical, *self.text, *(self.numeric or ()), *self.ignore]
        if self.label is not None:
            named.append(self.label)
        twice = sorted({c for c in named if named.count(c) > 1})
        if twice:
            raise DataError(f"hashing: column(s) {', '.join(twice)} named in two roles")

    def hashed_layout(self, distinct: int) -> tuple[int, int, bool]:
        """(k, buckets per sub-block, signed) of a hashed column of ``distinct`` values."""
        if self.buckets == "sqrt":
            return self.k or DEFAULT_K, sqrt_buckets(distinct), False
        return (self.k or DEFAULT_HASHED_K, 2 ** (self.hash_bits or DEFAULT_HASH_BITS), True)


@dataclass
class Table:
    """A CSV file as columns of strings (header order), with its row count."""

    path: str
    header: list[str]
    columns: dict[str, tuple[str, ...]]
    n_rows: int
    sep: str
    # File line of each row when known cheaply (files without quotes); else found on error.
    line_numbers: I64 | None = None


def default_sep(path: str | Path) -> str:
    """Tab for .tsv/.tab files (optionally .gz), else comma."""
    name = str(path).lower().removesuffix(".gz")
    return "\t" if name.endswith((".tsv", ".tab")) else ","


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    # utf-8-sig: a byte-order mark (as spreadsheet programs write) is not part of a name.
    return open(path, encoding="utf-8-sig", newline="")


def _record_line(path: Path, sep: str, record: int) -> int:
    """The 1-based file line where data record ``record`` (0-based, header excluded, blank
    lines skipped) starts; only called to name a bad line in an error."""
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter=sep)
        start = 1
        seen = -1
        for row in reader:
            if reader.line_num > 1 and row:
                seen += 1
                if seen == record:
                    return start
            start = reader.line_num + 1
    return start


def _read_text(path: Path) -> str:
    try:
        with _open_text(path) as handle:
            return str(handle.read())
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read as UTF-8 text: {exc}") from None


def read_table(path: str | Path, sep: str | None = None) -> Table:
    """Read a CSV/TSV file with a header line (plain or .gz) into string columns.

    Blank lines are skipped; a record with another number of fields than the header stops
    the load with ``FILE:LINE``. A file without quote characters is split by ``str.split``
    on the whole text (lines, then fields) and the fields are dealt into columns by slicing;
    a file with quotes goes through the csv module, transposed with one ``zip``. Either way
    no Python code runs per row or per cell."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    sep = sep or default_sep(path)
    text = _read_text(path)
    if '"' in text:
        return _read_quoted(path, text, sep)
    lines = text.replace("\r\n", "\n").split("\n")
    header = [h.strip() for h in lines[0].split(sep)] if lines[0] else []
    _check_header(path, header)
    body = lines[1:]
    keep = np.fromiter(map(len, body), dtype=np.int64, count=len(body)) > 0
    line_numbers = np.flatnonzero(keep) + 2
    if not keep.all():
        body = list(itertools.compress(body, keep.tolist()))
    if not body:
        raise DataError(f"{path}: no data rows after the header")
    fields = np.fromiter(map(methodcaller("count", sep), body), dtype=np.int64,
                         count=len(body)) + 1
    bad = np.flatnonzero(fields != len(header))
    if bad.size:
        raise DataFormatError(str(path), int(line_numbers[bad[0]]), f"expected {len(header)} "
                              f"fields (as the header), got {int(fields[bad[0]])}")
    cells = sep.join(body).split(sep)
    width = len(header)
    columns = {name: tuple(cells[j::width]) for j, name in enumerate(header)}
    return Table(str(path), header, columns, len(body), sep, line_numbers)


def _check_header(path: Path, header: list[str]) -> None:
    if not header or header == [""]:
        raise DataError(f"{path}: empty first line (a header line is expected)")
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise DataFormatError(str(path), 1, f"column name(s) {', '.join(dupes)} repeated")


def _read_quoted(path: Path, text: str, sep: str) -> Table:
    try:
        records = list(csv.reader(io.StringIO(text), delimiter=sep))
    except csv.Error as exc:
        raise DataError(f"{path}: cannot read as CSV: {exc}") from None
    header = [h.strip() for h in records[0]] if records else []
    _check_header(path, header)
    body = records[1:]
    lengths = np.fromiter(map(len, body), dtype=np.int64, count=len(body))
    keep = lengths > 0
    bad = np.flatnonzero(keep & (lengths != len(header)))
    if bad.size:
        record = int(bad[0]) - int(np.count_nonzero(~keep[:bad[0]]))
        line = _record_line(path, sep, record)
        raise DataFormatError(str(path), line, f"expected {len(header)} fields (as the header), "
                              f"got {int(lengths[bad[0]])}")
    if not keep.all():
        body = list(itertools.compress(body, keep.tolist()))
    if not body:
        raise DataError(f"{path}: no data rows after the header")
    columns = dict(zip(header, zip(*body)))
    return Table(str(path), header, columns, len(body), sep)


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


# ------------------------------------------------------------------------ columns


def _line_of_row(table: Table, row: int) -> int:
    if table.line_numbers is not None:
        return int(table.line_numbers[row])
    return _record_line(Path(table.path), table.sep, row)


def _numeric(table: Table, name: str, required: bool) -> tuple[F64, npt.NDArray[np.bool_]]:
    """(values, present) of a numeric column (``required``: the label, no cell may be empty);
    a cell that is not a finite number stops the load naming its line."""
    raw = table.columns[name]
    try:  # float() on every cell through map: C calls only, faster than numpy's parser
        values = np.fromiter(map(float, raw), dtype=np.float64, count=table.n_rows)
        present = np.ones(table.n_rows, dtype=bool)
    except ValueError:  # empty cells (missing values) or a bad one
        cells = np.char.strip(np.asarray(raw, dtype=np.str_))
        present = cells != ""
        values = np.zeros(table.n_rows, dtype=np.float64)
        try:
            values[present] = np.fromiter(map(float, cells[present].tolist()),
                                          dtype=np.float64)
        except ValueError:
            values = _numeric_slow(table, name, cells, present, required)
    if required and not present.all():
        row = int(np.flatnonzero(~present)[0])
        raise DataFormatError(str(table.path), _line_of_row(table, row), f"column {name!r} is "
                              "empty")
    finite = np.isfinite(values)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise DataFormatError(str(table.path), _line_of_row(table, row), f"column {name!r}: "
                              f"value {raw[row].strip()!r} is not finite")
    return values, present


def _numeric_slow(table: Table, name: str, cells: npt.NDArray[np.str_],
                  present: npt.NDArray[np.bool_], is_label: bool) -> F64:
    """Find the cell numpy could not parse (error path only) and name its line."""
    for row in np.flatnonzero(present).tolist():
        try:
            float(cells[row])
        except ValueError:
            hint = (" (labels must be numbers)" if is_label
                    else " (list the column in categorical= or text=)")
            raise DataFormatError(str(table.path), _line_of_row(table, row), f"column {name!r}: "
                                  f"{str(cells[row])!r} is not a number{hint}") from None
    raise AssertionError("unreachable: numpy rejected a column every cell of which parses")


def _factorize(cells: Sequence[str]) -> tuple[list[str], I64]:
    """(distinct values in order of first appearance, index of each cell's value): a dict
    built and queried through ``map``, no sorting and no Python bytecode per cell."""
    index = {v: i for i, v in enumerate(dict.fromkeys(cells))}
    which = np.fromiter(map(index.__getitem__, cells), dtype=np.int64, count=len(cells))
    return list(index), which


def _categorical(table: Table, name: str) -> tuple[list[str], I64, I64]:
    """(distinct non-empty values, row of each present cell, index of its value); cells are
    stripped of surrounding blanks, empty ones are missing (no feature)."""
    cells: Sequence[str] = table.columns[name]
    if _PADDED.search("\n".join(cells)):  # strip only columns that need it (one scan)
        cells = list(map(str.strip, cells))
    uniq, which = _factorize(cells)
    if "" in uniq:
        empty = uniq.index("")
        rows = np.flatnonzero(which != empty).astype(np.int64)
        which = which[rows]
        which -= which > empty
        del uniq[empty]
        return uniq, rows, which
    return uniq, np.arange(table.n_rows, dtype=np.int64), which


def _tokens(table: Table, name: str) -> tuple[list[str], I64, I64]:
    """(distinct tokens, row of each token occurrence, index of its token) of a text
    column: whitespace tokens, lower-cased; the whole column is split in one call and each
    row's token count comes from splitting the cells through ``map``."""
    cells = table.columns[name]
    counts = np.fromiter(map(len, map(str.split, cells)), dtype=np.int64, count=len(cells))
    tokens = " ".join(cells).lower().split()
    if len(tokens) != int(counts.sum()):  # lower() changed the spacing of some character
        tokens = " ".join(cells).split()
        tokens = list(map(str.lower, tokens))
    rows = np.repeat(np.arange(len(cells), dtype=np.int64), counts)
    uniq, which = _factorize(tokens)
    return uniq, rows, which


@dataclass
class _Block:
    rows: I64
    cols: I64
    vals: F64


def _hashed_block(name: str, uniq: Sequence[str], rows: I64, which: I64, offset: int,
                  k: int, buckets: int, seed: int, signed: bool = False) -> tuple[_Block, int]:
    if signed:
        codes, signs = signed_buckets_for(name, uniq, k, buckets, seed)   # (U, k) each
        vals = signs[which].ravel()
    else:
        codes = buckets_for(name, uniq, k, buckets, seed)
        vals = np.ones(which.shape[0] * k, dtype=np.float64)
    sub = offset + np.arange(k, dtype=np.int64) * buckets           # start of each sub-block
    cols = (codes[which] + sub).ravel()
    block = _Block(np.repeat(rows, k), cols, vals)
    return block, code_collisions(codes)


def _column_block(table: Table, spec: dict[str, Any], seed: int) -> _Block:
    """The (row, feature, value) entries of one column under its fitted parameters."""
    name, kind, offset = spec["name"], spec["kind"], int(spec["offset"])
    if kind == "numeric":
        values, present = _numeric(table, name, required=False)
        rows = np.flatnonzero(present & (values != 0)).astype(np.int64)
        return _Block(rows, np.full(rows.shape[0], offset, dtype=np.int64),
                      values[rows] * float(spec.get("scale", 1.0)))
    if kind == "onehot":
        uniq, rows, which = _categorical(table, name)
        vocab = {v: i for i, v in enumerate(spec["values"])}
        pos = np.fromiter(map(vocab.get, uniq, itertools.repeat(-1)), dtype=np.int64,
                          count=len(uniq))
        keep = pos[which] >= 0  # a value unseen at fit time stores nothing
        return _Block(rows[keep], offset + pos[which[keep]],
                      np.ones(int(keep.sum()), dtype=np.float64))
    uniq, rows, which = (_tokens(table, name) if kind == "text"
                         else _categorical(table, name))
    block, _ = _hashed_block(name, uniq, rows, which, offset, int(spec["k"]),
                             int(spec["buckets"]), seed, bool(spec.get("signed", False)))
    return block


# ---------------------------------------------------------------------------- fit / apply


def _roles(table: Table, options: HashOptions) -> list[tuple[str, str]]:
    """(column, role) in header order; role is label/categorical/text/numeric/ignore."""
    named = {c: "categorical" for c in options.categorical}
    named.update({c: "text" for c in options.text})
    named.update({c: "ignore" for c in options.ignore})
    if options.numeric is not None:
        named.update({c: "numeric" for c in options.numeric})
    if options.label is not None:
        named[options.label] = "label"
    missing = [c for c in named if c not in table.columns]
    if missing:
        raise DataError(f"{table.path}: no column(s) {', '.join(missing)} (header: "
                        f"{', '.join(table.header)})")
    default = "numeric" if options.numeric is None else "ignore"
    return [(c, named.get(c, default)) for c in table.header]


def fit_hashing(path: str | Path, options: HashOptions) -> tuple[CSRData, dict[str, Any]]:
    """Read a CSV/TSV file, choose each column's encoding, and return its rows and the
    parameters that hash other files the same way."""
    t0 = time.perf_counter()
    data, params = fit_table(read_table(path, options.sep), options)
    params["fit_seconds"] = time.perf_counter() - t0
    return data, params


def fit_table(table: Table, options: HashOptions) -> tuple[CSRData, dict[str, Any]]:
    """:func:`fit_hashing` on a table already read."""
    specs: list[dict[str, Any]] = []
    blocks: list[_Block] = []
    offset = 0
    for name, role in _roles(table, options):
        if role in ("label", "ignore"):
            continue
        if role == "numeric":
            values, present = _numeric(table, name, required=False)
            peak = float(np.max(np.abs(values[present]))) if present.any() else 0.0
            scale = 1.0 / peak if options.scale == "maxabs" and peak > 0 else 1.0
            spec: dict[str, Any] = {"name": name, "kind": "numeric", "offset": offset,
                                    "width": 1, "scale": scale}
            rows = np.flatnonzero(present & (values != 0)).astype(np.int64)
            blocks.append(_Block(rows, np.full(rows.shape[0], offset, dtype=np.int64),
                                 values[rows] * scale))
        else:
            uniq, rows, which = (_tokens(table, name) if role == "text"
                                 else _categorical(table, name))
            distinct = len(uniq)
            if role == "categorical" and distinct <= options.onehot_max:
                # Sorted vocabulary: the layout does not depend on the order of the rows.
                order = sorted(range(distinct), key=uniq.__getitem__)
                rank = np.empty(distinct, dtype=np.int64)
                rank[order] = np.arange(distinct)
                spec = {"name": name, "kind": "onehot", "offset": offset, "width": distinct,
                        "values": [uniq[i] for i in order]}
                blocks.append(_Block(rows, offset + rank[which],
                                     np.ones(rows.shape[0], dtype=np.float64)))
            else:
                k, buckets, signed = options.hashed_layout(distinct)
                block, collided = _hashed_block(name, uniq, rows, which, offset, k, buckets,
                                                options.seed, signed)
                spec = {"name": name, "kind": "text" if role == "text" else "hashed",
                        "offset": offset, "width": k * buckets, "k": k, "buckets": buckets,
                        "signed": signed, "distinct": distinct, "code_collisions": collided,
                        "rule": options.buckets}
                if role == "categorical":
                    spec["onehot_max"] = options.onehot_max  # why it was not one-hot
                # What the buckets stand for, for `hogwild inspect` (hashes cannot be undone).
                spec["top_values"] = top_values(uniq, which)
                blocks.append(block)
        specs.append(spec)
        offset += int(spec["width"])
    labels = (_numeric(table, options.label, required=True)[0] if options.label is not None
              else np.zeros(table.n_rows))
    params = {"format": FORMAT, "version": VERSION, "hash": HASH, "seed": options.seed,
              "label": options.label, "sep": table.sep, "n_features": offset,
              "columns": specs}
    return _assemble(blocks, labels, table.n_rows, offset, table.path), params


def check_params(params: Mapping[str, Any]) -> None:
    """DataError unless ``params`` are hashing parameters this version can apply."""
    if not isinstance(params, Mapping) or params.get("format") != FORMAT:
        raise DataError("not hogwild hashing parameters (format 'hogwild-hashing' expected)")
    if params.get("version") not in READABLE_VERSIONS or params.get("hash") != HASH:
        raise DataError(f"hashing parameters version {params.get('version')} / hash "
                        f"{params.get('hash')} are not supported (expected {VERSION} / {HASH})")
    for col in params.get("columns", []):
        if col.get("kind") not in KINDS:
            raise DataError(f"hashing parameters: column {col.get('name')!r} has unknown kind "
                            f"{col.get('kind')!r}")


def apply_hashing(params: Mapping[str, Any], path: str | Path,
                  sep: str | None = None) -> CSRData:
    """Hash the CSV/TSV file ``path`` (or ``csv:FILE?...``, the query ignored) exactly as the
    data ``params`` were fitted on. Every fitted column must be present; the label column
    may be missing (labels are then NaN, so that nothing is scored against made-up labels)."""
    check_params(params)
    text = str(path)
    if text.startswith("csv:"):
        text = text[4:].partition("?")[0]
    table = read_table(text, sep or _apply_sep(text, params))
    specs = list(params["columns"])
    missing = [c["name"] for c in specs if c["name"] not in table.columns]
    if missing:
        raise DataError(f"{table.path}: no column(s) {', '.join(missing)}, which the model "
                        "was trained on")
    seed = int(params.get("seed", 0))
    blocks = [_column_block(table, spec, seed) for spec in specs]
    label = params.get("label")
    # Without the label column the labels are NaN: no metrics can be computed against them.
    labels = (_numeric(table, label, required=True)[0] if label and label in table.columns
              else np.full(table.n_rows, np.nan))
    return _assemble(blocks, labels, table.n_rows, int(params["n_features"]), table.path)


def _apply_sep(path: str, params: Mapping[str, Any]) -> str:
    """The file's own suffix (.tsv/.tab: tab, .csv: comma) or else the fitted file's sep."""
    name = path.lower().removesuffix(".gz")
    if name.endswith((".tsv", ".tab")):
        return "\t"
    if name.endswith(".csv"):
        return ","
    return str(params.get("sep") or ",")


def _assemble(blocks: Sequence[_Block], labels: F64, n_rows: int, n_features: int,
              source: str | Path) -> CSRData:
    """CSR rows from the blocks' entries (repeated (row, feature) pairs, e.g. a word twice in
    a cell, are summed); labels that float32 changes are noted as the svmlight parser notes
    them (a classifier refuses them)."""
    import scipy.sparse as sp

    rows = np.concatenate([b.rows for b in blocks]) if blocks else np.zeros(0, np.int64)
    cols = np.concatenate([b.cols for b in blocks]) if blocks else np.zeros(0, np.int64)
    vals = np.concatenate([b.vals for b in blocks]) if blocks else np.zeros(0)
    matrix = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, n_features))
    data = CSRData.from_scipy(matrix, labels)
    watch = LabelWatch()
    watch.add(np.asarray(labels, dtype=np.float64), 0)
    note = watch.note(source)
    if note is None:
        return data
    return CSRData(data.indptr, data.indices, data.values, data.labels, data.n_features, note)


# ---------------------------------------------------------------------------- source strings


def names(raw: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in raw.split(",") if c.strip())


_SEPS = {"tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}


def parse_csv_spec(rest: str) -> tuple[str, HashOptions]:
    """``FILE?label=COL&categorical=a,b&text=t&numeric=x,y&ignore=id&hash_bits=B&k=1&
    buckets=bits&onehot_max=65536&scale=maxabs&sep=tab&seed=0`` -> (file, options)."""
    spec = f"csv:{rest}"
    path, _, query = rest.partition("?")
    if not path:
        raise DataError(f"{spec!r}: expected csv:FILE?label=COL&categorical=a,b,...")
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in params:
            raise DataError(f"{spec!r}: parameter {key!r} given twice")
        params[key] = value
    known = {"label", "categorical", "text", "numeric", "ignore", "hash_bits", "k",
             "buckets", "onehot_max", "scale", "sep", "seed"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise DataError(f"{spec!r}: unknown parameter(s) {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(known))})")

    def integer(key: str, default: int | None) -> int | None:
        if key not in params:
            return default
        try:
            return int(params[key])
        except ValueError:
            raise DataError(f"{spec!r}: bad value {params[key]!r} for parameter {key!r}") \
                from None

    sep = params.get("sep")
    if sep is not None:
        sep = _SEPS.get(sep, sep)
    options = HashOptions(
        label=params.get("label") or None,
        categorical=names(params.get("categorical", "")),
        text=names(params.get("text", "")),
        numeric=names(params["numeric"]) if "numeric" in params else None,
        ignore=names(params.get("ignore", "")),
        hash_bits=integer("hash_bits", None), k=integer("k", None),
        buckets=params.get("buckets", "bits"),
        onehot_max=integer("onehot_max", DEFAULT_ONEHOT_MAX) or 0,
        scale=params.get("scale", "maxabs"), sep=sep, seed=integer("seed", 0) or 0)
    return path, options


def load_csv_source(rest: str, hashing: Mapping[str, Any] | None = None,
                    ) -> tuple[CSRData, dict[str, Any]]:
    """A ``csv:`` source: fitted on this file, or hashed with ``hashing`` (the training
    data's parameters, for test data). Returns the rows and the parameters used."""
    path, options = parse_csv_spec(rest)
    if hashing is not None:
        return apply_hashing(hashing, path, options.sep), dict(hashing)
    return fit_hashing(path, options)


def column_summary(params: Mapping[str, Any], first_id: int = 0,
                   limit: int | None = SUMMARY_LINES) -> Iterator[str]:
    """One line per column (the first ``limit``, then one line counting the rest): its
    encoding and why, feature ids (counted from ``first_id``: 1 for the ids an svmlight file
    holds), distinct values and full-code collisions."""
    columns = list(params["columns"])
    shown = columns if limit is None else columns[:limit]
    for col in shown:
        kind = col["kind"]
        first = col["offset"] + first_id
        line = f"  {col['name']}: {kind}, features {first}..{first + col['width'] - 1}"
        if kind == "onehot":
            line += f" ({col['width']:,} values, one feature each)"
        elif kind in ("hashed", "text"):
            share = col["code_collisions"] / max(col["distinct"], 1)
            what = "tokens" if kind == "text" else "values"
            why = (f" > onehot_max {col['onehot_max']:,}" if "onehot_max" in col else "")
            rule = " (sqrt rule)" if col.get("rule") == "sqrt" else ""
            signed = " signed" if col.get("signed") else ""
            line += (f" ({col['distinct']:,} distinct {what}{why} -> {col['k']} x "
                     f"{col['buckets']:,}{signed} buckets{rule}; {col['code_collisions']:,} "
                     f"({100 * share:.2f}%) share their whole code with another)")
        elif kind == "numeric":
            line += f" (scale {col['scale']:.6g})"
        yield line
    if len(shown) < len(columns):
        rest = columns[len(shown):]
        kinds = sorted({c["kind"] for c in rest})
        yield f"  ... and {len(rest):,} more columns ({', '.join(kinds)})"


def onehot_value(params: Mapping[str, Any], feature: int) -> tuple[str, str] | None:
    """(column, value) of a 0-based feature id in a one-hot block, else None: a one-hot
    feature stands for exactly one value of the stored vocabulary."""
    for col in params["columns"]:
        offset = int(col["offset"])
        if col["kind"] == "onehot" and offset <= feature < offset + int(col["width"]):
            return str(col["name"]), str(col["values"][feature - offset])
    return None


def encoding_lines(params: Mapping[str, Any]) -> list[str]:
    """The training log's account of a ``csv:`` source: which encoding each column got
    (bounded as :func:`column_summary`), feature ids 0-based as the model's weights."""
    return ["columns (csv: source, feature ids from 0):",
            *column_summary(params, first_id=0)]
