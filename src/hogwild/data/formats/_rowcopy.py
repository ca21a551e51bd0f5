"""Compiled row moves of a streamed load: scatter a block's rows to their final places, close gaps."""

from __future__ import annotations

from typing import Any

from hogwild.base.jit import njit


@njit(nogil=True, cache=True)
def scatter_rows(src_indptr: Any, src_indices: Any, src_values: Any, src_labels: Any,
                 r0: int, r1: int, g0: int, pos_of: Any, dst_start: Any, dst_indices: Any,
                 dst_values: Any, dst_labels: Any, dst_len: Any) -> Any:  # pragma: no cover
    """Copy rows ``r0:r1`` of a block whose first row is row ``g0`` of the whole input: row
    ``g`` goes to output row ``pos_of[g]``, whose slot starts at ``dst_start[pos_of[g]]`` and
    holds at most ``dst_start[pos_of[g] + 1] - dst_start[pos_of[g]]`` non-zeros. Records the
    real length in ``dst_len``. Returns how many rows did not fit their slot (not copied)."""
    bad = 0
    for j in range(r0, r1):
        d = pos_of[g0 + j]
        s = dst_start[d]
        a = src_indptr[j]
        n = src_indptr[j + 1] - a
        if n > dst_start[d + 1] - s:
            bad += 1
            continue
        for k in range(n):
            dst_indices[s + k] = src_indices[a + k]
            dst_values[s + k] = src_values[a + k]
        dst_len[d] = n
        dst_labels[d] = src_labels[j]
    return bad


@njit(nogil=True, cache=True)
def scatter_pairs(src_indptr: Any, src_indices: Any, src_values: Any, src_labels: Any,
                  r0: int, r1: int, g0: int, pos_of: Any, dst_start: Any, dst_indices: Any,
                  dst_values: Any, dst_labels: Any, dst_len: Any,
                  width: int) -> Any:  # pragma: no cover - compiled
    """scatter_rows for a sparse pair as a table stores it: entries with a zero value or an
    index at or above ``width`` are left out as the row is copied (its slot, sized by the
    whole list, is then short: close_gaps closes it), and every row's indices are checked
    strictly increasing (before anything is left out). Returns (rows that did not fit,
    rows out of order); a row out of order is not copied."""
    bad = 0
    disordered = 0
    for j in range(r0, r1):
        d = pos_of[g0 + j]
        s = dst_start[d]
        a = src_indptr[j]
        n = src_indptr[j + 1] - a
        if n > dst_start[d + 1] - s:
            bad += 1
            continue
        m = 0
        ok = True
        for k in range(n):
            i = src_indices[a + k]
            if k and i <= src_indices[a + k - 1]:
                ok = False
                break
            v = src_values[a + k]
            if v != 0 and i < width:
                dst_indices[s + m] = i
                dst_values[s + m] = v
                m += 1
        if not ok:
            disordered += 1
            continue
        dst_len[d] = m
        dst_labels[d] = src_labels[j]
    return bad, disordered


@njit(nogil=True, cache=True)
def close_gaps(dst_start: Any, dst_len: Any, indices: Any, values: Any) -> Any:  # pragma: no cover
    """Move every row to the left so that rows follow each other without gaps (rows whose
    real length is below their slot's); ``dst_start`` becomes the row pointer. Returns nnz."""
    n_rows = dst_len.shape[0]
    s = dst_start[0]
    out = 0
    for d in range(n_rows):
        nxt = dst_start[d + 1]
        m = dst_len[d]
        if s != out:
            for k in range(m):
                indices[out + k] = indices[s + k]
                values[out + k] = values[s + k]
        out += m
        dst_start[d + 1] = out
        s = nxt
    dst_start[0] = 0
    return out


@njit(nogil=True, cache=True)
def append_rows(src_indptr: Any, src_indices: Any, src_values: Any, dst_next: Any,
                dst_indices: Any, dst_values: Any) -> None:  # pragma: no cover - compiled
    """Append each row ``r`` of a CSR block at ``dst_next[r]`` of the output arrays (which
    advances by the row's length): blocks appended one after another lay their rows side by
    side, in whatever order ``dst_next`` points the rows to."""
    for r in range(src_indptr.shape[0] - 1):
        a = src_indptr[r]
        n = src_indptr[r + 1] - a
        s = dst_next[r]
        for k in range(n):
            dst_indices[s + k] = src_indices[a + k]
            dst_values[s + k] = src_values[a + k]
        dst_next[r] = s + n


@njit(nogil=True, cache=True)
def rows_increasing(indptr: Any, indices: Any) -> bool:  # pragma: no cover - compiled
    """Whether the indices of every row are strictly increasing (CSR's canonical form)."""
    for r in range(indptr.shape[0] - 1):
        for j in range(indptr[r] + 1, indptr[r + 1]):
            if indices[j] <= indices[j - 1]:
                return False
    return True
