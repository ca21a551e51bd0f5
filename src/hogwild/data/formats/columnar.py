"""``parquet:`` and ``arrow:`` data read through pyarrow, a row group (or record batch) at a time.

PATH is a file, a directory or a glob, local or any fsspec URL.

Each part's needed columns become flat numpy arrays with pyarrow compute calls (casts,
dictionary encoding, whitespace splitting, list flattening): no Python code runs per row or
per value, and only the distinct values of a categorical or text column become Python
strings. The parts are gathered (:mod:`hogwild.data.formats.columns`) and encoded as a CSV table is.
pyarrow is an optional extra: ``pip install 'hogwild[parquet]'``.
"""

from __future__ import annotations

import glob
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from hogwild.data.formats.columnmap import apply_needs, fit_needs
from hogwild.data.formats.columns import (
    BOOL,
    Gathered,
    Needs,
    Pairs,
    Values,
    check_pairs,
    gather,
    row_of,
)
from hogwild.data.formats.csvtable import F64, I64
from hogwild.data.transform.encodings import HashOptions
from hogwild.data.urls import is_url
from hogwild.errors import DataError

FORMATS = {"parquet": "Parquet", "arrow": "Arrow IPC"}
# In a directory, files with these endings are the data (others, e.g. _SUCCESS, are not).
SUFFIXES = {"parquet": (".parquet", ".pq", ".parq"),
            "arrow": (".arrow", ".feather", ".ipc", ".arrows")}
GLOB_CHARS = ("*", "?", "[")


def pyarrow_modules() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        raise DataError("parquet: and arrow: sources need pyarrow (pip install "
                        "'hogwild[parquet]' from a clone)") from None
    return pa, pc


# ---------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Files:
    """The files of a data set: their names (for errors) and how to open one."""

    names: list[str]
    opener: Callable[[str], Any]


def _data_files(scheme: str, found: list[str], is_dir: bool) -> list[str]:
    if not is_dir:
        return sorted(found)
    # Hidden and bookkeeping files (.crc, _SUCCESS, _metadata) are not data.
    visible = [f for f in found if not f.rsplit("/", 1)[-1].startswith((".", "_"))]
    marked = [f for f in visible if f.lower().endswith(SUFFIXES[scheme])]
    return sorted(marked or visible)


def list_files(scheme: str, path: str) -> Files:
    """The files ``path`` names (a file, a directory's files, a glob's matches), sorted."""
    if is_url(path):
        try:
            import fsspec
        except ImportError:
            raise DataError(f"{path}: reading a URL needs fsspec (pip install "
                            "'hogwild[remote]' from a clone)") from None
        try:
            fs, root = fsspec.core.url_to_fs(path)
            if any(c in root for c in GLOB_CHARS):
                found, is_dir = list(fs.glob(root)), False
            elif fs.isdir(root):
                found, is_dir = [str(f) for f in fs.find(root)], True
            else:
                found, is_dir = ([root] if fs.exists(root) else []), False
        except (OSError, ValueError, ImportError) as exc:
            raise DataError(f"{path}: cannot list: {exc}") from None
        files = _data_files(scheme, found, is_dir)
        if not files:
            raise DataError(f"data not found: {path}")
        names = [str(fs.unstrip_protocol(f)) for f in files]
        by_name = dict(zip(names, files))
        return Files(names, lambda name: fs.open(by_name[name], "rb"))
    local = Path(path).expanduser()
    if any(c in path for c in GLOB_CHARS) and not local.exists():
        found = [f for f in glob.glob(str(local), recursive=True) if Path(f).is_file()]
        files = _data_files(scheme, found, False)
    elif local.is_dir():
        found = [str(f) for f in local.rglob("*") if f.is_file()]
        files = _data_files(scheme, [f.replace("\\", "/") for f in found], True)
    else:
        files = [str(local)] if local.is_file() else []
    if not files:
        raise DataError(f"data not found: {path}")
    return Files(files, lambda name: open(name, "rb"))


# ---------------------------------------------------------------------------- a part


@dataclass
class ArrowPart:
    """One row group or record batch of one file: its columns (pyarrow arrays)."""

    path: str
    first_row: int                 # of the file, 0-based
    arrays: dict[str, Any]
    n_rows: int
    names: list[str]

    def locate(self, row: int) -> str:
        return f"{self.path}, row {self.first_row + row + 1}"

    def locator(self) -> Callable[[int], str]:
        path, first = self.path, self.first_row
        return lambda row: f"{path}, row {first + row + 1}"

    def _fail(self, name: str, what: str) -> DataError:
        return DataError(f"{self.path}: column {name!r} {what}")

    def numeric(self, name: str, required: bool) -> tuple[F64, BOOL]:
        pa, pc = pyarrow_modules()
        arr = self.arrays[name]
        kind = arr.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                or pa.types.is_boolean(kind) or pa.types.is_decimal(kind)
                or pa.types.is_null(kind)):
            hint = "labels must be numbers" if required else "list it in categorical= or text="
            raise self._fail(name, f"has type {kind}, not numbers ({hint})")
        arr = pc.cast(arr, pa.float64())
        present = np.asarray(arr.is_valid(), dtype=bool)
        values = np.asarray(arr.fill_null(0.0).to_numpy(zero_copy_only=False),
                            dtype=np.float64)
        if required and not present.all():
            raise DataError(f"{self.locate(int(np.flatnonzero(~present)[0]))}: column "
                            f"{name!r} is empty (null)")
        finite = np.isfinite(values)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            raise DataError(f"{self.locate(row)}: column {name!r}: value {values[row]} is "
                            "not finite")
        return values, present

    def _strings(self, name: str) -> Any:
        """The column as trimmed strings, empty ones null."""
        pa, pc = pyarrow_modules()
        arr = self.arrays[name]
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or \
                pa.types.is_struct(arr.type) or pa.types.is_map(arr.type):
            raise self._fail(name, f"has type {arr.type}: a categorical column holds one "
                             "value a row (give a token list in text=)")
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            try:
                arr = pc.cast(arr, pa.string())
            except pa.ArrowException:
                raise self._fail(name, f"has type {arr.type}, which does not read as "
                                 "text") from None
        arr = pc.utf8_trim_whitespace(arr)
        return pc.if_else(pc.equal(arr, ""), pa.scalar(None, arr.type), arr)

    def _encode(self, values: Any, rows: I64) -> Values:
        """(distinct values, row of each, value of each) of non-null strings ``values``
        whose rows are ``rows``."""
        _, pc = pyarrow_modules()
        encoded = pc.dictionary_encode(values)
        valid = np.asarray(encoded.indices.is_valid(), dtype=bool)
        which = np.asarray(encoded.indices.fill_null(0).to_numpy(zero_copy_only=False),
                           dtype=np.int64)
        return list(encoded.dictionary.to_pylist()), rows[valid], which[valid]

    def categorical(self, name: str) -> Values:
        return self._encode(self._strings(name), np.arange(self.n_rows, dtype=np.int64))

    def tokens(self, name: str) -> Values:
        pa, pc = pyarrow_modules()
        arr = self.arrays[name]
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            # As a CSV text cell: lower-cased, split on blanks.
            lists = pc.utf8_split_whitespace(pc.utf8_lower(arr))
        elif pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
            lists = arr  # a token list: the tokens as given
            item = arr.type.value_type
            if not (pa.types.is_string(item) or pa.types.is_large_string(item)):
                try:
                    lists = pc.cast(arr, pa.list_(pa.string()))
                except pa.ArrowException:
                    raise self._fail(name, f"has type {arr.type}, not text or a list of "
                                     "tokens") from None
        else:
            raise self._fail(name, f"has type {arr.type}, not text or a list of tokens")
        counts = np.asarray(pc.list_value_length(lists).fill_null(0).to_numpy(
            zero_copy_only=False), dtype=np.int64)
        flat = pc.list_flatten(lists)
        rows = np.repeat(np.arange(self.n_rows, dtype=np.int64), counts)
        keep = pc.and_(pc.is_valid(flat), pc.not_equal(flat.fill_null(""), ""))
        mask = np.asarray(keep, dtype=bool)
        return self._encode(flat.filter(keep), rows[mask])

    def list_lengths(self, name: str) -> I64:
        """The list length of each row of a list-of-numbers column (a null list: 0)."""
        _, pc = pyarrow_modules()
        arr = self.arrays[name]
        if number_item(arr.type) is None:
            raise self._fail(name, f"has type {arr.type}, not a list of numbers (sparse= "
                             "takes two list columns: indices and values)")
        return np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(
            zero_copy_only=False), dtype=np.int64)

    def number_list(self, name: str, integer: bool) -> tuple[I64, npt.NDArray[Any]]:
        """(list length of each row, the lists' numbers flat)."""
        pa, pc = pyarrow_modules()
        counts = self.list_lengths(name)
        arr = self.arrays[name]
        item = arr.type.value_type
        flat = pc.list_flatten(arr)
        if flat.null_count:
            at = int(np.flatnonzero(~np.asarray(flat.is_valid(), dtype=bool))[0])
            raise DataError(f"{self.locate(row_of(counts, at))}: column {name!r} holds a null")
        if integer or pa.types.is_floating(item):  # as stored: a view, copied by gather
            return counts, flat.to_numpy(zero_copy_only=False)
        return counts, np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float64)

    def pairs(self, indices: str, values: str) -> Pairs:
        counts_i, index = self.number_list(indices, True)
        counts_v, vals = self.number_list(values, False)
        finite = np.isfinite(vals)
        if not finite.all():
            at = int(np.flatnonzero(~finite)[0])
            raise DataError(f"{self.locate(row_of(counts_v, at))}: column {values!r}: value {vals[at]} is "
                            "not finite")
        return check_pairs(self, (indices, values), counts_i, index, counts_v, vals)


# ---------------------------------------------------------------------------- reading


def _schema_names(scheme: str, handle: Any) -> tuple[list[str], Any]:
    """(column names, a reader) of an open file."""
    pa, _ = pyarrow_modules()
    if scheme == "parquet":
        import pyarrow.parquet as pq

        reader = pq.ParquetFile(handle)
        return list(reader.schema_arrow.names), reader
    try:
        reader = pa.ipc.open_file(handle)
    except pa.ArrowInvalid:
        handle.seek(0)
        reader = pa.ipc.open_stream(handle)
    return list(reader.schema.names), reader


def _batches(scheme: str, reader: Any, columns: list[str]) -> Iterator[Any]:
    """The file's parts, a row group (Parquet) or a record batch (Arrow) at a time."""
    if scheme == "parquet":
        for i in range(reader.num_row_groups):
            # One thread: this runs beside the conversion of the part before (measured:
            # pyarrow's own pool spent more CPU for no shorter load here).
            yield reader.read_row_group(i, columns=columns, use_threads=False)
    elif hasattr(reader, "num_record_batches"):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i).select(columns)
    else:
        for batch in reader:
            yield batch.select(columns)


def _parts(scheme: str, files: Files, needed: list[str]) -> Iterator[ArrowPart]:
    """Every file's parts in order; the next part is read (pyarrow, without the GIL) while
    the caller converts this one."""
    return _ahead(_read_parts(scheme, files, needed))


def _parallel_parts(files: Files, needed: list[str], readers: int) -> Iterator[ArrowPart]:
    """Every Parquet file's row groups in order, ``readers`` of them decoded at a time, each
    thread through a handle of its own on the file (a handle is not shared between threads:
    an fsspec file is a position and a buffer)."""
    import pyarrow.parquet as pq

    pa, _ = pyarrow_modules()
    local = threading.local()
    opened: list[Any] = []  # each thread's open handle, closed once the pass ends

    def group(name: str, i: int) -> Any:
        if getattr(local, "name", None) != name:
            if getattr(local, "handle", None) is not None:  # done with the file before
                opened.remove(local.handle)
                local.handle.close()
            local.handle = files.opener(name)
            opened.append(local.handle)
            local.name, local.reader = name, pq.ParquetFile(local.handle)
        return local.reader.read_row_group(i, columns=needed, use_threads=False)

    def decoded(name: str, count: int) -> Iterator[Any]:
        pending: deque[Any] = deque()
        for i in range(count):
            pending.append(pool.submit(group, name, i))
            if len(pending) == readers:  # the others decode while the caller takes this one
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    pool = ThreadPoolExecutor(readers, thread_name_prefix=_GROUPS)
    try:
        for name in files.names:
            try:
                with files.opener(name) as handle:
                    names, reader = _schema_names("parquet", handle)
                    count = reader.num_row_groups
                yield from _file_parts(name, names, needed, decoded(name, count))
            except (pa.ArrowException, OSError) as exc:
                raise DataError(f"{name}: cannot read as {FORMATS['parquet']}: {exc}") from None
    finally:
        # A pass left early decodes no more groups; then no thread holds a handle. Closed
        # on one of the threads, the others may still read: their handles close when
        # collected.
        if _end_pool(pool, _GROUPS):
            for handle in opened:
                handle.close()


def _read_parts(scheme: str, files: Files, needed: list[str]) -> Iterator[ArrowPart]:
    pa, _ = pyarrow_modules()
    for name in files.names:
        try:
            with files.opener(name) as handle:
                names, reader = _schema_names(scheme, handle)
                yield from _file_parts(name, names, needed, _batches(scheme, reader, needed))
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{name}: cannot read as {FORMATS[scheme]}: {exc}") from None


def _file_parts(name: str, names: list[str], needed: list[str],
                batches: Iterator[Any]) -> Iterator[ArrowPart]:
    """One file's parts from its row groups or record batches, once the columns the pass
    needs are found in it."""
    missing = [c for c in needed if c not in names]
    if missing:
        raise DataError(f"{name}: no column(s) {', '.join(missing)} (columns: "
                        f"{', '.join(names)})")
    first = 0
    for batch in batches:
        arrays = {c: whole_array(batch.column(c)) for c in needed}
        yield ArrowPart(name, first, arrays, batch.num_rows, names)
        first += batch.num_rows


_END = object()
# Thread name prefixes of the pools that generators own (see _end_pool): one per pool kind.
_AHEAD = "hogwild-ahead"
_GROUPS = "hogwild-read"


def _ahead(items: Iterator[ArrowPart]) -> Iterator[ArrowPart]:
    """``items``, each produced in a helper thread while the previous one is consumed.

    A reader that stops early leaves this generator to be closed wherever its last reference
    goes, which may be the helper thread itself (a reference cycle collected there, after an
    error): see _end_pool."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=_AHEAD)
    pending = pool.submit(next, items, _END)
    try:
        while True:
            item = pending.result()
            if item is _END:
                return
            pending = pool.submit(next, items, _END)
            yield cast(ArrowPart, item)
    finally:
        _end_pool(pool, _AHEAD)


def _end_pool(pool: ThreadPoolExecutor, prefix: str) -> bool:
    """Cancel what a generator's pool has queued and wait for its threads, unless this is one
    of them (the generator closed there: joining would raise "cannot join current thread");
    then the work under way finishes by itself and is dropped. True if it waited."""
    own = threading.current_thread().name.startswith(prefix + "_")
    pool.shutdown(wait=not own, cancel_futures=True)
    return not own


def number_item(kind: Any) -> Any:
    """The item type of a list-of-numbers Arrow type (a sparse pair's column), else None."""
    pa, _ = pyarrow_modules()
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return None
    item = kind.value_type
    return item if pa.types.is_integer(item) or pa.types.is_floating(item) else None


def whole_array(column: Any) -> Any:
    """One array from a (possibly chunked) column."""
    return column.combine_chunks() if hasattr(column, "combine_chunks") else column


@dataclass(frozen=True)
class TableRead:
    """What reading a data set's mapped columns needs: its files, what the mapping reads of
    them, and the first file's column names."""

    scheme: str
    path: str
    files: Files
    needs: Needs
    names: list[str]
    # Bytes of one item of each list column of numbers in the first file (8 for int64).
    item_bytes: dict[str, int] = field(default_factory=dict)

    def parts(self, columns: Iterable[str] | None = None,
              readers: int = 1) -> Iterator[ArrowPart]:
        """Every file's parts in order (a fresh pass each call), the mapped columns only, or
        those of ``columns``; Parquet's row groups decoded ``readers`` at a time (else one
        ahead of the caller, on one thread)."""
        wanted = self.needs.columns() if columns is None else set(columns)
        needed = [c for c in self.names if c in wanted]
        if readers > 1 and self.scheme == "parquet":
            return _parallel_parts(self.files, needed, readers)
        return _parts(self.scheme, self.files, needed)


def table_read(scheme: str, path: str, *, options: HashOptions | None = None,
               params: Mapping[str, Any] | None = None) -> TableRead:
    """The files under ``path`` and the columns ``options`` map (fitting) or fitted
    ``params`` encode (applying), from the first file's schema."""
    pa, _ = pyarrow_modules()
    files = list_files(scheme, path)
    first = files.names[0]
    try:
        with files.opener(first) as handle:
            names, reader = _schema_names(scheme, handle)
            schema = reader.schema_arrow if scheme == "parquet" else reader.schema
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{first}: cannot read as {FORMATS[scheme]}: {exc}") from None
    needs = (apply_needs(params, first, names) if params is not None
             else fit_needs(first, names, options or HashOptions()))
    items = {column.name: number_item(column.type) for column in schema}
    item_bytes = {name: item.bit_width // 8 for name, item in items.items() if item is not None}
    return TableRead(scheme, path, files, needs, names, item_bytes)


def read_columns(scheme: str, path: str, *, options: HashOptions | None = None,
                 params: Mapping[str, Any] | None = None) -> Gathered:
    """The columns ``options`` map (fitting) or fitted ``params`` encode (applying) of every
    file under ``path``, gathered a row group at a time."""
    pa, _ = pyarrow_modules()
    read = table_read(scheme, path, options=options, params=params)
    files, needs, names = read.files, read.needs, read.names
    capacity = _pair_counts(scheme, files, needs) if needs.pairs else {}
    gathered = gather(read.parts(), needs, path, names, capacity)
    # Arrow's pool keeps what the row groups used; nothing of it is needed any more.
    pa.default_memory_pool().release_unused()
    return gathered


def _pair_counts(scheme: str, files: Files, needs: Needs) -> dict[tuple[str, str], int]:
    """Per sparse pair, the entries of every file as Parquet's footers count them (a list
    column's leaf values; an empty or null list counts one: an upper bound), so that they
    are read into arrays of that size. Empty where a count is missing (Arrow IPC files, a
    footer without it): the pairs are then joined from their parts."""
    if scheme != "parquet":
        return {}
    import pyarrow.parquet as pq

    totals = {pair: 0 for pair in needs.pairs}
    try:
        for name in files.names:
            with files.opener(name) as handle:
                meta = pq.ParquetFile(handle).metadata
            leaves: dict[str, int] = {}
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                for c in range(group.num_columns):
                    column = group.column(c)
                    top = column.path_in_schema.split(".")[0]
                    leaves[top] = leaves.get(top, 0) + int(column.num_values)
            for pair in totals:
                if pair[0] not in leaves or pair[1] not in leaves:
                    return {}
                totals[pair] += max(leaves[pair[0]], leaves[pair[1]])
    except Exception:  # noqa: BLE001 - the count only sizes arrays: reading says what is wrong
        return {}
    return totals
