"""Compiled kernels against plain numpy references: SGD pass, margins, evaluation, deltas."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hogwild.model import kernels
from hogwild.model.losses import Loss, get_loss

N_ROWS, N_FEATURES = 50, 20


def tiny_csr(loss_name: str, seed: int = 0, n_rows: int = N_ROWS) -> tuple[np.ndarray, ...]:
    """A random CSR set (indptr, indices, values, labels) with some empty rows."""
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-1.0, 1.0, size=(n_rows, N_FEATURES))
    dense[rng.random(dense.shape) < 0.7] = 0.0
    dense[[3, 17]] = 0.0  # rows with no features still update the bias
    counts = (dense != 0).sum(axis=1)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(counts)
    rows, cols = np.nonzero(dense)
    indices = cols.astype(np.int32)
    values = dense[rows, cols].astype(np.float32)
    if loss_name == "squared":
        labels = rng.normal(size=n_rows).astype(np.float32)
    else:
        labels = rng.choice([-1.0, 1.0], size=n_rows).astype(np.float32)
    return indptr, indices, values, labels


def reference_sgd(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                  labels: np.ndarray, w: np.ndarray, loss: Loss, lr0: float, invscaling: bool,
                  power_t: float, t0: float, l2: float, fit_bias: bool,
                  t_step: float = 1.0) -> tuple[float, float]:
    """The per-example SGD step, one row at a time, with L2 on updating steps only."""
    t = t0
    total = 0.0
    for r in range(len(labels)):
        cols = indices[indptr[r]:indptr[r + 1]]
        x = values[indptr[r]:indptr[r + 1]].astype(np.float64)
        y = float(labels[r])
        m = float(w[cols] @ x) + w[N_FEATURES]
        total += float(loss.value(m, y))
        g = float(loss.dloss(m, y))
        lr = lr0 / t**power_t if invscaling else lr0
        t += t_step
        # L2 is lazy: it shrinks the row's support on updating steps only (g != 0).
        if g != 0.0:
            w[cols] = w[cols] - lr * (g * x + l2 * w[cols])
        if fit_bias:
            w[N_FEATURES] -= lr * g
    return t, total


@pytest.mark.parametrize("loss_name", ["hinge", "logistic", "squared"])
@pytest.mark.parametrize("fit_bias", [True, False])
@pytest.mark.parametrize("invscaling", [False, True])
@pytest.mark.parametrize("l2", [0.0, 0.01])
def test_sgd_range_equals_reference(loss_name: str, fit_bias: bool, invscaling: bool,
                                    l2: float) -> None:
    indptr, indices, values, labels = tiny_csr(loss_name)
    loss = get_loss(loss_name)
    lr0, power_t, t0 = 0.3, 0.5, 3.0
    rng = np.random.default_rng(1)
    w0 = rng.normal(scale=0.1, size=N_FEATURES + 1)
    w_ref = w0.copy()
    w_ker = w0.copy()
    for epoch in range(3):  # several passes so that updates build on each other
        t_ref, loss_ref = reference_sgd(indptr, indices, values, labels, w_ref, loss, lr0,
                                        invscaling, power_t, t0, l2, fit_bias)
        t_ker, loss_ker = kernels.sgd_range(
            indptr, indices, values, labels, 0, N_ROWS, w_ker, N_FEATURES, loss.code, lr0,
            int(invscaling), power_t, t0, l2, fit_bias, 1.0)
        assert t_ker == t_ref == t0 + N_ROWS
        assert loss_ker == pytest.approx(loss_ref, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(w_ker, w_ref, rtol=1e-12, atol=1e-12)
        t0 = t_ref
    assert not np.allclose(w_ker, w0)  # it learned something
    if not fit_bias:
        assert w_ker[N_FEATURES] == w0[N_FEATURES]


def test_sgd_range_subranges_and_t_step_match_reference() -> None:
    indptr, indices, values, labels = tiny_csr("logistic", seed=3)
    loss = get_loss("logistic")
    w_ref = np.zeros(N_FEATURES + 1)
    w_ker = np.zeros(N_FEATURES + 1)
    # Reference over rows 10..40 as its own CSR.
    sub_ptr = indptr[10:41] - indptr[10]
    sub_idx = indices[indptr[10]:indptr[40]]
    sub_val = values[indptr[10]:indptr[40]]
    t_ref, l_ref = reference_sgd(sub_ptr, sub_idx, sub_val, labels[10:40], w_ref, loss, 0.5,
                                 True, 0.7, 2.0, 1e-3, True, t_step=3.0)
    t = 2.0
    l_ker = 0.0
    for start in range(10, 40, 7):  # in chunks, as the trainer calls it
        t, part = kernels.sgd_range(indptr, indices, values, labels, start, min(start + 7, 40),
                                    w_ker, N_FEATURES, loss.code, 0.5, 1, 0.7, t, 1e-3, True,
                                    3.0)
        l_ker += part
    assert t == t_ref == 2.0 + 3.0 * 30
    assert l_ker == pytest.approx(l_ref, rel=1e-12)
    np.testing.assert_allclose(w_ker, w_ref, rtol=1e-12, atol=1e-12)


def test_sgd_range_bias_flushes_within_a_call_match_reference() -> None:
    # More rows than BIAS_FLUSH_ROWS, so the bias accumulator is published mid-call.
    n_rows = 3 * kernels.BIAS_FLUSH_ROWS + 5
    indptr, indices, values, labels = tiny_csr("hinge", seed=9, n_rows=n_rows)
    loss = get_loss("hinge")
    w_ref = np.zeros(N_FEATURES + 1)
    w_ker = np.zeros(N_FEATURES + 1)
    reference_sgd(indptr, indices, values, labels, w_ref, loss, 0.2, False, 0.5, 1.0, 1e-3,
                  True)
    kernels.sgd_range(indptr, indices, values, labels, 0, n_rows, w_ker, N_FEATURES,
                      loss.code, 0.2, 0, 0.5, 1.0, 1e-3, True, 1.0)
    assert w_ref[N_FEATURES] != 0.0
    np.testing.assert_allclose(w_ker, w_ref, rtol=1e-12, atol=1e-12)


def test_sgd_range_default_t_step_is_one() -> None:
    indptr, indices, values, labels = tiny_csr("hinge")
    w = np.zeros(N_FEATURES + 1)
    t, _ = kernels.sgd_range(indptr, indices, values, labels, 0, 5, w, N_FEATURES, 0, 0.1, 1,
                             0.5, 1.0, 0.0, True)
    assert t == 6.0


def test_sgd_range_empty_range_is_a_no_op() -> None:
    indptr, indices, values, labels = tiny_csr("hinge")
    w = np.ones(N_FEATURES + 1)
    t, loss_sum = kernels.sgd_range(indptr, indices, values, labels, 7, 7, w, N_FEATURES, 0,
                                    0.1, 0, 0.5, 4.0, 0.1, True, 1.0)
    assert (t, loss_sum) == (4.0, 0.0)
    assert np.all(w == 1.0)


@pytest.mark.parametrize("hot", [0, 1, 3])
def test_sgd_range_l2_shrinks_only_on_updating_steps(hot: int) -> None:
    # Lazy L2: a hinge step with margin >= 1 (g == 0) writes nothing, not even the shrink;
    # a step with g != 0 shrinks the row's support and leaves the other weights alone.
    indptr = np.array([0, 2, 4], dtype=np.int64)
    indices = np.array([0, 1, 0, 1], dtype=np.int32)
    values = np.array([1.0, 1.0, 1.0, 1.0], dtype=np.float32)
    labels = np.array([1.0, -1.0], dtype=np.float32)
    w = np.array([2.0, 1.0, 7.0, 0.0])  # 3 features + bias; feature 2 is in no row
    lr, l2 = 0.1, 0.5
    t, loss_sum = kernels.sgd_range(indptr, indices, values, labels, 0, 1, w, 3, 0, lr, 0,
                                    0.5, 1.0, l2, True, 1.0, hot)
    assert loss_sum == 0.0
    np.testing.assert_array_equal(w, [2.0, 1.0, 7.0, 0.0])  # margin 3: g == 0, no write
    # Row 1 has label -1 and margin 3: g = +1, the support {0, 1} shrinks and steps.
    kernels.sgd_range(indptr, indices, values, labels, 1, 2, w, 3, 0, lr, 0, 0.5, t, l2, True,
                      1.0, hot)
    keep = 1.0 - lr * l2
    np.testing.assert_allclose(w, [2.0 * keep - lr, 1.0 * keep - lr, 7.0, -lr],
                               rtol=1e-15, atol=0.0)


# --- buffered (hot) features -------------------------------------------------------------


def ranked_csr(n_rows: int, n_features: int, seed: int) -> tuple[np.ndarray, ...]:
    """Rows with sorted indices drawn with Zipf-like popularity (low ids most frequent)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(n_features) + 5.0)
    p /= p.sum()
    rows = [np.unique(rng.choice(n_features, size=rng.integers(0, 30), p=p))
            for _ in range(n_rows)]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.concatenate(rows).astype(np.int32)
    values = rng.uniform(-1.0, 1.0, size=indices.shape[0]).astype(np.float32)
    labels = rng.choice([-1.0, 1.0], size=n_rows).astype(np.float32)
    return indptr, indices, values, labels


@pytest.mark.parametrize("hot", [1, 7, N_FEATURES, N_FEATURES + 5])
@pytest.mark.parametrize("l2", [0.0, 0.01])
def test_sgd_range_with_hot_features_equals_reference_on_one_thread(hot: int, l2: float) -> None:
    # Alone on w, the per-call view publishes values, not sums: exactly the unbuffered pass.
    indptr, indices, values, labels = tiny_csr("logistic", seed=4)
    loss = get_loss("logistic")
    w_ref = np.random.default_rng(2).normal(scale=0.1, size=N_FEATURES + 1)
    w_ker = w_ref.copy()
    t_ref, l_ref = reference_sgd(indptr, indices, values, labels, w_ref, loss, 0.3, True, 0.5,
                                 1.0, l2, True)
    t_ker, l_ker = kernels.sgd_range(indptr, indices, values, labels, 0, N_ROWS, w_ker,
                                     N_FEATURES, loss.code, 0.3, 1, 0.5, 1.0, l2, True, 1.0, hot)
    assert t_ker == t_ref
    assert l_ker == pytest.approx(l_ref, rel=1e-12)
    np.testing.assert_allclose(w_ker, w_ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hot", [100, 300, 1000])
def test_sgd_range_hot_tiers_published_mid_call_match_reference(hot: int) -> None:
    # 300 features and 2,000 rows: tiers of 64, 256 and 300 ids are published within the call
    # (hot=100 also sends ids >= 100 straight to w).
    n_features = 300
    indptr, indices, values, labels = ranked_csr(2000, n_features, seed=5)
    loss = get_loss("hinge")
    w_ref = np.zeros(n_features + 1)
    w_ker = np.zeros(n_features + 1)
    t = 1.0
    for r in range(2000):  # reference_sgd assumes N_FEATURES; run a local loop
        cols = indices[indptr[r]:indptr[r + 1]]
        x = values[indptr[r]:indptr[r + 1]].astype(np.float64)
        m = float(w_ref[cols] @ x) + w_ref[n_features]
        g = float(loss.dloss(m, float(labels[r])))
        if g != 0.0:  # lazy L2: updating steps only
            w_ref[cols] = w_ref[cols] - 0.1 * (g * x + 1e-3 * w_ref[cols])
        w_ref[n_features] -= 0.1 * g
        t += 1.0
    t_ker, _ = kernels.sgd_range(indptr, indices, values, labels, 0, 2000, w_ker, n_features,
                                 loss.code, 0.1, 0, 0.5, 1.0, 1e-3, True, 1.0, hot)
    assert t_ker == t
    assert np.count_nonzero(w_ref[:n_features]) > 200
    np.testing.assert_allclose(w_ker, w_ref, rtol=1e-12, atol=1e-12)


def test_publish_writes_values_alone_and_adds_changes_over_others() -> None:
    base = np.array([1.0, 1.0, 1.0, 1.0])
    view = np.array([1.5, 1.0, 2.0, 1.0])     # own changes on 0 and 2
    w = np.array([1.0, 3.0, 4.0, 1.0])        # another writer changed 1 and 2
    kernels.publish_view(w, view, base, 3)        # id 3 lies outside the published span
    # 0: only own change -> the value itself; 1: only theirs -> view refreshed;
    # 2: both -> their value plus own net change.
    np.testing.assert_array_equal(w, [1.5, 3.0, 5.0, 1.0])
    np.testing.assert_array_equal(view, [1.5, 3.0, 5.0, 1.0])
    np.testing.assert_array_equal(base, [1.5, 3.0, 5.0, 1.0])


def test_sgd_range_hot_features_see_updates_made_between_calls() -> None:
    # Each call starts its view from w, so a weight changed by someone else (another thread,
    # a peer's delta) between calls is used by the next call.
    indptr = np.array([0, 1], dtype=np.int64)
    indices = np.array([0], dtype=np.int32)
    values = np.array([1.0], dtype=np.float32)
    labels = np.array([1.0], dtype=np.float32)
    w = np.zeros(2)
    w[0] = 5.0  # margin 5 >= 1: hinge gradient 0, nothing moves
    _, loss_sum = kernels.sgd_range(indptr, indices, values, labels, 0, 1, w, 1, 0, 0.1, 0,
                                    0.5, 1.0, 0.0, True, 1.0, 1)
    assert loss_sum == 0.0 and w[0] == 5.0
    w[0] = -5.0
    _, loss_sum = kernels.sgd_range(indptr, indices, values, labels, 0, 1, w, 1, 0, 0.1, 0,
                                    0.5, 1.0, 0.0, True, 1.0, 1)
    assert loss_sum == 6.0 and w[0] == pytest.approx(-4.9)


def _dense(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
    x = np.zeros((len(indptr) - 1, N_FEATURES))
    for r in range(len(indptr) - 1):
        x[r, indices[indptr[r]:indptr[r + 1]]] = values[indptr[r]:indptr[r + 1]]
    return x


def test_decision_equals_dense_product() -> None:
    indptr, indices, values, _ = tiny_csr("hinge")
    w = np.random.default_rng(2).normal(size=N_FEATURES + 1)
    out = np.empty(N_ROWS)
    kernels.decision(indptr, indices, values, w, N_FEATURES, out)
    expected = _dense(indptr, indices, values) @ w[:N_FEATURES] + w[N_FEATURES]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss_name", ["hinge", "logistic", "squared"])
def test_evaluate_equals_numpy(loss_name: str) -> None:
    indptr, indices, values, labels = tiny_csr(loss_name)
    loss = get_loss(loss_name)
    w = np.random.default_rng(4).normal(size=N_FEATURES + 1)
    margins = _dense(indptr, indices, values) @ w[:N_FEATURES] + w[N_FEATURES]
    loss_sum, n_correct = kernels.evaluate(indptr, indices, values, labels, w, N_FEATURES,
                                           loss.code)
    assert loss_sum == pytest.approx(float(loss.value(margins, labels).sum()), rel=1e-12)
    if loss.is_classifier:
        expected = int(np.sum(np.where(margins >= 0, 1.0, -1.0) == labels))
        assert n_correct == expected
        assert 0 < n_correct < N_ROWS
    else:
        assert n_correct == 0


def test_evaluate_counts_margin_zero_as_positive_and_is_stable() -> None:
    # Row 0 empty (margin = bias = 0), rows 1-2 with huge margins of both signs.
    indptr = np.array([0, 0, 1, 2], dtype=np.int64)
    indices = np.array([0, 0], dtype=np.int32)
    values = np.array([1.0, -1.0], dtype=np.float32)
    labels = np.array([1.0, -1.0, -1.0], dtype=np.float32)
    w = np.array([1000.0, 0.0])
    _, n_correct = kernels.evaluate(indptr, indices, values, labels, w, 1, 0)
    assert n_correct == 2  # margin 0 -> +1 correct; +1000 wrong; -1000 correct
    loss_sum, _ = kernels.evaluate(indptr, indices, values, labels, w, 1, 1)
    assert np.isfinite(loss_sum)
    assert loss_sum == pytest.approx(np.log(2.0) + 1000.0, rel=1e-12)


# --- deltas -------------------------------------------------------------------------------


def _buffers(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty(n, dtype=np.int32), np.empty(n, dtype=np.float32)


def test_build_delta_emits_changed_coordinates_ascending() -> None:
    snap = np.zeros(10)
    w = snap.copy()
    w[[7, 2, 5]] = [0.25, -1.5, 3.0]
    idx, val = _buffers(10)
    n = kernels.build_delta(w, snap, idx, val)
    assert n == 3
    assert idx[:n].tolist() == [2, 5, 7]
    assert val[:n].tolist() == [-1.5, 3.0, 0.25]
    np.testing.assert_array_equal(snap, w)  # exactly representable: nothing left over
    assert kernels.build_delta(w, snap, idx, val) == 0


def test_cut_changes_matches_the_numpy_cut_from_start_on() -> None:
    rng = np.random.default_rng(7)
    snap = rng.normal(size=50)
    w = snap.copy()
    w[[3, 10, 20, 49]] += rng.normal(size=4)
    expected = w.copy()
    own = expected[5:] - snap[5:]
    expected[5:] -= own * (1.0 - 1.0 / 3)
    assert kernels.cut_changes(w, snap, 5, 1.0 - 1.0 / 3) == 3  # 10, 20, 49; 3 is before 5
    np.testing.assert_array_equal(w, expected)  # bit for bit what numpy gives
    assert kernels.cut_changes(w, snap[:-1], 0, 0.5) == -1
    np.testing.assert_array_equal(w, expected)  # a short snapshot touches nothing


def test_delta_round_trip_reproduces_model_on_receiver() -> None:
    rng = np.random.default_rng(5)
    w = np.zeros(100)
    snap = w.copy()
    mirror = np.zeros(100)
    idx, val = _buffers(100)
    for _ in range(20):
        touched = rng.choice(100, size=15, replace=False)
        w[touched] += rng.normal(scale=0.1, size=15)
        n = kernels.build_delta(w, snap, idx, val)
        assert np.all(np.diff(idx[:n]) > 0)
        errors = kernels.apply_delta(mirror, np.empty(0), idx[:n].copy(), val[:n].copy())
        assert errors == 0
        # A receiver adding the same float32 values in the same order holds exactly snap.
        np.testing.assert_array_equal(mirror, snap)
    # What has not gone out yet is only float32 rounding residual.
    np.testing.assert_allclose(mirror, w, rtol=1e-6, atol=1e-7)


def test_build_delta_error_feedback_loses_nothing() -> None:
    rng = np.random.default_rng(6)
    snap0 = rng.normal(size=64)
    snap = snap0.copy()
    w = snap0.copy()
    idx, val = _buffers(64)
    sent = np.zeros(64)
    for _ in range(10):
        # Changes far below float32 resolution of the total still reach the receiver.
        w += rng.normal(scale=1.0, size=64) * 1e-9 + 1e-3
        n = kernels.build_delta(w, snap, idx, val)
        np.add.at(sent, idx[:n], val[:n].astype(np.float64))
        residual = w - snap
        # Every emitted value was float32-rounded; the rounding stays in the residual.
        assert np.all(np.abs(residual) <= np.abs(w - snap0) * 2.0**-23)
        # Sum of emitted deltas plus residual is the total change, up to float64 rounding.
        np.testing.assert_allclose(sent + residual, w - snap0, rtol=1e-12, atol=1e-14)
    residual_before = w - snap
    assert np.any(residual_before != 0.0)
    # Once training stops, the residual goes out on the next round.
    n = kernels.build_delta(w, snap, idx, val)
    assert n > 0
    np.testing.assert_allclose(val[:n].astype(np.float64), residual_before[idx[:n]], rtol=1e-6)


def test_apply_delta_with_snap_is_not_resent_as_own_update() -> None:
    w = np.zeros(8)
    snap = np.zeros(8)
    w[1] += 0.5  # own update
    peer_idx = np.array([1, 4], dtype=np.int32)
    peer_val = np.array([2.0, -3.0], dtype=np.float32)
    assert kernels.apply_delta(w, snap, peer_idx, peer_val) == 0
    assert w.tolist() == [0.0, 2.5, 0.0, 0.0, -3.0, 0.0, 0.0, 0.0]
    idx, val = _buffers(8)
    n = kernels.build_delta(w, snap, idx, val)
    assert (n, idx[0], val[0]) == (1, 1, 0.5)  # only the own update goes out


def test_apply_delta_without_snap_counts_as_own_update() -> None:
    w = np.zeros(4)
    snap = np.zeros(4)
    assert kernels.apply_delta(w, np.empty(0), np.array([2], np.int32),
                               np.array([1.0], np.float32)) == 0
    idx, val = _buffers(4)
    assert kernels.build_delta(w, snap, idx, val) == 1 and idx[0] == 2


@pytest.mark.parametrize("bad_index", [8, 1000, -1, np.iinfo(np.int32).max,
                                       np.iinfo(np.int32).min])
def test_apply_delta_out_of_bounds_writes_nothing(bad_index: int) -> None:
    w = np.arange(8, dtype=np.float64)
    snap = w.copy()
    idx = np.array([0, bad_index, 3], dtype=np.int32)
    val = np.array([1.0, 1.0, 1.0], dtype=np.float32)
    assert kernels.apply_delta(w, snap, idx, val) == 1
    np.testing.assert_array_equal(w, np.arange(8))
    np.testing.assert_array_equal(snap, np.arange(8))


@pytest.mark.parametrize("case", ["val_short", "snap_wrong_length"])
def test_apply_delta_length_mismatch_is_rejected(case: str) -> None:
    w = np.zeros(8)
    snap: Any = np.zeros(5) if case == "snap_wrong_length" else np.zeros(8)
    idx = np.array([0, 1], dtype=np.int32)
    val = np.array([1.0] if case == "val_short" else [1.0, 2.0], dtype=np.float32)
    assert kernels.apply_delta(w, snap, idx, val) == -1
    assert np.all(w == 0.0)


def test_build_delta_rejects_short_buffers() -> None:
    w = np.ones(8)
    snap = np.zeros(8)
    idx, val = _buffers(7)
    assert kernels.build_delta(w, snap, idx, val) == -1
    assert np.all(snap == 0.0)
    assert kernels.build_delta(w, np.zeros(7), *_buffers(8)) == -1


def test_add_scaled() -> None:
    w = np.ones(5)
    kernels.add_scaled(w, np.arange(5, dtype=np.float64), 0.5)
    np.testing.assert_array_equal(w, 1.0 + 0.5 * np.arange(5))
