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

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.data.csr import CSRData
from hogwild.data.csvtable import F64, Table, numeric_column, read_table
from hogwild.data.encodings import Block, HashOptions, column_block, fit_column
from hogwild.data.labelcheck import LabelWatch
from hogwild.errors import DataError

FORMAT = "hogwild-hashing"
# 2: hashed columns may be signed (``"signed": true``). Version 1 parameters (no sign) are
# still applied as they were fitted; an older hogwild refuses version 2 rather than drop signs.
VERSION = 2
READABLE_VERSIONS = (1, 2)
HASH = "xxh3_128"
KINDS = ("numeric", "onehot", "hashed", "text")


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
    blocks: list[Block] = []
    offset = 0
    for name, role in _roles(table, options):
        if role in ("label", "ignore"):
            continue
        spec, block = fit_column(table, name, role, offset, options)
        blocks.append(block)
        specs.append(spec)
        offset += int(spec["width"])
    labels = (numeric_column(table, options.label, required=True)[0] if options.label is not None
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
    blocks = [column_block(table, spec, seed) for spec in specs]
    label = params.get("label")
    # Without the label column the labels are NaN: no metrics can be computed against them.
    labels = (numeric_column(table, label, required=True)[0] if label and label in table.columns
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


def _assemble(blocks: Sequence[Block], labels: F64, n_rows: int, n_features: int,
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
