"""base.regions under a memory limit: a region that does not fit is a MemoryError, as numpy's
arrays are, in a process of its own (the limit is the process's)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA on mappings")
def test_a_region_beyond_the_memory_limit_is_a_memory_error_as_numpy_s_arrays_are() -> None:
    """Callers turn a MemoryError into a clear message (a worker's rows that do not fit);
    mmap's own ENOMEM would escape them."""
    code = (
        "import resource\n"
        "import numpy as np\n"
        "from hogwild.base.regions import region_array, rows_array\n"
        "resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))\n"
        "for make in (region_array, rows_array, lambda n, d: np.empty(n, d)):\n"
        "    try:\n"
        "        make(2 << 30, np.uint8)\n"
        "    except MemoryError:\n"
        "        print('MemoryError')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MemoryError"] * 3, done.stdout

