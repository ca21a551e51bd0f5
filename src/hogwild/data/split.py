"""Row permutations, train/validation/test splits and per-worker shards of a CSRData."""

from __future__ import annotations

import numpy as np

from hogwild.data.csr import CSRData

SHARD_MODES = ("partition", "replicate")


def permute(data: CSRData, seed: int) -> CSRData:
    """The rows in a random order (physically copied, so a kernel streams them in order)."""
    order = np.random.default_rng(seed).permutation(data.n_rows)
    return data.take(order)


def _check_fraction(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return value


def train_val_test_split(data: CSRData, *, val_fraction: float, test_fraction: float,
                         seed: int) -> tuple[CSRData, CSRData, CSRData]:
    """Random disjoint split covering every row: (train, validation, test).

    Sizes are ``round(n * fraction)`` for validation and test, the rest is train; all three
    come out permuted.
    """
    val_fraction = _check_fraction("val_fraction", val_fraction)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got "
                         f"{val_fraction + test_fraction}")
    n = data.n_rows
    n_val = round(n * val_fraction)
    n_test = round(n * test_fraction)
    order = np.random.default_rng(seed).permutation(n)
    test_rows = order[:n_test]
    val_rows = order[n_test:n_test + n_val]
    train_rows = order[n_test + n_val:]
    return data.take(train_rows), data.take(val_rows), data.take(test_rows)


def shard(data: CSRData, n_shards: int, *, seed: int,
          mode: str = "partition") -> list[CSRData]:
    """Split the rows among ``n_shards`` workers, each shard physically permuted once.

    ``partition``: disjoint shards covering every row, sizes differ by at most one.
    ``replicate``: every shard holds all rows, each in its own random order.
    """
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    if mode not in SHARD_MODES:
        raise ValueError(f"shard mode must be one of {SHARD_MODES}, got {mode!r}")
    seeds = np.random.SeedSequence(seed).spawn(n_shards + 1)
    if mode == "replicate":
        return [data.take(np.random.default_rng(s).permutation(data.n_rows))
                for s in seeds[1:]]
    order = np.random.default_rng(seeds[0]).permutation(data.n_rows)
    bounds = [data.n_rows * i // n_shards for i in range(n_shards + 1)]
    return [data.take(order[bounds[i]:bounds[i + 1]]) for i in range(n_shards)]
