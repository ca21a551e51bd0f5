"""Compiled kernel that formats CSR rows as svmlight text (9 digits round-trip float32)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hogwild.base.jit import njit

_POW10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)
_IPOW10 = np.array([10 ** k for k in range(19)], dtype=np.int64)

# Bytes a formatted item can take at most: sign, 17 digits, '.', 'e-324' and a separator.
MAX_VALUE_BYTES = 32
MAX_INDEX_BYTES = 12


@njit(nogil=True, cache=True)
def _write_uint(out: Any, pos: Any, v: Any) -> Any:  # pragma: no cover - compiled
    """Write the decimal digits of ``v >= 0``; return the new position."""
    if v == 0:
        out[pos] = 48
        return pos + 1
    n = 0
    t = v
    while t > 0:
        t //= 10
        n += 1
    for i in range(n - 1, -1, -1):
        out[pos + i] = 48 + v % 10
        v //= 10
    return pos + n


@njit(nogil=True, cache=True)
def _write_padded(out: Any, pos: Any, v: Any, width: Any) -> Any:  # pragma: no cover - compiled
    """Write ``v >= 0`` as exactly ``width`` digits or more, zero-padded on the left (the
    fractional part of a number); return the new position."""
    digits = 1
    t = v
    while t >= 10:
        t //= 10
        digits += 1
    for _ in range(width - digits):
        out[pos] = 48
        pos += 1
    return _write_uint(out, pos, v)


@njit(nogil=True, cache=True)
def _scale(x: Any, k: Any) -> Any:  # pragma: no cover - compiled
    """x * 10^k, exact-power path where possible."""
    if 0 <= k <= 22:
        return x * _POW10[k]
    if -22 <= k < 0:
        return x / _POW10[-k]
    return x * 10.0 ** k


@njit(nogil=True, cache=True)
def write_float(out: Any, pos: Any, x: Any, digits: int) -> Any:  # pragma: no cover
    """Write ``x`` with ``digits`` significant digits, trailing zeros dropped, positional for
    moderate exponents and scientific otherwise; return the new position."""
    if x == 0.0:
        out[pos] = 48
        return pos + 1
    if x < 0:
        out[pos] = 45
        pos += 1
        x = -x
    e = int(np.floor(np.log10(x)))
    m = np.int64(np.round(_scale(x, digits - 1 - e)))
    # log10 can be off by one near powers of ten: renormalise the mantissa to `digits` digits.
    if m >= _IPOW10[digits]:
        e += 1
        m = np.int64(np.round(_scale(x, digits - 1 - e)))
    elif m < _IPOW10[digits - 1]:
        e -= 1
        m = np.int64(np.round(_scale(x, digits - 1 - e)))
    if m >= _IPOW10[digits]:  # rounding carried into a new digit (e.g. 9.9999999996)
        m //= 10
        e += 1
    nd = digits
    while nd > 1 and m % 10 == 0:
        m //= 10
        nd -= 1
    if -5 <= e < 0:
        out[pos] = 48
        out[pos + 1] = 46
        pos += 2
        for _ in range(-e - 1):
            out[pos] = 48
            pos += 1
        return _write_uint(out, pos, m)
    if 0 <= e < 16:
        # integer part: the first e+1 digits (zero-padded if m is shorter)
        if nd <= e + 1:
            pos = _write_uint(out, pos, m)
            for _ in range(e + 1 - nd):
                out[pos] = 48
                pos += 1
            return pos
        p = _IPOW10[nd - e - 1]
        pos = _write_uint(out, pos, m // p)
        out[pos] = 46
        pos += 1
        return _write_padded(out, pos, m % p, nd - e - 1)
    # scientific: d[.ddd]e[-]x
    lead = m // _IPOW10[nd - 1]
    out[pos] = 48 + lead
    pos += 1
    if nd > 1:
        out[pos] = 46
        pos += 1
        pos = _write_padded(out, pos, m % _IPOW10[nd - 1], nd - 1)
    out[pos] = 101
    pos += 1
    if e < 0:
        out[pos] = 45
        pos += 1
        e = -e
    return _write_uint(out, pos, e)


@njit(nogil=True, cache=True)
def format_rows(indptr: Any, indices: Any, values: Any, labels: Any, r0: int, r1: int,
                index_base: int, digits: int, out: Any) -> int:  # pragma: no cover
    """Write rows ``r0:r1`` as text lines into ``out``; return the number of bytes written.

    ``out`` must hold at least ``(r1 - r0) * (MAX_VALUE_BYTES + 1) + nnz * (MAX_INDEX_BYTES
    + MAX_VALUE_BYTES)`` bytes.
    """
    pos = 0
    for r in range(r0, r1):
        y = np.float64(labels[r])
        if y == np.floor(y) and abs(y) < 1e15:
            yi = np.int64(y)
            if yi < 0:
                out[pos] = 45
                pos += 1
                yi = -yi
            pos = _write_uint(out, pos, yi)
        else:
            pos = write_float(out, pos, y, 9)
        for j in range(indptr[r], indptr[r + 1]):
            out[pos] = 32
            pos = _write_uint(out, pos + 1, np.int64(indices[j]) + index_base)
            out[pos] = 58
            pos = write_float(out, pos + 1, np.float64(values[j]), digits)
        out[pos] = 10
        pos += 1
    return pos


@njit(nogil=True, cache=True)
def format_table(table: Any, digits: int, out: Any) -> int:  # pragma: no cover - compiled
    """Write a 2-D float64 array as text, one line per row, columns separated by a space,
    each value with ``digits`` significant digits (integral values come out as integers);
    return the number of bytes written. ``out`` must hold ``table.size * MAX_VALUE_BYTES``
    bytes."""
    pos = 0
    n_cols = table.shape[1]
    for r in range(table.shape[0]):
        for c in range(n_cols):
            if c:
                out[pos] = 32
                pos += 1
            pos = write_float(out, pos, table[r, c], digits)
        out[pos] = 10
        pos += 1
    return pos
