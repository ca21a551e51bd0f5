"""Feature hashing of raw table columns (CSV/TSV, Parquet, Arrow) into CSR rows.

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
* ``text``: whitespace tokens (lower-cased) hashed like ``hashed``, value = count in the cell;
  a token-list column (Parquet/Arrow ``list<string>``) gives its tokens as they are.
* ``sparse``: a pair of list columns (indices, values): feature offset + index, the value as
  given; the block is as wide as the largest index of the fitted data + 1 (a larger index in
  new data stores nothing).
* ``cross``: every feature of one column times every feature of another in the same row,
  hashed (:mod:`hogwild.data.hashing.crosses`), after all the columns.

A ``weight`` column gives each row its weight (finite, >= 0); the label column its label.

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
import numpy.typing as npt

from hogwild.data.csr import CSRData
from hogwild.data.formats._rowcopy import append_rows, rows_increasing
from hogwild.data.formats.columnar import read_columns
from hogwild.data.formats.columnmap import FORMAT, HASH, VERSION, apply_needs, check_params, roles
from hogwild.data.formats.columns import Columns, TableColumns
from hogwild.data.formats.csvtable import F64, I64, Table, read_table
from hogwild.data.hashing.crosses import apply_cross, fit_cross
from hogwild.data.transform.encodings import (
    DEFAULT_HASH_BITS,
    TOP_VALUES,
    Block,
    HashOptions,
    column_block,
    fit_column,
)
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.data.transform.split import shuffle_order
from hogwild.errors import DataError


def fit_hashing(path: str | Path, options: HashOptions) -> tuple[CSRData, dict[str, Any]]:
    """Read a CSV/TSV file, choose each column's encoding, and return its rows and the
    parameters that hash other files the same way."""
    t0 = time.perf_counter()
    data, params = fit_table(read_table(path, options.sep), options)
    params["fit_seconds"] = time.perf_counter() - t0
    return data, params


def fit_table(table: Table, options: HashOptions) -> tuple[CSRData, dict[str, Any]]:
    """:func:`fit_hashing` on a table already read."""
    data, params = fit_columns(TableColumns(table), options)
    params["sep"] = table.sep
    return data, params


def fit_columns(cols: Columns, options: HashOptions, shuffle_seed: int | None = None,
                ) -> tuple[CSRData, dict[str, Any]]:
    """Choose each column's encoding on ``cols`` (any format) and return the rows (in
    ``shuffle_order(n_rows, shuffle_seed)`` when given) and the parameters that encode
    other data the same way."""
    specs: list[dict[str, Any]] = []
    blocks: list[Block] = []
    offset = 0
    for name, role in roles(cols.path, cols.names, options):
        if role in ("label", "weight", "ignore", "sparse_values"):
            continue
        spec, block = fit_column(cols, name, role, offset, options)
        blocks.append(block)
        specs.append(spec)
        offset += int(spec["width"])
    for names in options.cross:
        spec, (rows, feats, vals) = fit_cross(
            cols, names, specs, offset, options.hash_bits or DEFAULT_HASH_BITS, options.seed,
            TOP_VALUES)
        blocks.append(Block(rows, feats, vals))
        specs.append(spec)
        offset += int(spec["width"])
    labels = (cols.numeric(options.label, True)[0] if options.label is not None
              else np.zeros(cols.n_rows))
    params = column_mapping(specs, offset, seed=options.seed, label=options.label,
                            weight=options.weight)
    return _assemble(blocks, labels, cols.n_rows, offset, cols.path,
                     weight_column(cols, options.weight), shuffle_seed), params


def column_mapping(specs: list[dict[str, Any]], n_features: int, *, seed: int,
                   label: str | None, weight: str | None) -> dict[str, Any]:
    """The parameters a fit stores: its columns' ``specs`` and what encodes other data so."""
    params: dict[str, Any] = {"format": FORMAT, "version": VERSION, "hash": HASH, "seed": seed,
                              "label": label, "n_features": n_features, "columns": specs}
    if weight is not None:
        params["weight"] = weight
    return params


def weight_column(cols: Columns, name: str | None) -> F64 | None:
    """The weight column's values (DataError naming the row of one that is negative)."""
    if name is None:
        return None
    weights = cols.numeric(name, True)[0]
    negative = np.flatnonzero(weights < 0)
    if negative.size:
        row = int(negative[0])
        raise DataError(f"{cols.locate(row)}: column {name!r}: weight {weights[row]:g} is "
                        "negative (weights must be >= 0)")
    return weights


def apply_hashing(params: Mapping[str, Any], path: str | Path,
                  sep: str | None = None) -> CSRData:
    """Hash the CSV/TSV file ``path`` (or ``csv:FILE?...``, the query ignored) exactly as the
    data ``params`` were fitted on. Every fitted column must be present; the label column
    may be missing (labels are then NaN, so that nothing is scored against made-up labels)."""
    check_params(params)
    text = str(path)
    scheme, colon, rest = text.partition(":")
    if colon and scheme in ("parquet", "arrow") and not Path(text).exists():
        return apply_columns(params, read_columns(scheme, rest.partition("?")[0],
                                                  params=params))
    if text.startswith("csv:"):
        text = text[4:].partition("?")[0]
    table = read_table(text, sep or _apply_sep(text, params))
    apply_needs(params, table.path, table.header)
    return apply_columns(params, TableColumns(table))


def apply_columns(params: Mapping[str, Any], cols: Columns,
                  shuffle_seed: int | None = None) -> CSRData:
    """The rows of ``cols`` encoded with fitted ``params`` (every fitted column present),
    in ``shuffle_order(n_rows, shuffle_seed)`` when given."""
    specs = list(params["columns"])
    seed = int(params.get("seed", 0))
    blocks = [Block(*apply_cross(cols, spec, specs, seed)) if spec["kind"] == "cross"
              else column_block(cols, spec, seed) for spec in specs]
    label, weight = params.get("label"), params.get("weight")
    # Without the label column the labels are NaN: no metrics can be computed against them.
    labels = (cols.numeric(label, True)[0] if label and label in cols.names
              else np.full(cols.n_rows, np.nan))
    weights = weight_column(cols, weight) if weight and weight in cols.names else None
    return _assemble(blocks, labels, cols.n_rows, int(params["n_features"]), cols.path,
                     weights, shuffle_seed)


def _apply_sep(path: str, params: Mapping[str, Any]) -> str:
    """The file's own suffix (.tsv/.tab: tab, .csv: comma) or else the fitted file's sep."""
    name = path.lower().removesuffix(".gz")
    if name.endswith((".tsv", ".tab")):
        return "\t"
    if name.endswith(".csv"):
        return ","
    return str(params.get("sep") or ",")


def _canonical(block: Block, n_rows: int, n_features: int) -> tuple[I64, I64, F64]:
    """One block's entries as CSR (indptr, indices, values), indices strictly increasing in
    each row (repeats summed). Entries already in row order (every encoding gives them so)
    take no sort: the row pointers come from counting."""
    import scipy.sparse as sp

    rows = block.rows
    shape = (n_rows, n_features)
    if block.indptr is not None:
        if rows_increasing(block.indptr, block.cols):  # as most sparse pairs come
            return block.indptr, block.cols, block.vals
        matrix = sp.csr_matrix((block.vals, block.cols, block.indptr), shape=shape)
    elif rows.size < 2 or bool((rows[1:] >= rows[:-1]).all()):
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
        matrix = sp.csr_matrix((block.vals, block.cols, indptr), shape=shape)
    else:
        matrix = sp.csr_matrix((block.vals, (rows, block.cols)), shape=shape)
    if not matrix.has_canonical_format:
        matrix.sum_duplicates()
    return (np.asarray(matrix.indptr, dtype=np.int64), np.asarray(matrix.indices),
            np.asarray(matrix.data))


def _interleave(parts: Sequence[tuple[I64, I64, F64]], n_rows: int,
                order: I64 | None = None,
                ) -> tuple[I64, npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """The rows of several CSR blocks side by side: each row holds block 0's entries, then
    block 1's... (the blocks' feature ranges follow each other, so the indices stay sorted);
    with ``order``, row i of the result is row ``order[i]`` of the blocks. Every entry is
    placed by one vectorised scatter, no sort."""
    total = np.zeros(n_rows, dtype=np.int64)
    for own, _, _ in parts:
        total += np.diff(own)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(total if order is None else total[order], out=indptr[1:])
    nnz = int(indptr[-1])
    indices = np.empty(nnz, dtype=np.int32)
    values = np.empty(nnz, dtype=np.float32)
    if len(parts) == 1 and order is None:
        indices[:] = parts[0][1]
        values[:] = parts[0][2]
        return indptr, indices, values
    # Where the next block's entries of each (source) row go.
    start = indptr[:-1].copy()
    if order is not None:
        start[order] = indptr[:-1]
    for own, idx, val in parts:
        append_rows(own, idx, val, start, indices, values)
    return indptr, indices, values


def _assemble(blocks: Sequence[Block], labels: F64, n_rows: int, n_features: int,
              source: str | Path, weights: F64 | None = None,
              shuffle_seed: int | None = None) -> CSRData:
    """CSR rows from the blocks' entries (repeated (row, feature) pairs, e.g. a word twice in
    a cell, are summed), placed in ``shuffle_order(n_rows, shuffle_seed)`` when given; labels
    that float32 changes are noted as the svmlight parser notes them (a classifier refuses
    them)."""
    order = None if shuffle_seed is None else shuffle_order(n_rows, shuffle_seed)
    indptr, indices, values = _interleave([_canonical(b, n_rows, n_features) for b in blocks],
                                          n_rows, order)
    watch = LabelWatch()
    watch.add(np.asarray(labels, dtype=np.float64), 0)  # data rows as the file has them
    if order is not None:
        labels = labels[order]
        weights = None if weights is None else weights[order]
    return CSRData(indptr, indices, values, labels, n_features, watch.note(source), weights)
