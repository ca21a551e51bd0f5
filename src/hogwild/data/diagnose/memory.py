"""Memory a data set's feature ids need, against the machine's: one line instead of an OOM.

Arrays kept per feature id (weights, document frequencies, the renumbering) are as long as
the largest id, however few ids are used: one stray id of 2,000,000,000 asks for tens of GB.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from hogwild.errors import DataError

# Where a container's memory limit is found (cgroup v2, then v1): a pod's limit is what an
# allocation meets, not the node's RAM.
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def physical_memory() -> int | None:
    """The memory this process can have in bytes: the machine's RAM, or the container's
    limit when that is lower (None where the system says neither)."""
    try:
        ram: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = None
    for path in CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) means no limit
            limit = int(text)
            ram = limit if ram is None else min(ram, limit)
        break
    return ram


# What a refusal names: the arrays a job keeps per feature id, as long as the largest id.
PER_ID = "the weights and counts kept per feature id"


def size_text(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def too_many_features(spec: str, n_features: int, zero_based: bool, need: int, what: str,
                      ram: int | None) -> DataError:
    """The one line for data whose largest feature id alone needs more memory than there is
    (``ram``: the machine's, or None when the limit is another, e.g. ``ulimit -v``)."""
    largest = n_features - (1 if zero_based else 0)
    have = f", more than the {size_text(ram)} this machine allows" if ram and need > ram else ""
    return DataError(f"{spec}: the largest feature id is {largest:,}: {what} need "
                     f"{size_text(need)}{have}; renumber the ids, or hash the columns into "
                     "fewer features (`hogwild hash`, `hash_bits`)")


def check_fits(spec: str, n_features: int, zero_based: bool, need: int, what: str,
               ram: int | None) -> None:
    """DataError (see too_many_features) when ``need`` bytes of per-id arrays exceed ``ram``."""
    if ram is not None and need > ram:
        raise too_many_features(spec, n_features, zero_based, need, what, ram)


@contextlib.contextmanager
def ids_blamed(spec: str, n_features: int, zero_based: bool, need: int, what: str,
               nnz: int) -> Iterator[None]:
    """A MemoryError in the block (below the RAM but beyond a limit: ``ulimit -v``, a
    container's) as too_many_features when the ids' arrays outweigh the rows' own (12 bytes
    per non-zero), as for a stray huge id; any other MemoryError as it is."""
    try:
        yield
    except MemoryError:
        if need <= 12 * nnz:
            raise
        raise too_many_features(spec, n_features, zero_based, need, what, None) from None
