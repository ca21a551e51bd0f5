"""Asynchrony-noise diagnostics of a data set: feature popularity and its row conflict graph.

HOGWILD! threads conflict when two examples in flight at the same time update a common
weight. The conflict graph has one vertex per row and an edge between two rows whose
supports (sets of non-zero features) share a feature; the bias, which every row touches
when it is fitted, is left out, as in the theory.

Quantities (n rows):

* ``omega`` Ω: the largest support, max_i |supp(i)| (the HOGWILD! paper's Ω).
* ``max_feature_share``: the largest fraction of rows holding one feature,
  max_f df(f) / n. The HOGWILD! paper (Niu, Recht, Ré, Wright 2011) calls this Δ; here it
  keeps this longer name so that Δ can mean the graph degree below.
* ``max_degree`` Δ and ``avg_degree`` Δ̄: the maximum and average vertex degree of the
  conflict graph, deg(i) = |{j != i : supp(j) ∩ supp(i) != ∅}|
  = |∪_{f ∈ supp(i)} rows(f)| - 1 (0 for an empty row).
* ``rho`` ρ: the paper's conflict probability, the largest fraction of rows (itself
  included) whose support meets one row's support: ρ = (Δ + 1) / n.
* ``tau_bound`` τ: the safe concurrency of the perturbed-iterate analysis of HOGWILD!,
  τ ≤ n / (2Δ): while at most that many examples are in flight at once (updates computed
  but not yet visible to the others), the noise asynchrony adds stays below the gradient
  noise SGD has anyway, so the serial convergence rate holds. ``tau_bound_avg`` is the same
  with the average degree (n / (2Δ̄)), what a typical example sees. In hogwild the examples
  in flight are about threads (one process) and threads x workers x round_size (a
  distributed run: a worker sees the others' updates once per round).

Exact degrees come from the CSC structure: deg(i) is counted by stamping the rows of every
posting list of i's features, a cost of Σ_f df(f)² for the whole graph, so it is done only
under a budget. Otherwise degrees are estimated: for each of ``sample_rows`` random rows
(plus the longest rows and, when feature counts are known, the rows whose features are most
popular) the share of ``partners`` uniformly drawn other rows that conflict with it,
scaled by n - 1. The average degree gets a 95 % normal confidence interval from the spread
of the per-row estimates (rows and partners drawn independently, so each is unbiased); the
maximum is the largest estimate, never below the exact lower bound max_f df(f) - 1 and
reported with exact bounds when feature counts are known.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.base.jit import njit
from hogwild.data.csr import CSRData
from hogwild.data.transform.reorder import document_frequency

I64 = npt.NDArray[np.int64]

# Exact degrees cost Σ_f df(f)² posting-list visits; below this the whole graph is walked.
EXACT_BUDGET = 400_000_000
# Sampled estimate: rows whose degree is estimated, and the other rows each is checked against.
SAMPLE_ROWS = 1_000
PARTNERS = 4_096
# Extra candidates for the maximum degree: the longest rows and the most popular-featured ones.
TOP_ROWS = 32
# The quick form (run at the start of `train` and of a distributed run): a bounded cost that
# does not grow with the data (no pass over every non-zero above QUICK_FULL_SCAN_NNZ).
QUICK_EXACT_BUDGET = 2_000_000
QUICK_SAMPLE_ROWS = 128
QUICK_PARTNERS = 1_024
QUICK_FULL_SCAN_NNZ = 2_000_000
# At the start of a run the sampling stops at this share of the time the data took to load.
STARTUP_SHARE = 0.05
# Rows per kernel call when the sampling runs against a deadline.
_CHUNK_ROWS = 16
# Shares of non-zeros reported for the top features.
TOP_FEATURES = (1, 10, 100, 1_000)


@njit(nogil=True, cache=True)
def _csc(indptr: Any, indices: Any, df: Any) -> Any:  # pragma: no cover - compiled
    """Posting lists: (col_ptr, col_rows), the rows of each feature in ascending order."""
    n_rows = indptr.shape[0] - 1
    n_features = df.shape[0]
    col_ptr = np.zeros(n_features + 1, dtype=np.int64)
    for f in range(n_features):
        col_ptr[f + 1] = col_ptr[f] + df[f]
    fill = col_ptr[:-1].copy()
    col_rows = np.empty(indices.shape[0], dtype=np.int64)
    for r in range(n_rows):
        for k in range(indptr[r], indptr[r + 1]):
            f = indices[k]
            col_rows[fill[f]] = r
            fill[f] += 1
    return col_ptr, col_rows


@njit(nogil=True, cache=True)
def _exact_degrees(indptr: Any, indices: Any, col_ptr: Any, col_rows: Any,
                   out: Any) -> None:  # pragma: no cover - compiled
    """deg(i) for every row: distinct other rows met through i's posting lists."""
    n_rows = indptr.shape[0] - 1
    stamp = np.full(n_rows, -1, dtype=np.int64)
    for i in range(n_rows):
        stamp[i] = i
        count = 0
        for k in range(indptr[i], indptr[i + 1]):
            f = indices[k]
            for q in range(col_ptr[f], col_ptr[f + 1]):
                j = col_rows[q]
                if stamp[j] != i:
                    stamp[j] = i
                    count += 1
            if count == n_rows - 1:  # conflicts with every row already
                break
        out[i] = count


@njit(nogil=True, cache=True)
def _sampled_hits(indptr: Any, indices: Any, n_features: int, rows: Any, p_indptr: Any,
                  p_indices: Any, p_ids: Any, row_hits: Any, row_draws: Any,
                  partner_hits: Any) -> None:  # pragma: no cover - compiled
    """For each row in ``rows``: how many partner rows (a compact copy, ``p_ids`` their ids)
    other than itself share a feature with it (``row_hits``, out of ``row_draws``); and for
    each partner, how many of ``rows`` it conflicts with (``partner_hits``). The partners are
    one small contiguous block, so the scan stays in cache whatever the data size."""
    mark = np.full(n_features, -1, dtype=np.int64)
    for t in range(rows.shape[0]):
        i = rows[t]
        for k in range(indptr[i], indptr[i + 1]):
            mark[indices[k]] = t
        hits = 0
        draws = 0
        for p in range(p_ids.shape[0]):
            if p_ids[p] == i:
                continue
            draws += 1
            for k in range(p_indptr[p], p_indptr[p + 1]):
                if mark[p_indices[k]] == t:
                    hits += 1
                    partner_hits[p] += 1
                    break
        row_hits[t] = hits
        row_draws[t] = draws


@njit(nogil=True, cache=True)
def _popularity_scores(indptr: Any, indices: Any, df: Any, out: Any) -> None:  # pragma: no cover
    """Σ_{f in supp(i)} (df(f) - 1): an upper bound of deg(i) and the cost of its exact count."""
    for i in range(indptr.shape[0] - 1):
        s = 0
        for k in range(indptr[i], indptr[i + 1]):
            s += df[indices[k]] - 1
        out[i] = s


@dataclass(frozen=True)
class ConflictStats:
    """The diagnostics of one data set (see the module docstring for the definitions)."""

    mode: str                         # "exact" or "sampled"
    rows: int
    features: int
    nnz: int
    omega: int
    mean_support: float
    features_used: int                # features held by at least one row (sampled rows if
    top_share: dict[str, float]       # the feature counts were sampled)
    half_nnz_features: int            # fewest features holding half of the non-zeros
    counts_sampled_rows: int          # 0 = feature counts from every row
    max_feature_share: float          # the paper's Δ
    avg_degree: float
    avg_degree_ci95: float            # half-width; 0 when exact
    max_degree: int
    max_degree_bounds: tuple[int, int] | None  # exact [low, high] around a sampled maximum
    rho: float
    tau_bound: float | None           # n / (2Δ); None = no conflicts (unbounded)
    tau_bound_avg: float | None       # n / (2Δ̄)
    sample_rows: int
    partners: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (for metrics.json)."""
        out = asdict(self)
        if self.max_degree_bounds is not None:
            out["max_degree_bounds"] = list(self.max_degree_bounds)
        return out


def _top(values: npt.NDArray[Any], k: int) -> npt.NDArray[Any]:
    """Positions of the k largest values (any order; a partial sort, O(n))."""
    k = min(k, values.shape[0])
    return np.argpartition(values, values.shape[0] - k)[values.shape[0] - k:]


def _tau(n: int, degree: float) -> float | None:
    return None if degree <= 0 else n / (2.0 * degree)


def _popularity(df: I64, nnz_total: int) -> tuple[int, dict[str, float], int]:
    """(features used, share of non-zeros in the top 1/10/100/1000, features for half)."""
    used = int(np.count_nonzero(df))
    if nnz_total == 0:
        return used, {str(k): 0.0 for k in TOP_FEATURES}, 0
    top = np.sort(df[df > 0])[::-1]
    cum = np.cumsum(top)
    shares = {str(k): float(cum[min(k, top.shape[0]) - 1] / cum[-1]) for k in TOP_FEATURES}
    half = int(np.searchsorted(cum, cum[-1] / 2.0, side="left")) + 1
    return used, shares, half


def analyze_conflicts(data: CSRData, *, exact_budget: int = EXACT_BUDGET,
                      sample_rows: int = SAMPLE_ROWS, partners: int = PARTNERS,
                      top_rows: int = TOP_ROWS, full_scan_nnz: int | None = None,
                      time_budget: float | None = None, seed: int = 0) -> ConflictStats:
    """Conflict statistics of ``data``: exact when Σ_f df(f)² <= ``exact_budget``, else
    sampled (``sample_rows`` random rows against ``partners`` random others each).

    ``full_scan_nnz``: above this many non-zeros, no pass over every non-zero is made (feature
    counts come from a row sample too), which bounds the cost whatever the data size.
    ``time_budget``: seconds after which the sampled rows stop being taken (the estimate then
    rests on the rows done, at least 32; its interval says so).
    """
    t0 = time.perf_counter()
    n = data.n_rows
    lengths = np.diff(data.indptr)
    omega = int(lengths.max()) if n else 0
    mean_support = data.nnz / n if n else 0.0
    rng = np.random.default_rng(seed)
    full_scan = full_scan_nnz is None or data.nnz <= full_scan_nnz
    if full_scan:
        df = document_frequency(data)
        counts_rows = 0
        df_share = df / max(n, 1)
        nnz_counted = data.nnz
    else:
        # Feature counts from the partner rows (a uniform sample), scaled to the whole set.
        partner_ids, block = _partners(data, partners, rng)
        counts_rows = int(partner_ids.shape[0])
        df = document_frequency(block)
        df_share = df / counts_rows
        nnz_counted = int(df.sum())
    used, top_share, half = _popularity(df, nnz_counted)
    max_share = float(df_share.max()) if df_share.shape[0] else 0.0

    if n <= 1:
        return _finish(data, "exact", omega, mean_support, used, top_share, half, counts_rows,
                       max_share, np.zeros(n, dtype=np.int64), 0.0, None, 0, 0, t0)
    if full_scan and float(np.sum(df.astype(np.float64) ** 2)) <= exact_budget:
        col_ptr, col_rows = _csc(data.indptr, data.indices, df)
        degrees = np.empty(n, dtype=np.int64)
        _exact_degrees(data.indptr, data.indices, col_ptr, col_rows, degrees)
        return _finish(data, "exact", omega, mean_support, used, top_share, half, counts_rows,
                       max_share, degrees, 0.0, None, 0, 0, t0)

    # Sampled: random rows for the average; random + longest (+ most popular) for the maximum.
    m = min(n, sample_rows)
    randoms = rng.choice(n, size=m, replace=False).astype(np.int64)
    extra = [_top(lengths, top_rows)]
    bounds: tuple[int, int] | None = None
    low = max(round(max_share * n) - 1, 0)
    if full_scan:
        scores = np.empty(n, dtype=np.int64)
        _popularity_scores(data.indptr, data.indices, df, scores)
        extra.append(_top(scores, top_rows))
        high = int(min(n - 1, int(scores.max())))
        bounds = (low, high)
    candidates = np.unique(np.concatenate(extra)).astype(np.int64)
    # One partner sample shared by every row: a two-sample U-statistic for the average degree,
    # whose variance has a row part and a partner part (both estimated below).
    if full_scan:
        partner_ids, block = _partners(data, partners, rng)
    cand_rates, _ = _hit_rates(data, candidates, block, partner_ids)
    deadline = None if time_budget is None else t0 + time_budget
    row_rates, partner_rates = _hit_rates(data, randoms, block, partner_ids, deadline)
    m = row_rates.shape[0]
    avg = float(row_rates.mean()) * (n - 1)
    var = 0.0
    if 1 < m < n:
        var += float(row_rates.var(ddof=1)) / m
    if partner_ids.shape[0] > 1 and partners < n - 1:
        var += float(partner_rates.var(ddof=1)) / partner_ids.shape[0]
    ci = 1.96 * math.sqrt(var) * (n - 1)
    top_estimate = float(max(row_rates.max(), cand_rates.max())) * (n - 1)
    max_degree = max(low, round(top_estimate))
    if bounds is not None:
        max_degree = min(max_degree, bounds[1])
    s = int(partner_ids.shape[0])
    return _finish(data, "sampled", omega, mean_support, used, top_share, half, counts_rows,
                   max_share, None, avg, ci, max_degree, m, t0, bounds=bounds, partners=s)


def _partners(data: CSRData, partners: int,
              rng: np.random.Generator) -> tuple[I64, CSRData]:
    """Partner rows: their ids and a compact copy (every row when there are few)."""
    n = data.n_rows
    if partners >= n - 1:
        return np.arange(n, dtype=np.int64), data
    ids = np.sort(rng.choice(n, size=partners, replace=False)).astype(np.int64)
    return ids, data.take(ids)


def _hit_rates(data: CSRData, rows: I64, block: CSRData, partner_ids: I64,
               deadline: float | None = None,
               ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(share of partners each row conflicts with, share of rows each partner conflicts with).

    With a ``deadline`` (time.perf_counter() value) rows are taken in chunks and the scan stops
    at the first chunk boundary past it (after at least two chunks): only the rows done are
    returned."""
    row_hits = np.zeros(rows.shape[0], dtype=np.int64)
    row_draws = np.zeros(rows.shape[0], dtype=np.int64)
    partner_hits = np.zeros(partner_ids.shape[0], dtype=np.int64)
    chunk = rows.shape[0] if deadline is None else _CHUNK_ROWS
    done = 0
    while done < rows.shape[0]:
        part = slice(done, done + chunk)
        _sampled_hits(data.indptr, data.indices, data.n_features, rows[part], block.indptr,
                      block.indices, partner_ids, row_hits[part], row_draws[part],
                      partner_hits)
        done = min(done + chunk, rows.shape[0])
        if deadline is not None and done >= 2 * chunk and time.perf_counter() > deadline:
            break
    return (row_hits[:done] / np.maximum(row_draws[:done], 1),
            partner_hits / max(done, 1))


def _finish(data: CSRData, mode: str, omega: int, mean_support: float, used: int,
            top_share: dict[str, float], half: int, counts_rows: int, max_share: float,
            degrees: I64 | None, avg: float, ci: float | None, max_degree: int,
            sample_rows: int, t0: float, *, bounds: tuple[int, int] | None = None,
            partners: int = 0) -> ConflictStats:
    n = data.n_rows
    if degrees is not None:  # exact
        avg = float(degrees.mean()) if n else 0.0
        max_degree = int(degrees.max()) if n else 0
        ci = 0.0
    return ConflictStats(
        mode=mode, rows=n, features=data.n_features, nnz=data.nnz, omega=omega,
        mean_support=mean_support, features_used=used, top_share=top_share,
        half_nnz_features=half, counts_sampled_rows=counts_rows, max_feature_share=max_share,
        avg_degree=avg, avg_degree_ci95=float(ci or 0.0), max_degree=max_degree,
        max_degree_bounds=bounds, rho=(max_degree + 1) / n if n else 0.0,
        tau_bound=_tau(n, max_degree), tau_bound_avg=_tau(n, avg), sample_rows=sample_rows,
        partners=partners, seconds=time.perf_counter() - t0)


def without_top_features(data: CSRData, k: int) -> tuple[CSRData, float]:
    """``data`` with its ``k`` most frequent features removed from every row, and the share
    of the non-zeros they held: how much of the conflict graph a few features make."""
    df = document_frequency(data)
    hot = np.zeros(data.n_features, dtype=bool)
    hot[_top(df, k)] = True
    keep = ~hot[data.indices]
    rows = np.repeat(np.arange(data.n_rows, dtype=np.int64), np.diff(data.indptr))
    indptr = np.zeros(data.n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=data.n_rows), out=indptr[1:])
    share = 1.0 - float(keep.mean()) if data.nnz else 0.0
    return CSRData(indptr, data.indices[keep], data.values[keep], data.labels,
                   data.n_features, data.label_note), share


def quick_conflicts(data: CSRData, seed: int = 0,
                    time_budget: float | None = None) -> ConflictStats:
    """The bounded-cost form run at the start of training: cost independent of the data size
    above QUICK_FULL_SCAN_NNZ non-zeros, and the row sampling cut at ``time_budget``."""
    return analyze_conflicts(data, exact_budget=QUICK_EXACT_BUDGET,
                             sample_rows=QUICK_SAMPLE_ROWS, partners=QUICK_PARTNERS,
                             top_rows=8, full_scan_nnz=QUICK_FULL_SCAN_NNZ,
                             time_budget=time_budget, seed=seed)


@dataclass(frozen=True)
class Recommendation:
    """How many examples may be in flight, split into threads x workers x round size."""

    tau: float | None
    threads: int
    workers: int
    round_size: int           # examples per thread between exchanges (1 = one process)
    in_flight: int            # threads x workers x round_size as configured
    fits: bool                # the configured in-flight count is within the bound


def recommend(stats: ConflictStats, threads: int, workers: int = 1,
              round_size: int = 1) -> Recommendation:
    """Keep the configured threads and workers where the bound allows, and give the largest
    round size that keeps threads x workers x round_size <= τ (at least 1)."""
    return recommend_for(stats.tau_bound, threads, workers, round_size)


def recommend_for(tau: float | None, threads: int, workers: int = 1,
                  round_size: int = 1) -> Recommendation:
    """:func:`recommend` for a bound τ known already (None: no conflicts)."""
    in_flight = threads * workers * round_size
    if tau is None:
        return Recommendation(None, threads, workers, round_size, in_flight, True)
    budget = max(1, math.floor(tau))
    t = max(1, min(threads, budget))
    w = max(1, min(workers, budget // t))
    r = max(1, budget // (t * w))
    return Recommendation(tau, t, w, r, in_flight, in_flight <= tau)


def _num(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def summary_line(stats: ConflictStats, rec: Recommendation, *, distributed: bool) -> str:
    """The one line printed at the start of `train` and of a distributed run."""
    how = ("exact" if stats.mode == "exact" else
           f"sampled {stats.sample_rows} rows x {stats.partners} partners")
    avg = _num(stats.avg_degree) + (f"±{_num(stats.avg_degree_ci95)}"
                                    if stats.mode == "sampled" else "")
    head = (f"conflicts ({how}, {stats.seconds * 1e3:.0f} ms): Ω={stats.omega:,}, "
            f"Δ={'~' if stats.mode == 'sampled' else ''}{stats.max_degree:,} "
            f"(avg {avg}), ρ={stats.rho:.3g}; ")
    return head + advice(rec, distributed=distributed)


def advice(rec: Recommendation, *, distributed: bool) -> str:
    """τ and what it means for the configured parallelism."""
    if rec.tau is None:
        return "no two rows share a feature: any parallelism is safe"
    if rec.tau < 1:
        return (f"safe in-flight examples n/(2Δ) = {rec.tau:.2g} < 1: rows conflict so densely "
                "that no asynchrony is covered by the theory; watch the validation loss")
    verdict = "within it" if rec.fits else "exceeds it"
    if not distributed:
        return (f"safe in-flight examples n/(2Δ) = {_num(rec.tau)}: {rec.in_flight} thread(s) "
                f"{verdict}")
    return (f"safe in-flight examples n/(2Δ) = {_num(rec.tau)}: threads x workers x round_size "
            f"as configured = {rec.in_flight:,} {verdict}; at most {rec.threads} x "
            f"{rec.workers} x {rec.round_size:,}")


def startup_report(train: CSRData, *, threads: int, load_seconds: float, workers: int = 1,
                   round_size: int = 1, distributed: bool = False,
                   seed: int = 0) -> tuple[str, dict[str, Any]]:
    """The quick statistics of a run's training rows: (the line to print, the metrics entry).
    The sampling stops at STARTUP_SHARE of the time the data took to load."""
    stats = quick_conflicts(train, seed=seed, time_budget=STARTUP_SHARE * load_seconds)
    rec = recommend(stats, threads, workers, round_size)
    entry = stats.to_json()
    entry["recommendation"] = asdict(rec)
    entry["share_of_load_time"] = stats.seconds / max(load_seconds, 1e-9)
    return summary_line(stats, rec, distributed=distributed), entry


def warmup() -> None:
    """Run every kernel of this module on a tiny set (compiles, or loads numba's cache)."""
    indptr = np.array([0, 2, 3, 5, 6], dtype=np.int64)
    indices = np.array([0, 1, 1, 2, 3, 3], dtype=np.int32)
    tiny = CSRData(indptr, indices, np.ones(6, dtype=np.float32),
                   np.zeros(4, dtype=np.float32), 4)
    analyze_conflicts(tiny)
    analyze_conflicts(tiny, exact_budget=0, partners=2)
