"""Arrays in anonymous memory regions of their own, outside malloc's heap."""

from __future__ import annotations

import errno
import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

# From this size a region says which pages it wants: huge ones for a buffer filled again and
# again (region_array), small ones for a data set's rows (rows_array).
HUGE_FROM_BYTES = 4 << 20


def region_array(length: int, dtype: npt.DTypeLike, *, huge: bool = True) -> npt.NDArray[Any]:
    """An uninitialised 1-D array in a private anonymous mapping of its own, given back to
    the system whole when its last view goes.

    For buffers a loader fills and frees again (a block of text, the rows parsed from it):
    freed by glibc's malloc, a block of that size would raise malloc's limit for handing out
    mapped blocks, and the blocks allocated after it (a test set's arrays, the outputs') came
    from its heap, which kept freed memory resident: `train` on 200k rows peaked at 311 MB
    against 299 MB with the loader's buffers in regions (bench/NOTES.md). A region from
    HUGE_FROM_BYTES asks for huge pages (``huge``), which a private mapping gets where the
    kernel's setting is ``madvise``: filling a 120 MB one again took 7.5 ms with them and
    48 ms without, on the 2-core development machine; or, not ``huge``, for small pages
    even where the kernel's setting is ``always``."""
    dt = np.dtype(dtype)
    nbytes = max(1, int(length) * dt.itemsize)
    try:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    except OSError as exc:
        if exc.errno == errno.ENOMEM:  # beyond a limit (RLIMIT_DATA, ulimit -v): as numpy says
            raise MemoryError(f"cannot map a region of {nbytes:,} bytes") from None
        raise
    advice = getattr(mmap, "MADV_HUGEPAGE" if huge else "MADV_NOHUGEPAGE", None)
    if advice is not None and nbytes >= HUGE_FROM_BYTES:
        try:
            region.madvise(advice)
        except OSError:
            pass  # not allowed here: the system's default pages
    return np.frombuffer(region, dtype=dt, count=int(length))


def rows_array(length: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """An uninitialised 1-D array for a data set's rows, written once and then read in order:
    from HUGE_FROM_BYTES a region of small pages, below it numpy's.

    Huge pages save nothing on an array read in order (three training passes over 2M rows
    took 1.136 s with the rows in huge pages and 1.138 s in small ones), and each must be
    a free 2 MB block when first written. Where the system hands freed memory back to a
    host (a virtual machine with free page reporting, as the 2-core development machine is),
    those blocks are the ones handed back, and each is faulted in from the host again:
    filling 1.8 GB of fresh arrays took 1.3-3.5 s of system time in huge pages against
    0.6 s in small ones, and 2.5 s each against 0.57 s when two processes did it at once,
    as the workers of `hogwild run` do (bench/NOTES.md)."""
    dt = np.dtype(dtype)
    if int(length) * dt.itemsize < HUGE_FROM_BYTES:
        return np.empty(int(length), dtype=dt)
    return region_array(length, dt, huge=False)


def rows_grown(array: npt.NDArray[Any], size: int, used: int) -> npt.NDArray[Any]:
    """A rows_array of ``size`` holding ``array``'s first ``used`` items (a region cannot be
    resized in place; a part of it never written holds no memory, so a caller may ask for
    room generously)."""
    out = rows_array(size, array.dtype)
    out[:used] = array[:used]
    return out


def given_back_after(array: npt.NDArray[Any], used: int) -> npt.NDArray[Any]:
    """``array[:used]``, the whole pages after it handed back to the system where ``array``
    is a region's (a region cannot be shrunk in place as numpy's arrays are; its pages past
    ``used`` would otherwise stay resident if they were ever written)."""
    head = array[:used]
    base = array.base
    region = base.obj if isinstance(base, memoryview) else None
    if isinstance(region, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED") and len(region):
        region_at = np.frombuffer(region, np.uint8).ctypes.data
        end_at = array.ctypes.data + used * array.itemsize
        begin = -(-(end_at - region_at) // mmap.PAGESIZE) * mmap.PAGESIZE
        if begin < len(region):
            region.madvise(mmap.MADV_DONTNEED, begin, len(region) - begin)
    return head
