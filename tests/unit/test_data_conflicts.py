"""Conflict-graph statistics: hand-built graphs with known degrees, a planted block structure,
a brute-force cross-check, sampled estimates against exact ones, and the recommendation."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.commands.analyze import analyze_command
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.conflicts import (
    analyze_conflicts,
    quick_conflicts,
    recommend,
    startup_report,
    summary_line,
)
from hogwild.data.synthetic import make_rcv1_like, make_seed000


def from_supports(supports: list[list[int]], n_features: int) -> CSRData:
    indptr = np.zeros(len(supports) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in supports])
    indices = np.array([f for s in supports for f in sorted(s)], dtype=np.int32)
    return CSRData(indptr, indices, np.ones(indices.shape[0], dtype=np.float32),
                   np.ones(len(supports), dtype=np.float32), n_features)


def brute_degrees(data: CSRData) -> np.ndarray:
    a = data.to_scipy().astype(bool).astype(np.int64)
    meets = (a @ a.T).toarray() > 0
    np.fill_diagonal(meets, False)
    return meets.sum(axis=1)


def test_star() -> None:
    # Row 0 holds features 0..k-1; row i (1..k) holds feature i-1 only: a star on k+1 rows.
    k = 9
    data = from_supports([list(range(k))] + [[i] for i in range(k)], k)
    stats = analyze_conflicts(data)
    assert stats.mode == "exact"
    assert stats.max_degree == k
    assert stats.avg_degree == pytest.approx(2 * k / (k + 1))
    assert stats.omega == k
    assert stats.rho == pytest.approx(1.0)  # the centre meets every row
    assert stats.max_feature_share == pytest.approx(2 / (k + 1))
    assert stats.tau_bound == pytest.approx((k + 1) / (2 * k))


def test_disjoint_rows_have_no_conflicts() -> None:
    data = from_supports([[i, i + 50] for i in range(50)], 100)
    stats = analyze_conflicts(data)
    assert stats.max_degree == 0 and stats.avg_degree == 0.0
    assert stats.tau_bound is None and stats.tau_bound_avg is None
    assert stats.rho == pytest.approx(1 / 50)
    rec = recommend(stats, threads=4, workers=8, round_size=1000)
    assert rec.fits and rec.tau is None
    assert "any parallelism is safe" in summary_line(stats, rec, distributed=True)


def test_clique() -> None:
    n = 40
    data = from_supports([[0, 1 + i] for i in range(n)], n + 1)
    stats = analyze_conflicts(data)
    assert stats.max_degree == n - 1 and stats.avg_degree == n - 1
    assert stats.rho == pytest.approx(1.0)
    assert stats.max_feature_share == pytest.approx(1.0)
    assert stats.tau_bound == pytest.approx(n / (2 * (n - 1)))
    assert stats.top_share["1"] == pytest.approx(n / (2 * n))  # feature 0: half the non-zeros
    assert stats.half_nnz_features == 1


def test_empty_rows_count_as_isolated() -> None:
    data = from_supports([[0], [], [0, 1], []], 2)
    stats = analyze_conflicts(data)
    assert stats.max_degree == 1
    assert stats.avg_degree == pytest.approx(0.5)


def planted_blocks(blocks: int, rows_per_block: int, private: int, seed: int) -> CSRData:
    """Rows in blocks; every row holds its block's anchor feature and a few more of the
    block's private features, so each row conflicts with exactly its block's other rows."""
    rng = np.random.default_rng(seed)
    supports = []
    for b in range(blocks):
        base = b * private
        for _ in range(rows_per_block):
            extra = rng.choice(np.arange(base + 1, base + private), size=rng.integers(0, min(6, private)),
                               replace=False)
            supports.append([base, *extra.tolist()])
    order = rng.permutation(len(supports))  # blocks interleaved in row order
    return from_supports([supports[i] for i in order], blocks * private)


def test_planted_blocks_exact() -> None:
    data = planted_blocks(blocks=30, rows_per_block=25, private=12, seed=3)
    stats = analyze_conflicts(data)
    assert stats.mode == "exact"
    assert stats.max_degree == 24 and stats.avg_degree == pytest.approx(24.0)
    assert stats.tau_bound == pytest.approx(750 / 48)


def test_planted_blocks_sampled() -> None:
    data = planted_blocks(blocks=40, rows_per_block=100, private=20, seed=4)
    n = data.n_rows
    stats = analyze_conflicts(data, exact_budget=0, sample_rows=400, partners=2000, seed=1)
    assert stats.mode == "sampled"
    # Each row meets exactly 99 others; the estimate's interval must hold it.
    assert abs(stats.avg_degree - 99) <= 2 * stats.avg_degree_ci95
    assert 0 < stats.avg_degree_ci95 < 30
    assert stats.max_degree_bounds is not None
    low, high = stats.max_degree_bounds
    assert low == 99 <= high
    assert low <= stats.max_degree <= high
    assert stats.rho == pytest.approx((stats.max_degree + 1) / n)


def test_exact_matches_brute_force() -> None:
    data = make_seed000(600, n_features=400, min_nnz=1, max_nnz=6, seed=2)
    stats = analyze_conflicts(data)
    degrees = brute_degrees(data)
    assert stats.mode == "exact"
    assert stats.max_degree == int(degrees.max())
    assert stats.avg_degree == pytest.approx(float(degrees.mean()))
    df = np.asarray((data.to_scipy() != 0).sum(axis=0)).ravel()
    assert stats.max_feature_share == pytest.approx(df.max() / data.n_rows)


def test_sampled_estimates_agree_with_exact() -> None:
    data = make_seed000(3000, n_features=2000, min_nnz=2, max_nnz=12, seed=5)
    exact = analyze_conflicts(data)
    sampled = analyze_conflicts(data, exact_budget=0, sample_rows=500, partners=1500, seed=7)
    assert abs(sampled.avg_degree - exact.avg_degree) <= 2 * sampled.avg_degree_ci95
    assert sampled.max_degree_bounds is not None
    low, high = sampled.max_degree_bounds
    assert low <= exact.max_degree <= high
    # Partners covering every row give exact per-row counts: the sampled rows' mean is then
    # the mean of their true degrees.
    full = analyze_conflicts(data, exact_budget=0, sample_rows=data.n_rows,
                             partners=data.n_rows, seed=7)
    assert full.avg_degree == pytest.approx(exact.avg_degree)
    assert full.avg_degree_ci95 == 0.0


def test_quick_form_on_large_data_scans_a_sample_only() -> None:
    data = make_rcv1_like(32_000, seed=1)
    assert data.nnz > 2_000_000
    stats = quick_conflicts(data)
    assert stats.mode == "sampled" and stats.counts_sampled_rows == 1024
    assert stats.max_degree_bounds is None
    exact_share = np.asarray((data.to_scipy() != 0).sum(axis=0)).ravel().max() / data.n_rows
    # Zipf-like popularity: the top feature's share is well estimated from 1,024 rows.
    assert stats.max_feature_share == pytest.approx(exact_share, abs=0.05)


def test_time_budget_cuts_the_row_sample() -> None:
    data = planted_blocks(blocks=40, rows_per_block=100, private=20, seed=4)
    stats = analyze_conflicts(data, exact_budget=0, sample_rows=1000, partners=500,
                              time_budget=0.0)
    assert stats.sample_rows == 32  # two chunks of 16 rows, then the deadline
    assert abs(stats.avg_degree - 99) <= 2 * stats.avg_degree_ci95


def test_recommendation_splits_tau() -> None:
    data = planted_blocks(blocks=200, rows_per_block=5, private=4, seed=0)  # Δ = 4, n = 1000
    stats = analyze_conflicts(data)
    assert stats.tau_bound == pytest.approx(125.0)
    rec = recommend(stats, threads=2, workers=4, round_size=100)
    assert (rec.threads, rec.workers, rec.round_size) == (2, 4, 15)
    assert rec.in_flight == 800 and not rec.fits
    assert recommend(stats, threads=2, workers=4, round_size=10).fits
    small = recommend(stats, threads=300, workers=2)
    assert small.threads * small.workers * small.round_size <= 125
    line, entry = startup_report(data, threads=2, workers=4, round_size=100, distributed=True,
                                 load_seconds=10.0)
    assert "exceeds it" in line and "at most 2 x 4 x 15" in line
    assert entry["recommendation"]["round_size"] == 15
    json.dumps(entry)


def test_analyze_command_report_and_json() -> None:
    out = io.StringIO()
    analyze_command("synthetic:seed000?rows=3000&n_features=50000&min_nnz=2&max_nnz=5",
                    threads=2, workers=2, out=out)
    text = out.getvalue()
    for needle in ("conflict graph (exact)", "Ω", "ρ", "τ ≤ n/(2Δ)", "recommendation:",
                   "hold half of them"):
        assert needle in text
    out = io.StringIO()
    result = analyze_command("bundled:spamassassin", as_json=True, exact_budget=0, out=out)
    parsed = json.loads(out.getvalue())
    assert parsed["mode"] == "sampled" == result["mode"]
    assert parsed["rows"] == 4836 and parsed["max_degree"] >= parsed["max_degree_bounds"][0]


def test_analyze_cli() -> None:
    assert main(["analyze", "synthetic:seed000?rows=500&n_features=900", "--workers", "3"]) == 0
    assert main(["analyze", "no/such/file.svm"]) == 1
    assert main(["analyze", "bundled:spamassassin", "--threads", "0"]) == 2


def test_train_logs_the_line_and_stores_the_statistics(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    # An info line (`train -v` shows it): no setting of `train` acts on it.
    with caplog.at_level(logging.INFO, logger="hogwild"):
        assert main(["train", "--data", "synthetic:seed000?rows=3000&n_features=20000&max_nnz=20",
                     "--epochs", "1", "--threads", "2", "--out", str(out)]) == 0
    line = next(r.getMessage() for r in caplog.records
                if r.getMessage().startswith("conflicts (") and r.levelno == logging.INFO)
    metrics = json.loads((out / "latest" / "metrics.json").read_text())
    stats = metrics["conflicts"]
    assert stats["rows"] == metrics["train_rows"] and stats["mode"] == "exact"
    assert f"Δ={stats['max_degree']:,}" in line
    assert stats["recommendation"]["in_flight"] == 2  # one process: the threads
    assert ("within it" in line) == stats["recommendation"]["fits"]


def test_removing_the_hot_features_uncovers_the_block_structure() -> None:
    from hogwild.data.diagnose.conflicts import without_top_features

    blocks = planted_blocks(blocks=20, rows_per_block=10, private=6, seed=2)
    hot = blocks.n_features  # one extra feature held by every row (a stop-word)
    supports = [[*blocks.indices[blocks.indptr[i]:blocks.indptr[i + 1]].tolist(), hot]
                for i in range(blocks.n_rows)]
    data = from_supports(supports, hot + 1)
    assert analyze_conflicts(data).max_degree == data.n_rows - 1
    trimmed, share = without_top_features(data, 1)
    assert share == pytest.approx(data.n_rows / data.nnz)
    stats = analyze_conflicts(trimmed)
    assert stats.max_degree == 9 and stats.avg_degree == pytest.approx(9.0)
    np.testing.assert_array_equal(trimmed.indices, blocks.indices)
