"""Parquet under ``shipping: local``: a plan of row groups from the footers and a bounded sample, and a worker's read of its part.

The coordinator reads no training row. What it reads does not grow with the data:

* every file's footer: its row groups, their row counts and uncompressed sizes, and a
  digest of each group's layout (:func:`group_digest`), against which a worker checks the
  file it reads, so that a different file at the same path is refused;
* the head of up to MAX_WINDOWS row groups spread evenly over the data, together
  ``val_fraction + test_fraction`` of the rows but at most HOLDOUT_BYTES of them (their
  uncompressed size), or a SAMPLE_BYTES sample when nothing is held out. These rows fit the
  column mapping (vocabularies, scales), give the classes and the feature order, and are the
  validation and test rows, which no worker then reads.

The training rows left are cut into pieces (whole row groups; a group is split among
workers only while there are fewer than two pieces a worker) and dealt by size. A worker
reads its pieces a row group at a time, encodes them with the shipped mapping, and counts
their non-zeros itself.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.data.csr import CSRData
from hogwild.data.formats.columnar import (
    GLOB_CHARS,
    ArrowPart,
    Files,
    list_files,
    pyarrow_modules,
    whole_array,
)
from hogwild.data.formats.columnmap import apply_needs, check_params, fit_needs
from hogwild.data.formats.columns import gather
from hogwild.data.formats.csvquery import parse_csv_spec
from hogwild.data.hashing.tables import apply_columns, fit_columns
from hogwild.data.parts.ranges import MAX_LABEL_VALUES, FilePlan, Range
from hogwild.data.parts.sampleplan import (
    HOLDOUT_BYTES,
    MAX_WINDOWS,
    SAMPLE_BYTES,
    split_holdout,
)
from hogwild.data.transform.encodings import HashOptions
from hogwild.data.urls import is_url
from hogwild.errors import DataError

log = logging.getLogger(__name__)

# Rows decoded at a time where a piece starts or ends inside a row group.
BATCH_ROWS = 64 << 10
# Workers get whole row groups from this many a worker on (fewer: groups are cut).
WHOLE_GROUPS_A_WORKER = 4


@dataclass(frozen=True)
class Group:
    """One row group as a file's footer describes it."""

    file: str          # relative to the data set's root (see :func:`split_root`)
    index: int         # the group's number in its file
    first_row: int     # of the file, 0-based
    rows: int
    size: int          # uncompressed bytes of its columns
    digest: bytes


def is_parquet(spec: str) -> bool:
    """Whether a data setting names a ``parquet:`` source."""
    return spec.strip().startswith("parquet:")


def split_root(names: list[str]) -> tuple[str, list[str]]:
    """(the directory every name is under, ending in '/'; each name relative to it)."""
    if len(names) == 1:
        root = names[0].rsplit("/", 1)[0] + "/" if "/" in names[0] else ""
    else:
        common = names[0]
        for name in names[1:]:
            while not name.startswith(common):
                common = common[:-1]
        root = common.rsplit("/", 1)[0] + "/" if "/" in common else ""
    return root, [name[len(root):] for name in names]


def root_of(path: str, names: list[str]) -> tuple[str, list[str]]:
    """(the root of the data set ``path`` names, ending in '/'; each file relative to it):
    the directory a directory or a glob's fixed part names, or a file's own directory, so
    that a worker's ``local_data`` names its own mount of what ``data`` names. Local paths
    are made absolute (every node is told the same name)."""
    if not is_url(path):
        path = str(Path(path).expanduser().absolute())
        names = [str(Path(n).absolute()) for n in names]
    wild = [path.index(c) for c in GLOB_CHARS if c in path]
    if wild:
        base = path[:min(wild)]
        base = base.rsplit("/", 1)[0] + "/" if "/" in base else ""
    elif names == [path.rstrip("/")]:  # the file itself
        base = path.rsplit("/", 1)[0] + "/"
    else:
        base = path.rstrip("/") + "/"
    if base and all(n.startswith(base) for n in names):
        return base, [n[len(base):] for n in names]
    return split_root(names)


def join_root(root: str, relative: str) -> str:
    """A piece's file under ``root`` (a directory, with or without its final '/')."""
    return relative if not root else root.rstrip("/") + "/" + relative


def group_digest(meta: Any, index: int) -> bytes:
    """16 bytes over a row group's layout in its file: its rows, its size, and each column
    chunk's name, offset, stored size and value count."""
    group = meta.row_group(index)
    h = hashlib.blake2b(digest_size=16)
    h.update(struct.pack("<qq", group.num_rows, group.total_byte_size))
    for c in range(group.num_columns):
        col = group.column(c)
        h.update(col.path_in_schema.encode())
        h.update(struct.pack("<qqq", col.file_offset, col.total_compressed_size,
                             col.num_values))
    return h.digest()


@dataclass
class Extremes:
    """A column's least and greatest value over every row group, from the footers'
    statistics; ``complete`` False where a group with values keeps none."""

    low: float = float("inf")
    high: float = float("-inf")
    complete: bool = True

    def add(self, column: Any) -> None:
        st = column.statistics
        if st is None or not st.has_min_max:
            values = column.num_values - (st.null_count if st is not None and
                                          st.has_null_count else 0)
            self.complete = self.complete and values == 0
            return
        try:
            self.low, self.high = min(self.low, float(st.min)), max(self.high, float(st.max))
        except (TypeError, ValueError):  # (text, bytes: not a number column)
            self.complete = False


def _footer_groups(handle: Any, relative: str, extremes: dict[str, Extremes]
                   ) -> tuple[list[str], list[Group]]:
    """(column names, row groups) of one open Parquet file; each column's extremes (by its
    top-level name: a list column's are its items') grown in ``extremes``."""
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(handle)
    meta = reader.metadata
    groups, first = [], 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        groups.append(Group(relative, g, first, int(group.num_rows),
                            int(group.total_byte_size), group_digest(meta, g)))
        first += int(group.num_rows)
        for c in range(group.num_columns):
            column = group.column(c)
            extremes.setdefault(column.path_in_schema.split(".")[0], Extremes()).add(column)
    return list(reader.schema_arrow.names), groups


def survey(path: str) -> tuple[Files, str, dict[str, list[str]], list[Group],
                              dict[str, Extremes]]:
    """(the files, their root, each file's column names, every row group in order, each
    column's extremes), from the footers alone."""
    pa, _ = pyarrow_modules()
    files = list_files("parquet", path)
    root, relative = root_of(path, files.names)
    names: dict[str, list[str]] = {}
    groups: list[Group] = []
    extremes: dict[str, Extremes] = {}
    for name, rel in zip(files.names, relative):
        try:
            with files.opener(name) as handle:
                names[name], found = _footer_groups(handle, rel, extremes)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{name}: cannot read as Parquet: {exc}") from None
        groups += [g for g in found if g.rows > 0]
    if not groups:
        raise DataError(f"{path}: no data rows")
    return files, root, names, groups, extremes


def exact_from_footers(params: dict[str, Any], extremes: Mapping[str, Extremes],
                       options: HashOptions, path: str) -> list[str]:
    """Widen what a sample cannot see from the footers' statistics, in place: a sparse
    pair's width (its largest index, which a sample may miss: an index beyond the width
    would be dropped) and a numeric column's ``scale=maxabs``; the offsets after a widened
    column move up. DataError for a sparse pair whose footers keep no statistics. Returns
    the numeric columns scaled from the sample alone (no statistics)."""
    offset = 0
    sampled_scales = []
    for spec in params["columns"]:
        kind = spec["kind"]
        if kind == "sparse":
            ext = extremes.get(str(spec["indices"]))
            if ext is None or not ext.complete:
                raise DataError(f"{path}: the files' footers keep no statistics for column "
                                f"{spec['indices']!r}, so the width of its indices is not known "
                                "without reading every row: write the files with statistics, "
                                "or use shipping: partition")
            if ext.high >= 0:
                spec["width"] = max(int(spec["width"]), int(ext.high) + 1)
        elif kind == "numeric" and options.scale == "maxabs":
            ext = extremes.get(str(spec["name"]))
            if ext is not None and ext.complete and ext.high >= ext.low:
                peak = max(abs(ext.low), abs(ext.high))
                spec["scale"] = 1.0 / peak if peak > 0 else 1.0
            else:
                sampled_scales.append(str(spec["name"]))
        spec["offset"] = offset
        offset += int(spec["width"])
    params["n_features"] = offset
    return sampled_scales


def _sample(files: Files, root: str, groups: list[Group], heads: Mapping[int, int],
            columns: list[str]) -> list[ArrowPart]:
    """The first ``heads[g]`` rows of each row group ``g`` named, each file opened once."""
    import pyarrow.parquet as pq

    pa, _ = pyarrow_modules()
    parts = []
    for rel, picked in itertools.groupby(sorted(heads), key=lambda g: groups[g].file):
        name = join_root(root, rel)
        try:
            with files.opener(name) as handle:
                reader = pq.ParquetFile(handle)
                for g in picked:
                    table = group_rows(reader, groups[g].index, 0, heads[g], columns)
                    parts.append(ArrowPart(name, groups[g].first_row,
                                           {c: whole_array(table.column(c)) for c in columns},
                                           table.num_rows, columns))
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{name}: cannot read as Parquet: {exc}") from None
    return parts


def group_rows(reader: Any, index: int, start: int, stop: int, columns: list[str]) -> Any:
    """Rows [start, stop) of row group ``index`` (a pyarrow Table): the group read whole when
    that is all of it, else decoded a batch at a time up to ``stop`` only."""
    pa, _ = pyarrow_modules()
    if start == 0 and stop == reader.metadata.row_group(index).num_rows:
        return reader.read_row_group(index, columns=columns, use_threads=False)
    batches, got = [], 0
    for batch in reader.iter_batches(batch_size=min(stop, BATCH_ROWS), row_groups=[index],
                                     columns=columns, use_threads=False):
        batches.append(batch)
        got += batch.num_rows
        if got >= stop:
            break
    if not batches:
        return reader.schema_arrow.empty_table().select(columns)
    return pa.Table.from_batches(batches).slice(start, stop - start)


@dataclass
class ParquetPlan:
    """A file plan over row groups, and the column mapping fitted on its sample."""

    plan: FilePlan
    params: dict[str, Any]
    root: str


def plan_groups(spec: str, *, workers: int, seed: int, val_fraction: float,
                test_fraction: float, classifier: bool = True,
                holdout_bytes: int = HOLDOUT_BYTES,
                sample_bytes: int = SAMPLE_BYTES) -> ParquetPlan:
    """Plan the ``parquet:PATH?...`` source ``spec`` for ``workers`` from its footers and a
    bounded sample (see the module's docstring). DataError for a source with too few rows
    or row groups' rows for the workers, or whose sample cannot be encoded."""
    t0 = time.perf_counter()
    path, options = parse_csv_spec(spec.strip()[len("parquet:"):], "parquet")
    files, root, every, groups, extremes = survey(path)
    names = every[files.names[0]]
    needs = fit_needs(files.names[0], names, options)
    columns = [c for c in names if c in needs.columns()]
    for name, has in every.items():  # every file holds what the mapping reads
        missing = [c for c in columns if c not in has]
        if missing:
            raise DataError(f"{name}: no column(s) {', '.join(missing)} (columns: "
                            f"{', '.join(has)})")
    total = sum(g.rows for g in groups)
    size = sum(g.size for g in groups)
    per_row = size / total
    holdout = val_fraction + test_fraction
    want = min(holdout_bytes / per_row, holdout * total) if holdout > 0 else \
        min(sample_bytes / per_row, total)
    picked = _spread(len(groups), min(MAX_WINDOWS, len(groups)))
    take = max(1, round(want / len(picked)))
    heads = {g: min(take, groups[g].rows - (1 if holdout > 0 and groups[g].rows > 1 else 0))
             for g in picked}
    if holdout > 0:  # a group holding a window keeps a training row after it
        heads = {g: n for g, n in heads.items() if n > 0}
    parts = _sample(files, root, groups, heads, columns)
    gathered = gather(iter(parts), needs, path, names)
    rows, params = fit_columns(gathered, options)
    fitted = params_json(params)
    sampled_scales = exact_from_footers(params, extremes, options, path)
    if sampled_scales:
        log.warning("%s: column(s) %s scaled by the largest value of the sample (the footers "
                    "keep no statistics for them): a worker's larger values read above 1",
                    path, ", ".join(sampled_scales))
    if params_json(params) != fitted:  # widened or rescaled: the sample encoded again
        rows = apply_columns(params, gathered)
    if rows.n_rows == 0:
        raise DataError(f"{path}: no data rows in the sample")
    labels32 = rows.labels.astype(np.float32)
    if not np.all(np.isfinite(labels32)):
        raise DataError(f"{path}: the sample's labels are not all numbers (label= names the "
                        "label column)")
    values, counts = np.unique(labels32.astype(np.float64), return_counts=True)
    if not classifier or values.shape[0] > MAX_LABEL_VALUES:
        values, counts = np.zeros(0), np.zeros(0, dtype=np.int64)
    held = heads if holdout > 0 else {}
    ranges, assignment, windows = _pieces(groups, held, workers, seed,
                                          rows.nnz / rows.n_rows, per_row)
    if any(not mine for mine in assignment):
        raise DataError(f"{path}: {total - sum(held.values()):,} training row(s) cannot give "
                        f"{workers} workers a part each")
    trained = sum(r.train_rows for r in ranges)
    positive = round(trained * float(np.count_nonzero(labels32 > 0)) / rows.n_rows)
    df = np.bincount(rows.indices, minlength=rows.n_features).astype(np.int64)
    val, test = split_holdout(rows, seed, test_fraction / holdout if holdout > 0 else None)
    plan = FilePlan(
        source=path, file_size=0, gzip=False, text_bytes=size, total_rows=total,
        max_index=rows.n_features - 1, ranges=ranges,
        assignment=assignment, df=df, labels=values,
        label_counts=counts.astype(np.int64), positive_train=positive, val=val, test=test,
        sampled=True, windows=windows, sample_rows=rows.n_rows)
    plan.seconds = time.perf_counter() - t0
    log.info("%s: planned %d piece(s) of %d row group(s) in %d file(s), %s rows, from their "
             "footers and a sample of %s rows from %d group(s), in %.2fs", path, len(ranges),
             len(groups), len(files.names), f"{total:,}", f"{rows.n_rows:,}", len(parts),
             plan.seconds)
    return ParquetPlan(plan, params, root)


def _spread(n: int, k: int) -> list[int]:
    """``k`` of ``range(n)`` spread evenly (the middle of each of k equal stretches)."""
    return sorted({min(n - 1, int((j + 0.5) * n / k)) for j in range(k)})


def _pieces(groups: list[Group], held: Mapping[int, int], workers: int, seed: int,
            nnz_per_row: float, per_row: float
            ) -> tuple[list[Range], list[list[int]], list[tuple[int, int]]]:
    """(the training pieces, each a Range whose ``first_row``/``rows`` count in the files'
    rows taken in order and whose bytes are positions in their uncompressed size; the
    pieces of each worker; the held-out windows as (first, end) rows of that sequence).

    With at least WHOLE_GROUPS_A_WORKER row groups a worker, each worker gets whole groups
    (the largest first, each to the worker holding the fewest rows). With fewer, the
    training rows are cut into 2 x workers stretches of equal rows, dealt two to a worker in
    a seeded order, and a stretch is read as the parts of the groups it covers: a group is
    then decoded from its start by each of its readers, the cost of having few groups."""
    starts = np.cumsum([0] + [g.rows for g in groups])
    windows: list[tuple[int, int]] = []
    spans: list[tuple[int, int, int]] = []   # (group, first row in it, end row in it)
    for i, g in enumerate(groups):
        head = held.get(i, 0)
        if head:
            windows.append((int(starts[i]), int(starts[i]) + head))
        if head < g.rows:
            spans.append((i, head, g.rows))

    def piece(i: int, a: int, b: int) -> Range:
        g, first = groups[i], int(starts[i]) + a
        return Range(first, b - a, round(first * per_row), round((first + b - a) * per_row), 0,
                     b - a, round((b - a) * nnz_per_row), g.digest, file=g.file,
                     group=g.index, group_row=a)

    if len(spans) >= WHOLE_GROUPS_A_WORKER * workers:
        held_rows = [0] * workers
        dealt: list[list[int]] = [[] for _ in range(workers)]
        for j in sorted(range(len(spans)), key=lambda j: (spans[j][1] - spans[j][2], j)):
            w = min(range(workers), key=lambda k: (held_rows[k], k))
            dealt[w].append(j)
            held_rows[w] += spans[j][2] - spans[j][1]
        return [piece(*sp) for sp in spans], [sorted(x) for x in dealt], windows
    count = 2 * workers
    total = sum(b - a for _, a, b in spans)
    cuts = [total * k // count for k in range(count + 1)]
    ranges: list[Range] = []
    of_stretch: list[int] = []
    at = 0  # training rows before the span
    for i, a, b in spans:
        for k in range(count):
            lo, hi = max(cuts[k], at), min(cuts[k + 1], at + b - a)
            if hi > lo:
                ranges.append(piece(i, a + lo - at, a + hi - at))
                of_stretch.append(k)
        at += b - a
    order = np.random.default_rng([seed, 0x50515254]).permutation(count)
    owner = {int(k): n // 2 for n, k in enumerate(order)}
    assignment: list[list[int]] = [[] for _ in range(workers)]
    for j, k in enumerate(of_stretch):
        assignment[owner[k]].append(j)
    return ranges, assignment, windows


# ----------------------------------------------------------------------------- a worker


def params_json(params: Mapping[str, Any]) -> str:
    """The column mapping as it travels in a LocalSource."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def params_of(text: str) -> dict[str, Any]:
    """A shipped column mapping; DataError if it is not one this version applies."""
    try:
        params = json.loads(text)
    except ValueError as exc:
        raise DataError(f"the plan's column mapping is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise DataError("the plan's column mapping is not an object")
    check_params(params)
    return params


def read_pieces(root: str, pieces: list[Range], params: Mapping[str, Any]
                ) -> Iterator[CSRData]:
    """Each piece's rows encoded with ``params``, in the pieces' order, raw labels (NaN
    where the label column is missing). DataError (one line) where a file differs from the
    one planned: another row group layout (by its digest) or fewer rows."""
    import pyarrow.parquet as pq

    pa, _ = pyarrow_modules()
    by_file: dict[str, list[Range]] = {}
    for p in sorted(pieces, key=lambda r: r.first_row):
        by_file.setdefault(p.file, []).append(p)
    for rel, mine in by_file.items():
        # A worker's own mount of a one-file data set may name the file itself.
        name = root if not is_url(root) and os.path.isfile(root) else join_root(root, rel)
        try:
            with _open(name) as handle:
                reader = pq.ParquetFile(handle)
                meta = reader.metadata
                names = list(reader.schema_arrow.names)
                needs = apply_needs(params, name, names)
                columns = [c for c in names if c in needs.columns()]
                for p in mine:
                    if p.group >= meta.num_row_groups or group_digest(meta, p.group) != p.digest:
                        raise DataError(
                            f"{name} differs from the file the coordinator planned with: row "
                            f"group {p.group} is not laid out as planned (shipping: local "
                            "needs every node to read the same files)")
                    first = sum(meta.row_group(g).num_rows for g in range(p.group))
                    part = _piece(reader, name, p, first, columns)
                    yield apply_columns(params, gather(iter([part]), needs, name, names))
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{name}: cannot read as Parquet: {exc}") from None


def _piece(reader: Any, name: str, p: Range, first: int, columns: list[str]) -> ArrowPart:
    """Rows [group_row, group_row + rows) of the piece's row group."""
    table = group_rows(reader, p.group, p.group_row, p.group_row + p.rows, columns)
    if table.num_rows != p.rows:
        raise DataError(f"{name}: row group {p.group} holds {table.num_rows:,} of the "
                        f"{p.rows:,} rows planned (shipping: local needs every node to read "
                        "the same files)")
    arrays = {c: whole_array(table.column(c)) for c in columns}
    return ArrowPart(name, first + p.group_row, arrays, table.num_rows, columns)


def _open(name: str) -> Any:
    """A file of the data set, local or at an fsspec URL."""
    if is_url(name):
        try:
            import fsspec
        except ImportError:
            raise DataError(f"{name}: reading a URL needs fsspec (pip install "
                            "'hogwild[remote]' from a clone)") from None
        return fsspec.open(name, "rb").open()
    return open(name, "rb")
