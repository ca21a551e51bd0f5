"""Mini-batch SGD: the batch kernels against a numpy reference, and the syncsgd trainer."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.model import kernels
from hogwild.model.arrays import csr_arrays
from hogwild.model.evaluation import evaluate
from hogwild.model.losses import get_loss

from .rows import Rows


def tiny(n_rows: int, n_features: int, seed: int) -> Rows:
    """Random sparse rows (40% dense) labelled by a planted linear separator."""
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-1, 1, size=(n_rows, n_features))
    dense[rng.random(dense.shape) < 0.6] = 0.0
    r, c = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))]).astype(np.int64)
    labels = np.where(dense @ rng.normal(size=n_features) >= 0, 1.0, -1.0).astype(np.float32)
    return Rows(indptr, c.astype(np.int32), dense[r, c].astype(np.float32), labels, n_features)


def scratch(n_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    size = n_features + 1
    return (np.zeros(size, dtype=np.float64), np.zeros(size, dtype=np.uint8),
            np.zeros(size, dtype=np.int64))


def reference_minibatch(data: Rows, w: np.ndarray, batch: int, lr: float, l2: float,
                        loss_name: str, fit_bias: bool = True) -> None:
    """Steps of lr * (mean over the block of the per-row gradients at the block's start)."""
    loss = get_loss(loss_name)
    nf = data.n_features
    n = len(data.indptr) - 1
    for b0 in range(0, n, batch):
        rows = range(b0, min(b0 + batch, n))
        grad = np.zeros_like(w)
        for r in rows:
            cols = data.indices[data.indptr[r]:data.indptr[r + 1]]
            x = data.values[data.indptr[r]:data.indptr[r + 1]].astype(np.float64)
            m = float(w[cols] @ x) + w[nf]
            g = float(loss.dloss(m, float(data.labels[r])))
            if g != 0.0:
                grad[cols] += g * x + l2 * w[cols]
                if fit_bias:
                    grad[nf] += g
        w -= lr / len(rows) * grad


def run_batch_kernel(data: Rows, w: np.ndarray, batch: int, lr: float, l2: float,
                     loss_name: str, fit_bias: bool = True, schedule: int = kernels.CONSTANT,
                     start: int = 0, stop: int | None = None) -> tuple[float, float]:
    a = csr_arrays(data, data.n_features)
    grad, seen, touched = scratch(data.n_features)
    out = kernels.sgd_batch_range(a.indptr, a.indices, a.values, a.labels, start,
                                  a.n_rows if stop is None else stop, w, data.n_features,
                                  get_loss(loss_name).code, lr, schedule, 0.5, 1.0, l2,
                                  fit_bias, 1.0, batch, grad, seen, touched)
    # The scratch is left clean for the next call.
    assert not grad.any() and not seen.any()
    return out


@pytest.mark.parametrize("loss_name", ["hinge", "logistic", "squared"])
@pytest.mark.parametrize("fit_bias", [True, False])
@pytest.mark.parametrize("invscaling", [False, True])
def test_batch_of_one_equals_per_example_kernel(loss_name: str, fit_bias: bool,
                                                invscaling: bool) -> None:
    data = tiny(80, 15, seed=3)
    a = csr_arrays(data, data.n_features)
    schedule = kernels.INVSCALING if invscaling else kernels.CONSTANT
    code = get_loss(loss_name).code
    w1 = np.zeros(data.n_features + 1)
    w2 = np.zeros(data.n_features + 1)
    for _ in range(3):
        t1, l1 = kernels.sgd_range(a.indptr, a.indices, a.values, a.labels, 0, a.n_rows, w1,
                                   data.n_features, code, 0.3, schedule, 0.5, 1.0, 1e-2,
                                   fit_bias, 1.0)
        t2, l2 = kernels.sgd_batch_range(a.indptr, a.indices, a.values, a.labels, 0, a.n_rows,
                                         w2, data.n_features, code, 0.3, schedule, 0.5, 1.0,
                                         1e-2, fit_bias, 1.0, 1, *scratch(data.n_features))
        assert t1 == t2 == 1.0 + a.n_rows
        assert l1 == pytest.approx(l2, rel=1e-9)
    np.testing.assert_allclose(w2, w1, rtol=1e-10, atol=1e-12)
    assert w1.any()


@pytest.mark.parametrize("loss_name", ["hinge", "logistic", "squared"])
@pytest.mark.parametrize("batch", [2, 7, 125])
def test_batch_kernel_equals_reference(loss_name: str, batch: int) -> None:
    data = tiny(90, 12, seed=5)
    w = np.zeros(data.n_features + 1)
    ref = np.zeros_like(w)
    for _ in range(3):
        run_batch_kernel(data, w, batch, 0.4, 1e-2, loss_name)
        reference_minibatch(data, ref, batch, 0.4, 1e-2, loss_name)
    np.testing.assert_allclose(w, ref, rtol=1e-9, atol=1e-12)
    assert np.abs(w).sum() > 0


def test_batch_kernel_without_bias_leaves_it_alone() -> None:
    data = tiny(50, 10, seed=2)
    w = np.zeros(data.n_features + 1)
    run_batch_kernel(data, w, 4, 0.5, 0.0, "hinge", fit_bias=False)
    assert w[-1] == 0.0 and w[:-1].any()


def test_batch_kernel_invscaling_uses_rate_at_block_start() -> None:
    data = tiny(12, 6, seed=1)
    w = np.zeros(data.n_features + 1)
    t_end, _ = run_batch_kernel(data, w, 5, 1.0, 0.0, "squared", schedule=kernels.INVSCALING)
    assert t_end == 13.0
    ref = np.zeros_like(w)
    # Blocks start at t = 1, 6, 11: rates 1/sqrt(t), each block by the reference.
    for b0, t in ((0, 1.0), (5, 6.0), (10, 11.0)):
        part = Rows(data.indptr[b0:min(b0 + 5, 12) + 1] - data.indptr[b0],
                    data.indices[data.indptr[b0]:data.indptr[min(b0 + 5, 12)]],
                    data.values[data.indptr[b0]:data.indptr[min(b0 + 5, 12)]],
                    data.labels[b0:b0 + 5], data.n_features)
        reference_minibatch(part, ref, 5, t ** -0.5, 0.0, "squared")
    np.testing.assert_allclose(w, ref, rtol=1e-10, atol=1e-12)


def test_batch_gradient_reads_only_and_sums_over_calls() -> None:
    data = tiny(40, 8, seed=4)
    a = csr_arrays(data, data.n_features)
    w = np.random.default_rng(0).normal(size=data.n_features + 1)
    before = w.copy()
    grad, seen, touched = scratch(data.n_features)
    n1, loss1 = kernels.batch_gradient(a.indptr, a.indices, a.values, a.labels, 0, 15, w,
                                       data.n_features, 0, 1e-2, True, grad, seen, touched, 0)
    n2, loss2 = kernels.batch_gradient(a.indptr, a.indices, a.values, a.labels, 15, 40, w,
                                       data.n_features, 0, 1e-2, True, grad, seen, touched, n1)
    np.testing.assert_array_equal(w, before)
    # Each touched coordinate is listed once.
    assert len(set(touched[:n2].tolist())) == n2
    whole = grad.copy()
    ref = w.copy()
    reference_minibatch(data, ref, 40, 1.0, 1e-2, "hinge")
    np.testing.assert_allclose(before - whole / 40, ref, rtol=1e-10, atol=1e-12)
    kernels.apply_gradient(w, grad, seen, touched, n2, 1.0 / 40)
    np.testing.assert_allclose(w, ref, rtol=1e-10, atol=1e-12)
    assert not grad.any() and not seen.any()
    margins = evaluate(data, before, "hinge")
    assert loss1 + loss2 == pytest.approx(margins.loss * 40)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("batch", [2, 9, 64])
def test_syncsgd_equals_one_thread_minibatch(threads: int, batch: int) -> None:
    data = tiny(150, 20, seed=7)
    sync = Trainer(data.n_features, TrainParams(mode="syncsgd", threads=threads,
                                                batch_size=batch, learning_rate=0.3))
    serial = Trainer(data.n_features, TrainParams(mode="serial", batch_size=batch,
                                                  learning_rate=0.3))
    hs = sync.fit(data, 3)
    hr = serial.fit(data, 3)
    np.testing.assert_allclose(sync.w, serial.w, rtol=1e-9, atol=1e-12)
    assert [h.train_loss for h in hs] == pytest.approx([h.train_loss for h in hr], rel=1e-9)
    assert sync.t == serial.t == 1.0 + 3 * 150


def test_syncsgd_uses_at_most_one_thread_per_row_of_a_batch() -> None:
    data = tiny(90, 10, seed=6)
    sync = Trainer(data.n_features, TrainParams(mode="syncsgd", threads=4, batch_size=1))
    serial = Trainer(data.n_features, TrainParams(mode="serial"))
    sync.fit(data, 2)
    serial.fit(data, 2)
    # Batch size 1: the per-example kernel on one thread, bit for bit.
    np.testing.assert_array_equal(sync.w, serial.w)


def test_serial_minibatch_whole_batches_across_kernel_calls() -> None:
    # batch_rows 5 is not a multiple of batch_size 3: calls are widened to whole batches.
    data = tiny(50, 10, seed=8)
    trainer = Trainer(data.n_features, TrainParams(mode="serial", batch_size=3, batch_rows=5,
                                                   learning_rate=0.2, lr_schedule="constant",
                                                   lr_decay=1.0))
    trainer.fit(data, 2)
    ref = np.zeros(data.n_features + 1)
    for _ in range(2):
        reference_minibatch(data, ref, 3, 0.2, 1e-5, "hinge")
    np.testing.assert_allclose(trainer.w, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mode", ["hogwild", "locked", "syncsgd"])
def test_minibatch_modes_learn(mode: str) -> None:
    data = tiny(400, 12, seed=9)
    trainer = Trainer(data.n_features, TrainParams(mode=mode, threads=2, batch_size=4,
                                                   learning_rate=0.5))
    trainer.fit(data, 10)
    acc = evaluate(data, trainer.w, "hinge").accuracy
    assert acc is not None and acc > 0.9


def test_syncsgd_thread_failure_is_raised_not_hung(monkeypatch: pytest.MonkeyPatch) -> None:
    data = tiny(100, 10, seed=1)
    calls = {"n": 0}
    real = kernels.batch_gradient

    def flaky(*args: object) -> tuple[int, float]:
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("boom")
        return real(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(kernels, "batch_gradient", flaky)
    trainer = Trainer(data.n_features, TrainParams(mode="syncsgd", threads=2, batch_size=4))
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(data, 1)


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        TrainParams(batch_size=0)
