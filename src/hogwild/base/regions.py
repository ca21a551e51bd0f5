"""Arrays in anonymous memory regions of their own, outside malloc's heap."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

# From this size a region asks for transparent huge pages (as numpy does for its own arrays).
HUGE_FROM_BYTES = 4 << 20


def region_array(length: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """An uninitialised 1-D array in a private anonymous mapping of its own, given back to
    the system whole when its last view goes.

    For buffers a loader fills and frees again (a block of text, the rows parsed from it):
    freed by glibc's malloc, a block of that size would raise malloc's limit for handing out
    mapped blocks, and the blocks allocated after it (a test set's arrays, the outputs') came
    from its heap, which kept freed memory resident: `train` on 200k rows peaked at 311 MB
    against 299 MB with the loader's buffers in regions (bench/NOTES.md). A region from
    HUGE_FROM_BYTES asks for huge pages, which a private mapping gets where the kernel's
    setting is ``madvise``: filling a fresh 120 MB one took 7.5 ms with them and 48 ms
    without, on the 2-core development machine."""
    dt = np.dtype(dtype)
    nbytes = max(1, int(length) * dt.itemsize)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    if nbytes >= HUGE_FROM_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            region.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # not allowed here: ordinary pages
    return np.frombuffer(region, dtype=dt, count=int(length))
