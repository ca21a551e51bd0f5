"""Compiled kernels that parse svmlight/LIBSVM text held in a uint8 array, a piece per thread."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from hogwild.base.jit import njit

# Error codes a parse kernel returns together with the byte offset of the offending token.
OK = 0
BAD_TOKEN = 1
INDEX_ZERO = 2
NEGATIVE_INDEX = 3
UNSORTED_INDEX = 4
NON_FINITE = 5
MISSING_LABEL = 6
BAD_LABEL = 7
INDEX_TOO_LARGE = 8
INDEX_OVERFLOW = 9
CAPACITY = 10

MESSAGES = {
    BAD_TOKEN: "bad token (expected index:value)",
    INDEX_ZERO: "feature index 0 in a file read with 1-based ids (use zero_based)",
    NEGATIVE_INDEX: "negative feature index",
    UNSORTED_INDEX: "feature indices not strictly increasing (unsorted or duplicate)",
    NON_FINITE: "non-finite value (nan, inf or out of float32 range)",
    MISSING_LABEL: "missing label (the line starts with index:value)",
    BAD_LABEL: "label is not a number",
    INDEX_TOO_LARGE: "feature index does not fit n_features",
    INDEX_OVERFLOW: "feature index too large for int32",
    CAPACITY: "internal error: output capacity exceeded",
}


# A CSV/TSV file given where svmlight text is read: its columns are hashed by the csv: source.
DELIMITED = ("the file looks like CSV/TSV, not svmlight/LIBSVM text: give it as "
             "csv:FILE?label=COLUMN (see docs/guides/hashing.md)")
BARE_CR = ("a carriage return inside a line (old Mac line endings?): convert the file to "
           "\\n line endings")


def describe_error(b: np.ndarray, offset: int, code: int) -> str:
    """The message of error ``code`` with the offending token (at ``b[offset:]``) quoted.

    A line holding a bare CR (not followed by LF) is said to first: the kernels take CR for
    a blank, so a file with CR-only line endings reads as one long line whose first error
    (often the next row's label taken for a negative index) hides the cause."""
    end = offset
    while end < b.shape[0] and end - offset < 40 and b[end] not in (9, 10, 13, 32):
        end += 1
    token = bytes(b[offset:end]).decode("utf-8", "replace")
    message = f"{MESSAGES.get(code, f'error {code}')}: {token!r}"
    if _has_bare_cr(b, offset):
        return f"{BARE_CR} (parsing stopped at {message})"
    if _looks_delimited(b, offset):
        return f"{message}; {DELIMITED}"
    return message


def _looks_delimited(b: np.ndarray, offset: int) -> bool:
    """Whether the line holding ``b[offset]`` reads as CSV/TSV: commas or tabs between its
    fields and no ``index:value`` token (svmlight lines may use tabs as blanks too)."""
    start = offset
    while start > 0 and offset - start < 4096 and b[start - 1] != 10:
        start -= 1
    end = offset
    while end < b.shape[0] and end - offset < 4096 and b[end] != 10:
        end += 1
    line = bytes(b[start:end])
    return (b"," in line or b"\t" in line.strip()) and b":" not in line


def _has_bare_cr(b: np.ndarray, offset: int) -> bool:
    """Whether the line holding ``b[offset]`` has a CR that is not its CRLF ending (numpy
    scans of that line, on the error path only: good data never pays for it)."""
    before = np.flatnonzero(b[:offset] == 10)
    start = int(before[-1]) + 1 if before.size else 0
    after = np.flatnonzero(b[offset:] == 10)
    end = offset + int(after[0]) if after.size else b.shape[0]
    # The line's last byte may be the CR of a CRLF ending; any CR before it is bare.
    return bool(np.any(b[start:end - 1] == 13))


# Powers of ten exactly representable in float64: m * 10^k and m / 10^k are then correctly
# rounded for any integer mantissa m < 2^53, which keeps results equal to strtod's.
_POW10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)
_IPOW10 = np.array([10 ** k for k in range(19)], dtype=np.int64)
# Values at or beyond this magnitude round to inf when cast to float32 (2^128 - 2^103).
_F32_LIMIT = 3.4028235677973366e38
_MANT_LIMIT = 100_000_000_000_000_000  # 1e17: more digits than this are dropped (or scaled)
_INDEX_LIMIT = 2_147_483_647


@njit(nogil=True, cache=True, inline="always")
def _is_sep(c: int) -> bool:  # pragma: no cover - compiled
    """Token separator: space, tab, CR, LF or the start of a comment."""
    return c == 32 or c == 9 or c == 13 or c == 10 or c == 35


@njit(nogil=True, cache=True, inline="always")
def _load8(b: Any, pos: Any) -> Any:  # pragma: no cover - compiled
    """The 8 bytes at ``pos`` as one little-endian uint64 (LLVM fuses the loads into one)."""
    p = np.uint64(pos)
    return (np.uint64(b[p]) | (np.uint64(b[p + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(b[p + np.uint64(2)]) << np.uint64(16))
            | (np.uint64(b[p + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(b[p + np.uint64(4)]) << np.uint64(32))
            | (np.uint64(b[p + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(b[p + np.uint64(6)]) << np.uint64(48))
            | (np.uint64(b[p + np.uint64(7)]) << np.uint64(56)))


@njit(nogil=True, cache=True, inline="always")
def _digits8(b: Any, pos: int) -> Any:  # pragma: no cover - compiled
    """(n, value) of the run of decimal digits at ``pos``, looking at 8 bytes at most.

    Where 8 bytes are readable the run is decoded without a branch per digit: one 64-bit
    load, a per-byte digit test, and three multiply-shift steps that merge the digits.
    """
    if pos + 8 <= b.shape[0]:
        x = _load8(b, pos)
        hi = np.uint64(0xF0F0F0F0F0F0F0F0)
        zeros = np.uint64(0x3030303030303030)
        # non-zero bytes mark non-digits: high nibble must be 3 before and after adding 6
        bad = ((x & hi) ^ zeros) | (((x + np.uint64(0x0606060606060606)) & hi) ^ zeros)
        n: Any = 8
        if bad != 0:
            n = np.int64(trailing_zeros(bad)) >> 3  # type: ignore[call-arg]
        if n == 0:
            return 0, np.int64(0)
        v = x << np.uint64(64 - 8 * n)  # the n digits to the top; zero bytes lead
        v = ((v & np.uint64(0x0F0F0F0F0F0F0F0F)) * np.uint64(2561)) >> np.uint64(8)
        v = ((v & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
        v = ((v & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
        return n, np.int64(v)
    n = 0
    w = np.int64(0)
    while n < 8:
        d = np.int64(b[pos + n]) - 48
        if d < 0 or d > 9:
            break
        w = w * 10 + d
        n += 1
    return n, w


@njit(nogil=True, cache=True, inline="always")
def _digit_run(b: Any, pos: Any, mant: Any, frac: bool) -> Any:  # pragma: no cover
    """Append a run of digits to ``mant``; return (pos, mant, exponent change, digit count).

    Digits beyond ~17 significant ones cannot change a float32 and are dropped (integer
    digits then scale the exponent instead).
    """
    exp10 = 0
    total = 0
    while True:
        if mant < 10_000_000_000:  # 8 more digits still fit below 1e18
            n, v = _digits8(b, pos)
            if n == 0:
                break
            mant = mant * _IPOW10[n] + v
            pos += n
            total += n
            if frac:
                exp10 -= n
            if n < 8:
                break
        else:
            d = np.int64(b[pos]) - 48
            if d < 0 or d > 9:
                break
            if mant < _MANT_LIMIT:
                mant = mant * 10 + d
                if frac:
                    exp10 -= 1
            elif not frac:
                exp10 += 1
            pos += 1
            total += 1
    return pos, mant, exp10, total


@njit(nogil=True, cache=True, inline="always")
def _parse_number(b: Any, pos: int) -> Any:  # pragma: no cover - compiled
    """Parse a decimal number at ``pos``; return (status, value, new_pos).

    status 0 = ok, 1 = not a number, 2 = non-finite (an inf/nan word or float32 overflow).
    The token must be followed by a separator. The caller guarantees a newline after
    ``pos`` in ``b``, so scanning needs no end checks.
    """
    neg = False
    c = b[pos]
    if c == 45:  # '-'
        neg = True
        pos += 1
    elif c == 43:  # '+'
        pos += 1
    pos, mant, exp10, n_digits = _digit_run(b, pos, np.int64(0), False)
    if b[pos] == 46:  # '.'
        pos, mant, e_frac, n_frac = _digit_run(b, pos + 1, mant, True)
        exp10 += e_frac
        n_digits += n_frac
    if n_digits == 0:
        c = b[pos] | 32  # lower case
        if c == 105 or c == 110:  # 'i' (inf, infinity) or 'n' (nan)
            return 2, 0.0, pos
        return 1, 0.0, pos
    c = b[pos]
    if (c | 32) == 101:  # 'e' / 'E'
        pos += 1
        eneg = False
        c = b[pos]
        if c == 45:
            eneg = True
            pos += 1
        elif c == 43:
            pos += 1
        e: Any = 0
        e_digits = 0
        d = np.int64(b[pos]) - 48
        while 0 <= d <= 9:
            if e < 100_000:
                e = e * 10 + d
            e_digits += 1
            pos += 1
            d = np.int64(b[pos]) - 48
        if e_digits == 0:
            return 1, 0.0, pos
        exp10 += -e if eneg else e
        c = b[pos]
    if not _is_sep(c):
        return 1, 0.0, pos
    if mant == 0:
        value = 0.0
    elif 0 <= exp10 <= 22:
        value = np.float64(mant) * _POW10[exp10]
    elif -22 <= exp10 < 0:
        value = np.float64(mant) / _POW10[-exp10]
    elif exp10 > 400:
        return 2, 0.0, pos
    elif exp10 < -400:
        value = 0.0
    else:
        value = np.float64(mant) * 10.0 ** exp10
    if not (value < _F32_LIMIT):
        return 2, 0.0, pos
    return 0, -value if neg else value, pos


def count_marks(b: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Count newlines and colons in ``b[start:end]``: upper bounds of rows and non-zeros.

    Vectorised numpy over cache-sized blocks (numpy releases the GIL in these loops, so
    pieces count in parallel); measured ~3x faster than a compiled byte loop.
    """
    n_lines = 0
    n_colons = 0
    block = 1 << 20
    for s in range(start, end, block):
        chunk = b[s:min(end, s + block)]
        n_lines += int(np.count_nonzero(chunk == 10))
        n_colons += int(np.count_nonzero(chunk == 58))
    return n_lines, n_colons


@njit(nogil=True, cache=True)
def next_line_start(b: Any, pos: int) -> Any:  # pragma: no cover - compiled
    """The offset just after the first newline at or after ``pos`` (len(b) if none)."""
    n = b.shape[0]
    while pos < n:
        if b[pos] == 10:
            return pos + 1
        pos += 1
    return n


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
_BYTES_OF_1 = np.uint64(0x0101010101010101)


@njit(nogil=True, cache=True, inline="always")
def _bytes_equal(x: Any, c: Any) -> Any:  # pragma: no cover - compiled
    """0x80 in every byte of ``x`` equal to ``c`` (a byte repeated 8 times), 0 elsewhere
    (exact: no borrow crosses bytes)."""
    y = x ^ c
    return ~(((y & _LOW7) + _LOW7) | y) & _HIGH


@njit(nogil=True, cache=True)
def row_caps(b: Any, start: int, end: int, caps: Any, row_base: int) -> Any:  # pragma: no cover
    """First pass of a streamed load: for every data row of ``b[start:end]`` (the lines
    parse_piece turns into rows: not blank, not a comment) store in ``caps[row_base + r]``
    its number of colons before any ``#``, an upper bound of its non-zeros (exact unless a
    ``qid:`` token is present). ``b[end - 1]`` must be a newline. Returns (rows, newlines).

    A row's bytes are scanned 8 at a time (colons counted in a word without a newline or
    ``#``), which makes this pass several times faster than a byte at a time.
    """
    newline = np.uint64(0x0A0A0A0A0A0A0A0A)
    hash_ = np.uint64(0x2323232323232323)
    colon = np.uint64(0x3A3A3A3A3A3A3A3A)
    pos = start
    row = row_base
    lines = 0
    while pos < end:
        c = b[pos]
        while c == 32 or c == 9 or c == 13:
            pos += 1
            c = b[pos]
        if c == 10 or c == 35:
            while b[pos] != 10:
                pos += 1
            pos += 1
            lines += 1
            continue
        n = 0
        while pos + 8 <= end:
            x = _load8(b, pos)
            stop = _bytes_equal(x, newline) | _bytes_equal(x, hash_)
            colons = _bytes_equal(x, colon)
            if stop != 0:
                # only the bytes before the first newline or '#' (the lowest marked byte)
                colons &= (stop & (~stop + np.uint64(1))) - np.uint64(1)
            n += int(((colons >> np.uint64(7)) * _BYTES_OF_1) >> np.uint64(56))
            if stop != 0:
                pos += int(trailing_zeros(stop)) >> 3  # type: ignore[call-arg]
                break
            pos += 8
        c = b[pos]
        while c != 10 and c != 35:
            n += c == 58
            pos += 1
            c = b[pos]
        while b[pos] != 10:
            pos += 1
        pos += 1
        lines += 1
        caps[row] = n
        row += 1
    return row - row_base, lines


@njit(nogil=True, cache=True)
def last_line_end(b: Any, end: int) -> Any:  # pragma: no cover - compiled
    """The offset just after the last newline in ``b[:end]`` (0 if there is none)."""
    pos = end
    while pos > 0:
        if b[pos - 1] == 10:
            return pos
        pos -= 1
    return 0


@njit(nogil=True, cache=True)
def count_newlines(b: Any, end: int) -> Any:  # pragma: no cover - compiled
    """Number of newlines in ``b[:end]`` (turns an error offset into a line number)."""
    n = 0
    for i in range(end):
        n += b[i] == 10
    return n


@njit(nogil=True, cache=True)
def parse_piece(b: Any, start: int, end: int, zero_based: bool, n_features: int,
                out_indptr: Any, out_indices: Any, out_values: Any, out_labels: Any,
                row_base: int, nnz_base: int, nnz_cap: int) -> Any:  # pragma: no cover
    """Parse the lines in ``b[start:end]`` into the output arrays.

    ``start`` is a line start and ``b[end - 1]`` a newline (unless start == end): the
    newline is the sentinel that lets every scan run without end checks. Row r of the
    piece goes to ``out_labels[row_base + r]`` and ``out_indptr[row_base + r + 1]`` (a
    global non-zero offset starting at ``nnz_base``); its non-zeros go to
    ``out_indices/out_values[nnz_base + ...]``, never beyond ``nnz_base + nnz_cap``.
    ``n_features < 0`` means no limit. Returns
    (n_rows, nnz, max_index, error_code, error_offset).
    """
    shift = 0 if zero_based else 1
    pos = start
    row = row_base
    k = nnz_base
    k_end = nnz_base + nnz_cap
    max_index = -1
    while pos < end:
        c = b[pos]
        # Leading blanks; then a blank line, a comment line or a row.
        while c == 32 or c == 9 or c == 13:
            pos += 1
            c = b[pos]
        if c == 10:
            pos += 1
            continue
        if c == 35:
            while b[pos] != 10:
                pos += 1
            pos += 1
            continue
        # --- label ---
        tok = pos
        status, label, pos = _parse_number(b, pos)
        if status != 0:
            # An index:value pair where the label should be is a missing label.
            q = tok
            while not _is_sep(b[q]):
                if b[q] == 58:
                    return row - row_base, k - nnz_base, max_index, MISSING_LABEL, tok
                q += 1
            if status == 2:
                return row - row_base, k - nnz_base, max_index, NON_FINITE, tok
            return row - row_base, k - nnz_base, max_index, BAD_LABEL, tok
        out_labels[row] = label
        prev = -1
        # --- features ---
        while True:
            c = b[pos]
            while c == 32 or c == 9 or c == 13:
                pos += 1
                c = b[pos]
            if c == 10:
                pos += 1
                break
            if c == 35:
                while b[pos] != 10:
                    pos += 1
                pos += 1
                break
            tok = pos
            if c == 113 and b[pos + 1] == 105 and b[pos + 2] == 100 and b[pos + 3] == 58:
                pos += 4  # 'qid:N' is ignored
                while not _is_sep(b[pos]):
                    pos += 1
                continue
            if c == 45:
                return row - row_base, k - nnz_base, max_index, NEGATIVE_INDEX, tok
            pos, idx, _, n_digits = _digit_run(b, pos, np.int64(0), False)
            if n_digits == 0 or b[pos] != 58:
                return row - row_base, k - nnz_base, max_index, BAD_TOKEN, tok
            status, value, pos = _parse_number(b, pos + 1)
            if status == 1:
                return row - row_base, k - nnz_base, max_index, BAD_TOKEN, tok
            if status == 2:
                return row - row_base, k - nnz_base, max_index, NON_FINITE, tok
            if idx > _INDEX_LIMIT or n_digits > 18:
                return row - row_base, k - nnz_base, max_index, INDEX_OVERFLOW, tok
            if idx == 0 and shift == 1:
                return row - row_base, k - nnz_base, max_index, INDEX_ZERO, tok
            idx -= shift
            if idx > _INDEX_LIMIT - 1:
                return row - row_base, k - nnz_base, max_index, INDEX_OVERFLOW, tok
            if idx <= prev:
                return row - row_base, k - nnz_base, max_index, UNSORTED_INDEX, tok
            if n_features >= 0 and idx >= n_features:
                return row - row_base, k - nnz_base, max_index, INDEX_TOO_LARGE, tok
            if k >= k_end:
                return row - row_base, k - nnz_base, max_index, CAPACITY, tok
            prev = idx
            out_indices[k] = idx
            out_values[k] = value
            k += 1
        max_index = max(max_index, prev)
        row += 1
        out_indptr[row] = k
    return row - row_base, k - nnz_base, max_index, OK, -1


@njit(nogil=True, cache=True)
def find_topic_docids(b: Any, topic: Any) -> Any:  # pragma: no cover - compiled
    """Doc ids of the qrels lines ``TOPIC DOCID 1`` whose topic equals ``topic``.

    Returns (docids, error_offset); error_offset >= 0 marks a line whose doc id is not an
    integer.
    """
    n = b.shape[0]
    t = topic.shape[0]
    out = np.empty(max(16, n // 16), dtype=np.int64)
    m = 0
    pos = 0
    while pos < n:
        line = pos
        while pos < n and (b[pos] == 32 or b[pos] == 9):
            pos += 1
        match = pos + t < n
        if match:
            for j in range(t):
                if b[pos + j] != topic[j]:
                    match = False
                    break
        if match and (b[pos + t] == 32 or b[pos + t] == 9):
            pos += t
            while pos < n and (b[pos] == 32 or b[pos] == 9):
                pos += 1
            doc = np.int64(0)
            nd = 0
            while pos < n:
                d = np.int64(b[pos]) - 48
                if d < 0 or d > 9:
                    break
                if nd < 18:
                    doc = doc * 10 + d
                nd += 1
                pos += 1
            if nd == 0 or nd > 18:
                return out[:m], line
            if m >= out.shape[0]:
                bigger = np.empty(out.shape[0] * 2, dtype=np.int64)
                bigger[:m] = out[:m]
                out = bigger
            out[m] = doc
            m += 1
        while pos < n and b[pos] != 10:
            pos += 1
        pos += 1
    return out[:m], -1
