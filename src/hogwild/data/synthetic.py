"""Synthetic sparse classification sets: RCV1-shaped tf-idf rows and the uniform "seed000" set."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from hogwild.base.jit import njit
from hogwild.data._threads import default_threads, run_parallel
from hogwild.data.csr import CSRData

_ZIPF_SHIFT = 10.0  # popularity of rank r ~ 1 / (r + _ZIPF_SHIFT)
_MASK64 = (1 << 64) - 1


# --- a small counter-based generator: every row draws from its own stream -----------------
# Seeding each row from (seed, row) makes the output independent of how rows are split
# across threads, so results are reproducible for a seed whatever the core count.

@njit(nogil=True, cache=True, inline="always")
def _mix(z: Any) -> Any:  # pragma: no cover - compiled
    """SplitMix64 finaliser."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True, inline="always")
def _next(state: Any) -> Any:  # pragma: no cover - compiled
    """Advance a SplitMix64 state; return (new_state, 64 random bits)."""
    state = state + np.uint64(0x9E3779B97F4A7C15)
    return state, _mix(state)


@njit(nogil=True, cache=True, inline="always")
def _uniform(bits: Any) -> float:  # pragma: no cover - compiled
    """A float64 in [0, 1) from 53 of the bits."""
    return np.float64(bits >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True, inline="always")
def _row_state(seed: Any, row: int) -> Any:  # pragma: no cover - compiled
    return _mix(seed ^ (np.uint64(row) * np.uint64(0xD1B54A32D192ED03)))


@njit(nogil=True, cache=True)
def _fill_rcv1(r0: int, r1: int, seed: Any, indptr: Any, log_span: float, rank_to_id: Any,
               id_to_rank: Any, log_tf: Any, idf_by_rank: Any, w_star: Any, indices: Any,
               values: Any, margins: Any) -> None:  # pragma: no cover - compiled
    """Draw rows r0:r1: Zipf-popular distinct features, tf-idf values with unit L2 norm, and
    each row's margin against the planted separator.

    A popularity rank is drawn by inverting the continuous Zipf-like law with density
    ~ 1 / (x + shift) on [0, n_features) (one exp, no table) and mapped to a feature id;
    values follow once the row's ids are known in sorted order.
    """
    n_features = rank_to_id.shape[0]
    shift = _ZIPF_SHIFT
    max_tf = log_tf.shape[0] - 1
    # The row's ids as a bitset (6 KB for RCV1's width, so it stays in L1): distinctness
    # checks are one bit test and reading the set words in order yields the ids sorted.
    bits_of = np.zeros((n_features + 63) // 64, dtype=np.uint64)
    one = np.uint64(1)
    for r in range(r0, r1):
        state = _row_state(seed, r)
        a = indptr[r]
        k = indptr[r + 1] - a
        got = 0
        tries = 0
        lo = bits_of.shape[0]
        hi = 0
        while got < k:
            state, bits = _next(state)
            if tries < 64 * k + 64:
                tries += 1
                i = int(shift * np.exp(_uniform(bits) * log_span) - shift)
                f = rank_to_id[min(i, n_features - 1)]
            else:
                # The popular features are used up: take the rest uniformly.
                f = int(_uniform(bits) * n_features)
            w = f >> 6
            mask = one << np.uint64(f & 63)
            if (bits_of[w] & mask) == 0:
                bits_of[w] |= mask
                got += 1
                lo = min(lo, w)
                hi = max(hi, w)
        j = a
        for w in range(lo, hi + 1):
            x = bits_of[w]
            if x != 0:
                bits_of[w] = 0
                while x != 0:
                    t: Any = trailing_zeros(x)  # type: ignore[call-arg]
                    indices[j] = w * 64 + np.int64(t)
                    j += 1
                    x &= x - one
        row = indices[a:a + k]
        norm = 0.0
        for j in range(k):
            state, bits = _next(state)
            # term frequency 1 + geometric(1/2) from the trailing zero bits, sublinear tf-idf
            top_bit = np.uint64(1) << np.uint64(63)
            zero_bits: Any = trailing_zeros(bits | top_bit)  # type: ignore[call-arg]
            tf = min(max_tf, int(zero_bits) + 1)
            v = log_tf[tf] * idf_by_rank[id_to_rank[row[j]]]
            values[a + j] = v
            norm += v * v
        scale = 1.0 / np.sqrt(norm)
        m = 0.0
        for j in range(k):
            v = np.float32(values[a + j] * scale)
            values[a + j] = v
            m += np.float64(v) * w_star[row[j]]
        margins[r] = m


@njit(nogil=True, cache=True)
def _fill_uniform(r0: int, r1: int, seed: Any, indptr: Any, n_features: int, binary: bool,
                  w_star: Any, indices: Any, values: Any,
                  margins: Any) -> None:  # pragma: no cover - compiled
    """Draw rows r0:r1 with distinct uniform feature ids and uniform (0, 1] (or unit) values.

    Distinctness by sorting the row and redrawing a repeated id (rare for wide feature
    spaces), which avoids a feature-sized lookup table and its cache misses.
    """
    for r in range(r0, r1):
        state = _row_state(seed, r)
        a = indptr[r]
        k = indptr[r + 1] - a
        row = indices[a:a + k]
        for j in range(k):
            state, bits = _next(state)
            row[j] = int(_uniform(bits) * n_features)
        row.sort()
        dup = True
        while dup:
            dup = False
            for j in range(1, k):
                if row[j] == row[j - 1]:
                    dup = True
                    state, bits = _next(state)
                    row[j] = int(_uniform(bits) * n_features)
            if dup:
                row.sort()
        m = 0.0
        for j in range(k):
            if binary:
                v = np.float32(1.0)
            else:
                state, bits = _next(state)
                v = np.float32(1.0 - _uniform(bits))  # (0, 1]
            values[a + j] = v
            m += np.float64(v) * w_star[row[j]]
        margins[r] = m


def _ranges(n_rows: int, threads: int) -> list[tuple[int, int]]:
    t = max(1, min(threads, n_rows // 10_000 + 1))
    bounds = [n_rows * i // t for i in range(t + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(t)]


def _kernel_seed(rng: np.random.Generator) -> np.uint64:
    return np.uint64(int(rng.integers(0, 1 << 63)) * 2 + 1)


def _labels(margins: np.ndarray, bias: float, noise: float,
            rng: np.random.Generator) -> np.ndarray:
    labels = np.where(margins + bias >= 0.0, 1.0, -1.0).astype(np.float32)
    if noise > 0.0:
        flip = rng.random(margins.shape[0]) < noise
        labels[flip] = -labels[flip]
    return labels


def _check(n_rows: int, n_features: int, noise: float) -> None:
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    if not 0.0 <= noise <= 0.5:
        raise ValueError(f"noise must be in [0, 0.5], got {noise}")


def make_rcv1_like(n_rows: int, *, n_features: int = 47236, avg_nnz: float = 75,
                   noise: float = 0.05, seed: int = 0,
                   threads: int | None = None) -> CSRData:
    """RCV1-shaped rows: lognormal row lengths (mean ~avg_nnz, at least 1), Zipf-like feature
    popularity, positive tf-idf values with unit L2 norm per row, balanced labels +-1 from a
    planted sparse separator with a ``noise`` share flipped. Same seed, same arrays."""
    _check(n_rows, n_features, noise)
    if avg_nnz < 1:
        raise ValueError(f"avg_nnz must be >= 1, got {avg_nnz}")
    rng = np.random.default_rng(seed)
    sigma = 0.8
    mu = np.log(avg_nnz) - sigma * sigma / 2.0
    lengths = np.rint(rng.lognormal(mu, sigma, size=n_rows))
    lengths = np.clip(lengths, 1, n_features).astype(np.int64)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])

    # Popularity of rank r: the mass of density 1 / (x + shift) on [r, r + 1); ranks are
    # scattered over ids by a permutation.
    log_span = float(np.log((n_features + _ZIPF_SHIFT) / _ZIPF_SHIFT))
    ranks = np.arange(n_features, dtype=np.float64)
    p = np.log1p(1.0 / (ranks + _ZIPF_SHIFT)) / log_span
    rank_to_id = rng.permutation(n_features).astype(np.int32)
    id_to_rank = np.empty(n_features, dtype=np.int32)
    id_to_rank[rank_to_id] = np.arange(n_features, dtype=np.int32)
    doc_share = np.minimum(1.0, p * avg_nnz)  # chance that a row holds the feature
    idf_by_rank = 1.0 + np.log(1.0 / doc_share)
    log_tf = 1.0 + np.log(np.maximum(1.0, np.arange(33, dtype=np.float64)))
    # Sparse planted separator: a fifth of the 1,000 most popular features carry weight, so
    # that the label depends on features seen often enough to be learnt.
    top = min(n_features, 1000)
    w_by_rank = np.zeros(n_features, dtype=np.float64)
    w_by_rank[:top] = np.where(rng.random(top) < 0.2, rng.standard_normal(top), 0.0)
    w_star = np.empty(n_features, dtype=np.float32)
    w_star[rank_to_id] = w_by_rank
    kseed = _kernel_seed(rng)

    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    values = np.empty(int(indptr[-1]), dtype=np.float32)
    margins = np.zeros(n_rows, dtype=np.float64)
    jobs = [(r0, r1, kseed, indptr, log_span, rank_to_id, id_to_rank, log_tf, idf_by_rank,
             w_star, indices, values, margins)
            for r0, r1 in _ranges(n_rows, threads or default_threads())]
    run_parallel(_fill_rcv1, jobs)
    bias = -float(np.median(margins)) if n_rows else 0.0
    labels = _labels(margins, bias, noise, rng)
    return CSRData(indptr, indices, values, labels, n_features)


def make_seed000(n_rows: int, *, n_features: int = 1_000_000, min_nnz: int = 10,
                 max_nnz: int = 60, binary: bool = False, noise: float = 0.0, seed: int = 0,
                 threads: int | None = None) -> CSRData:
    """Uniform rows: non-zeros per row uniform in [min_nnz, max_nnz], distinct uniform feature
    ids, values uniform in (0, 1] (1.0 if ``binary``), labels +-1 = sign of a planted dense
    Gaussian separator, ``noise`` share flipped. Same seed, same arrays."""
    _check(n_rows, n_features, noise)
    if not 1 <= min_nnz <= max_nnz <= n_features:
        raise ValueError(f"need 1 <= min_nnz <= max_nnz <= n_features, got "
                         f"{min_nnz}, {max_nnz}, {n_features}")
    rng = np.random.default_rng(seed)
    indptr, indices, values, margins = _uniform_rows(
        rng, n_rows, n_features, min_nnz, max_nnz, bool(binary), threads)
    labels = _labels(margins, 0.0, noise, rng)
    return CSRData(indptr, indices, values, labels, n_features)


def _uniform_rows(rng: np.random.Generator, n_rows: int, n_features: int, min_nnz: int,
                  max_nnz: int, binary: bool, threads: int | None,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """indptr, indices, values and the planted margins of uniform rows (see make_seed000);
    draws from ``rng`` in a fixed order, so a seed always gives the same arrays."""
    lengths = rng.integers(min_nnz, max_nnz + 1, size=n_rows, dtype=np.int64)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    w_star = rng.standard_normal(n_features).astype(np.float32)
    kseed = _kernel_seed(rng)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    values = np.empty(int(indptr[-1]), dtype=np.float32)
    margins = np.zeros(n_rows, dtype=np.float64)
    jobs = [(r0, r1, kseed, indptr, n_features, binary, w_star, indices, values, margins)
            for r0, r1 in _ranges(n_rows, threads or default_threads())]
    run_parallel(_fill_uniform, jobs)
    return indptr, indices, values, margins


def make_regression(n_rows: int, *, n_features: int = 1000, min_nnz: int = 10,
                    max_nnz: int = 60, noise: float = 0.1, seed: int = 0,
                    threads: int | None = None) -> CSRData:
    """Sparse least-squares rows: distinct uniform feature ids (min_nnz..max_nnz per row),
    uniform positive values scaled to unit L2 norm per row (so a step size below 2 is stable
    for the squared loss), targets ``x . w* + noise * N(0, 1)`` for a planted dense Gaussian
    ``w*``. Same seed, same arrays."""
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    if not 1 <= min_nnz <= max_nnz <= n_features:
        raise ValueError(f"need 1 <= min_nnz <= max_nnz <= n_features, got "
                         f"{min_nnz}, {max_nnz}, {n_features}")
    if not 0.0 <= noise < float("inf"):
        raise ValueError(f"noise (standard deviation) must be >= 0 and finite, got {noise}")
    rng = np.random.default_rng(seed)
    indptr, indices, values, margins = _uniform_rows(
        rng, n_rows, n_features, min_nnz, max_nnz, False, threads)
    lengths = np.diff(indptr)
    if n_rows:
        # Unit rows: the margin is linear in the values, so it scales with them.
        sq = values.astype(np.float64) ** 2
        norms = np.sqrt(np.add.reduceat(sq, indptr[:-1]))
        values /= np.repeat(norms, lengths).astype(np.float32)
        margins /= norms
    targets = margins + noise * rng.standard_normal(n_rows)
    return CSRData(indptr, indices, values, targets.astype(np.float32), n_features)
