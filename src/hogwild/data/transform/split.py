"""Row permutations, train/validation/test splits and per-worker shards of a CSRData."""

from __future__ import annotations

import numpy as np

from hogwild.data.csr import CSRData

SHARD_MODES = ("partition", "replicate")


def shuffle_order(n_rows: int, seed: int) -> np.ndarray:
    """The random row order of ``seed``: row i of a shuffled set is row ``order[i]`` of the
    input. The one definition shared by splits and by loaders that shuffle while loading."""
    return np.random.default_rng(seed).permutation(n_rows)


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
    n = data.n_rows
    n_val, n_test = split_sizes(n, val_fraction, test_fraction)
    order = shuffle_order(n, seed)
    test_rows = order[:n_test]
    val_rows = order[n_test:n_test + n_val]
    train_rows = order[n_test + n_val:]
    return data.take(train_rows), data.take(val_rows), data.take(test_rows)


def split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    """(validation rows, test rows) of a split of ``n`` rows; ValueError for bad fractions."""
    val_fraction = _check_fraction("val_fraction", val_fraction)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got "
                         f"{val_fraction + test_fraction}")
    return round(n * val_fraction), round(n * test_fraction)


def split_shuffled(data: CSRData, *, val_fraction: float,
                   test_fraction: float) -> tuple[CSRData, CSRData, CSRData]:
    """The split of :func:`train_val_test_split` for rows that are already in
    ``shuffle_order(n, seed)`` (e.g. loaded with ``shuffle_seed=seed``): the same three sets,
    as views of ``data`` instead of copies."""
    n = data.n_rows
    n_val, n_test = split_sizes(n, val_fraction, test_fraction)
    return (data.slice(n_test + n_val, n), data.slice(n_test, n_test + n_val),
            data.slice(0, n_test))


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
