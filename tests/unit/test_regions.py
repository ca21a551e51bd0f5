"""base.regions: arrays in anonymous regions of their own, given back whole when freed."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from hogwild.base.regions import (
    HUGE_FROM_BYTES,
    given_back_after,
    region_array,
    rows_array,
    rows_grown,
)
from hogwild.cluster.wire.arrays import alloc_array


def _resident_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.float32, np.float64])
def test_a_region_array_has_the_length_and_type_asked_and_is_writable(dtype: type) -> None:
    a = region_array(1000, dtype)
    assert a.shape == (1000,) and a.dtype == np.dtype(dtype) and a.flags.writeable
    a[:] = np.arange(1000) % 100
    assert int(a.sum()) == sum(i % 100 for i in range(1000))
    assert region_array(0, dtype).shape == (0,)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_region_is_given_back_when_its_last_view_goes() -> None:
    a = region_array(64 << 20, np.uint8)
    view = a[1 << 20:]
    a[:] = 1
    touched = _resident_mb()
    del a
    assert _resident_mb() > touched - 8       # the view still holds the region
    del view
    assert _resident_mb() < touched - 56      # gone whole, not kept by malloc


def test_a_large_shard_array_comes_from_a_region_and_a_small_one_from_numpy() -> None:
    big = alloc_array(3 << 20, np.float32)    # 12 MB
    small = alloc_array(1000, np.float32)
    assert isinstance(big.base, memoryview) and isinstance(big.base.obj, mmap.mmap)
    assert small.base is None


def _vm_flags(array: np.ndarray) -> set[str]:
    """The kernel's flags for the mapping that holds ``array``'s first byte."""
    at = array.ctypes.data
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= at < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError("no mapping holds the array")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_NOHUGEPAGE"),
                    reason="/proc/self/smaps and madvise")
def test_a_large_rows_array_asks_for_small_pages_and_a_buffer_for_huge_ones() -> None:
    rows = rows_array(HUGE_FROM_BYTES // 4 + 1024, np.float32)
    buffer = region_array(HUGE_FROM_BYTES + 4096, np.uint8)
    rows[:] = 1.0
    assert isinstance(rows.base, memoryview) and isinstance(rows.base.obj, mmap.mmap)
    assert "nh" in _vm_flags(rows) and "hg" not in _vm_flags(rows)
    assert "hg" in _vm_flags(buffer) and "nh" not in _vm_flags(buffer)
    assert float(rows.sum()) == rows.shape[0]


def test_a_small_rows_array_is_numpy_s_own() -> None:
    small = rows_array(1000, np.int32)
    assert small.base is None and small.shape == (1000,) and small.dtype == np.int32
    assert rows_array(0, np.float32).shape == (0,)


@pytest.mark.parametrize("length", [1000, HUGE_FROM_BYTES // 4 + 1024])
def test_a_rows_array_grown_keeps_what_was_used_and_has_the_room_asked(length: int) -> None:
    a = rows_array(length, np.int32)
    a[:] = np.arange(length, dtype=np.int32)
    b = rows_grown(a, 2 * length, length - 10)
    assert b.shape == (2 * length,) and b.dtype == np.int32
    assert np.array_equal(b[:length - 10], np.arange(length - 10, dtype=np.int32))
    b[length:] = 7                                  # the new room is writable
    assert int(a[-1]) == length - 1                 # the old array is left as it was


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_pages_of_a_region_past_what_is_used_are_given_back() -> None:
    a = rows_array(64 << 20, np.uint8)
    a[:] = 3
    full = _resident_mb()
    head = given_back_after(a, (16 << 20) + 5)
    assert head.shape == ((16 << 20) + 5,) and int(head[-1]) == 3 and int(head[0]) == 3
    assert _resident_mb() < full - 40               # the 48 MB past it are gone
    small = np.arange(10)
    assert given_back_after(small, 4).tolist() == [0, 1, 2, 3]  # numpy's own: a view
