"""base.regions: arrays in anonymous regions of their own, given back whole when freed."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from hogwild.base.regions import region_array
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
