"""A CSV/TSV file read into string columns; a column's cells read as numbers, values or tokens."""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hogwild.errors import DataError, DataFormatError

# A cell with blanks around its value (searched in the column joined by newlines).
_PADDED = re.compile(r"^\s|\s$", re.MULTILINE)
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


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


# ------------------------------------------------------------------------ columns


def _line_of_row(table: Table, row: int) -> int:
    if table.line_numbers is not None:
        return int(table.line_numbers[row])
    return _record_line(Path(table.path), table.sep, row)


def numeric_column(table: Table, name: str, required: bool) -> tuple[F64, npt.NDArray[np.bool_]]:
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


def categorical_column(table: Table, name: str) -> tuple[list[str], I64, I64]:
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


def text_tokens(table: Table, name: str) -> tuple[list[str], I64, I64]:
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


def number_lists(table: Table, name: str) -> tuple[I64, F64]:
    """(how many numbers each row holds, the numbers) of a column whose cells hold blank-separated
    numbers (one half of a sparse pair, e.g. ``"3 17 40"``): split and parsed through
    ``map``; a cell that does not parse stops the load naming its line."""
    cells = table.columns[name]
    counts = np.fromiter(map(len, map(str.split, cells)), dtype=np.int64, count=len(cells))
    tokens = " ".join(cells).split()
    rows = np.repeat(np.arange(len(cells), dtype=np.int64), counts)
    try:
        values = np.fromiter(map(float, tokens), dtype=np.float64, count=len(tokens))
    except ValueError:
        values = np.zeros(len(tokens))
        for at, token in enumerate(tokens):  # error path only: find the bad cell
            try:
                float(token)
            except ValueError:
                raise DataFormatError(str(table.path), _line_of_row(table, int(rows[at])),
                                      f"column {name!r}: {token!r} is not a number") from None
    finite = np.isfinite(values)
    if not finite.all():
        at = int(np.flatnonzero(~finite)[0])
        raise DataFormatError(str(table.path), _line_of_row(table, int(rows[at])),
                              f"column {name!r}: value {tokens[at]!r} is not finite")
    return counts, values


def line_of_row(table: Table, row: int) -> int:
    """The file line of data row ``row`` (0-based), for errors found after parsing."""
    return _line_of_row(table, row)
