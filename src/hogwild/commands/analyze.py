"""`hogwild analyze DATA`: feature popularity, the row conflict graph and a safe concurrency."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from hogwild.data.diagnose.conflicts import (
    EXACT_BUDGET,
    PARTNERS,
    SAMPLE_ROWS,
    ConflictStats,
    advice,
    analyze_conflicts,
    recommend,
    without_top_features,
)
from hogwild.data.diagnose.memory import check_fits, ids_blamed, physical_memory
from hogwild.data.sources import describe, load_source
from hogwild.errors import DataError

# The "without the most frequent features" line removes this many.
TOP_REMOVED = 100


# Bytes the analysis holds per feature id at its peak: a few int64/float64 arrays as long as
# the largest id (document frequencies, their shares and order, the graph's column pointers);
# measured 23.4 (peak RSS less the baseline, rows with ids up to 1e8).
BYTES_PER_FEATURE = 24


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def report(stats: ConflictStats, *, threads: int, workers: int, round_size: int) -> list[str]:
    """The human-readable report, one string per line."""
    n = stats.rows
    counted = ("every row" if stats.counts_sampled_rows == 0
               else f"a sample of {stats.counts_sampled_rows:,} rows")
    tops = ", ".join(f"top {int(k):,}: {_pct(v)}" for k, v in stats.top_share.items())
    lines = [
        (f"features: {stats.features_used:,} of {stats.features:,} used (counted over "
         f"{counted}); share of non-zeros held by the most frequent: {tops}; "
         f"{stats.half_nnz_features:,} features hold half of them"),
        (f"supports: Ω (most non-zeros in a row) = {stats.omega:,}, mean "
         f"{stats.mean_support:.1f}; most frequent feature in {_pct(stats.max_feature_share)} "
         "of rows (the HOGWILD! paper's Δ)"),
    ]
    if stats.mode == "exact":
        lines.append(f"conflict graph (exact): max degree Δ = {stats.max_degree:,}, average "
                     f"degree Δ̄ = {stats.avg_degree:,.1f} (of {max(n - 1, 0):,} other rows)")
    else:
        bounds = ("" if stats.max_degree_bounds is None else
                  f", exact bounds [{stats.max_degree_bounds[0]:,}, "
                  f"{stats.max_degree_bounds[1]:,}]")
        lines.append(
            f"conflict graph (sampled: {stats.sample_rows:,} random rows plus the longest and "
            f"most popular ones, each against {stats.partners:,} random rows): max degree "
            f"Δ ≈ {stats.max_degree:,}{bounds}; average degree Δ̄ = {stats.avg_degree:,.1f} "
            f"± {stats.avg_degree_ci95:,.1f} (95 % confidence) of {n - 1:,} other rows")
    lines.append(f"ρ (largest share of rows meeting one row's support) = {stats.rho:.4f}")
    tau_avg = ("unbounded" if stats.tau_bound_avg is None
               else f"{stats.tau_bound_avg:,.2f}")
    tau = "unbounded" if stats.tau_bound is None else f"{stats.tau_bound:,.2f}"
    lines.append(f"safe concurrency τ ≤ n/(2Δ) = {tau} examples in flight "
                 f"(with the average degree, n/(2Δ̄) = {tau_avg})")
    rec = recommend(stats, threads, workers, round_size)
    lines.append("recommendation: " + advice(rec, distributed=workers > 1 or round_size > 1))
    lines.append(f"analysed in {stats.seconds:.2f}s")
    return lines


def without_line(rest: ConflictStats, share: float) -> str:
    """One line: the conflict graph once the TOP_REMOVED most frequent features are gone."""
    approx = "≈ " if rest.mode == "sampled" else ""
    tau = "unbounded" if rest.tau_bound is None else f"{rest.tau_bound:,.2f}"
    tau_avg = "unbounded" if rest.tau_bound_avg is None else f"{rest.tau_bound_avg:,.2f}"
    return (f"without the {TOP_REMOVED} most frequent features ({_pct(share)} of the "
            f"non-zeros; {rest.mode}): Δ {approx}{rest.max_degree:,}, Δ̄ {approx}"
            f"{rest.avg_degree:,.1f}, n/(2Δ) = {tau}, n/(2Δ̄) = {tau_avg}")


def analyze_command(spec: str, *, threads: int = 2, workers: int = 1, round_size: int = 1,
                    zero_based: bool = False, n_features: int | None = None,
                    exact_budget: int = EXACT_BUDGET, sample_rows: int = SAMPLE_ROWS,
                    partners: int = PARTNERS, seed: int = 0, as_json: bool = False,
                    out: TextIO | None = None) -> dict[str, Any]:
    """Load ``spec``, print the report (or JSON) and return the statistics as a dict."""
    out = sys.stdout if out is None else out
    t0 = time.perf_counter()
    data = load_source(spec, n_features=n_features, zero_based=zero_based)
    loaded = time.perf_counter() - t0
    if data.n_rows == 0:
        # Zero rows share no feature, which would read as "any parallelism is safe".
        raise DataError(f"{spec}: no rows, so no conflicts to analyse")
    need = data.n_features * BYTES_PER_FEATURE
    what = "the counts the analysis keeps per feature id"
    check_fits(spec, data.n_features, zero_based, need, what, physical_memory())
    with ids_blamed(spec, data.n_features, zero_based, need, what, data.nnz):
        stats = analyze_conflicts(data, exact_budget=exact_budget, sample_rows=sample_rows,
                                  partners=partners, seed=seed)
        # The same graph without the most frequent features: are a few of them the story?
        trimmed, share = without_top_features(data, TOP_REMOVED)
        rest = analyze_conflicts(trimmed, exact_budget=exact_budget, sample_rows=sample_rows,
                                 partners=partners, seed=seed)
    result = stats.to_json()
    result["load_seconds"] = loaded
    result[f"without_top_{TOP_REMOVED}"] = {**rest.to_json(), "nnz_share_removed": share}
    if as_json:
        print(json.dumps(result, sort_keys=True), file=out)
        return result
    print(f"data: {describe(data)} (loaded in {loaded:.2f}s)", file=out)
    lines = report(stats, threads=threads, workers=workers, round_size=round_size)
    lines.insert(-1, without_line(rest, share))
    lines[-1] = f"analysed in {stats.seconds + rest.seconds:.2f}s"
    for line in lines:
        print(line, file=out)
    return result
