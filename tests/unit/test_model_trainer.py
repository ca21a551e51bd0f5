"""In-process trainer: schedules against a reference, thread modes, real data sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.engine.trainer import LOCKED_BATCH_ROWS, EpochStats, Trainer, TrainParams
from hogwild.errors import DataError
from hogwild.model import kernels
from hogwild.model.arrays import csr_arrays
from hogwild.model.evaluation import evaluate
from hogwild.model.hot import RENUMBERED_HOT_FEATURES, choose_hot_features
from hogwild.model.losses import get_loss
from hogwild.model.warmup import warmup

from .rows import Rows

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def tiny(n_rows: int = 60, n_features: int = 12, seed: int = 0) -> Rows:
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-1, 1, size=(n_rows, n_features))
    dense[rng.random(dense.shape) < 0.6] = 0.0
    r, c = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))]).astype(np.int64)
    truth = rng.normal(size=n_features)
    labels = np.where(dense @ truth >= 0, 1.0, -1.0).astype(np.float32)
    return Rows(indptr, c.astype(np.int32), dense[r, c].astype(np.float32), labels, n_features)


def reference_pass(data: Rows, w: np.ndarray, order: list[int], lr: float, l2: float,
                   loss_name: str, lrs: list[float] | None = None) -> None:
    """SGD over rows in the given order, L2 on updating steps only (per-row lrs if given)."""
    loss = get_loss(loss_name)
    nf = data.n_features
    for i, r in enumerate(order):
        cols = data.indices[data.indptr[r]:data.indptr[r + 1]]
        x = data.values[data.indptr[r]:data.indptr[r + 1]].astype(np.float64)
        m = float(w[cols] @ x) + w[nf]
        g = float(loss.dloss(m, float(data.labels[r])))
        step = lrs[i] if lrs is not None else lr
        # L2 is lazy: it shrinks the row's support on updating steps only (g != 0).
        if g != 0.0:
            w[cols] = w[cols] - step * (g * x + l2 * w[cols])
        w[nf] -= step * g


def test_serial_constant_schedule_decays_per_epoch() -> None:
    data = tiny()
    params = TrainParams(loss="logistic", learning_rate=0.4, lr_schedule="constant",
                         lr_decay=0.5, l2=0.01, mode="serial", batch_rows=7)
    trainer = Trainer(data.n_features, params)
    history = trainer.fit(data, epochs=3)
    assert [s.epoch for s in history] == [0, 1, 2]
    assert all(s.examples == 60 and s.seconds >= 0 for s in history)
    w = np.zeros(data.n_features + 1)
    for epoch in range(3):
        reference_pass(data, w, list(range(60)), 0.4 * 0.5**epoch, 0.01, "logistic")
    np.testing.assert_allclose(trainer.w, w, rtol=1e-12, atol=1e-12)
    # The epoch count continues across calls.
    assert trainer.fit(data, epochs=1)[0].epoch == 3


def test_serial_inverse_schedule_divides_by_one_plus_epochs_done() -> None:
    # The default: lr = learning_rate / (1 + examples seen / rows per epoch), every example.
    data = tiny()
    params = TrainParams(loss="logistic", learning_rate=0.4, l2=0.01, mode="serial",
                         batch_rows=7)
    assert params.lr_schedule == "inverse"
    trainer = Trainer(data.n_features, params)
    trainer.fit(data, epochs=3)
    w = np.zeros(data.n_features + 1)
    for epoch in range(3):
        lrs = [0.4 / (1.0 + (60 * epoch + i) / 60) for i in range(60)]
        reference_pass(data, w, list(range(60)), 0.0, 0.01, "logistic", lrs)
    np.testing.assert_allclose(trainer.w, w, rtol=1e-12, atol=1e-12)


def test_serial_invscaling_carries_step_counter_across_epochs() -> None:
    data = tiny()
    params = TrainParams(loss="hinge", learning_rate=0.5, lr_schedule="invscaling",
                         power_t=0.5, l2=0.0, mode="serial")
    trainer = Trainer(data.n_features, params)
    trainer.fit(data, epochs=2)
    assert trainer.t == 1.0 + 120
    w = np.zeros(data.n_features + 1)
    lrs = [0.5 / t**0.5 for t in range(1, 121)]
    reference_pass(data, w, list(range(60)) * 2, 0.0, 0.0, "hinge", lrs)
    np.testing.assert_allclose(trainer.w, w, rtol=1e-12, atol=1e-12)


def test_locked_mode_takes_strict_turns() -> None:
    # 3 threads, blocks [0,20) [20,40) [40,60), turns of 6 rows: the updates are exactly
    # those of a serial pass in round-robin order (the baseline of the HOGWILD! paper).
    data = tiny()
    params = TrainParams(loss="squared", learning_rate=0.1, lr_schedule="constant", l2=0.001,
                         threads=3, mode="locked", batch_rows=6)
    trainer = Trainer(data.n_features, params)
    trainer.fit_epoch(data, epoch=0)
    blocks = [list(range(a, a + 20)) for a in (0, 20, 40)]
    turns = [[b[i:i + 6] for i in range(0, 20, 6)] for b in blocks]
    order = [r for turn in range(4) for k in range(3) for r in turns[k][turn]]
    w = np.zeros(data.n_features + 1)
    reference_pass(data, w, order, 0.1, 0.001, "squared")
    np.testing.assert_allclose(trainer.w, w, rtol=1e-12, atol=1e-12)
    assert LOCKED_BATCH_ROWS <= 64


def test_locked_mode_with_uneven_blocks_finishes() -> None:
    data = tiny(n_rows=61)
    trainer = Trainer(data.n_features, TrainParams(threads=2, mode="locked", batch_rows=4))
    stats = trainer.fit_epoch(data, epoch=0)
    assert stats.examples == 61 and np.any(trainer.w != 0)


def test_hogwild_more_threads_than_rows() -> None:
    data = tiny(n_rows=3)
    trainer = Trainer(data.n_features, TrainParams(threads=8))
    stats = trainer.fit_epoch(data, epoch=0)
    assert stats.examples == 3 and np.any(trainer.w != 0)


def test_given_weight_vector_is_updated_in_place() -> None:
    data = tiny()
    w = np.zeros(data.n_features + 1)
    trainer = Trainer(data.n_features, TrainParams(), w=w)
    trainer.fit(data, epochs=1)
    assert trainer.w is w and np.any(w != 0)


def test_fit_bias_false_leaves_bias_alone() -> None:
    data = tiny()
    w = np.zeros(data.n_features + 1)
    w[-1] = 0.75
    Trainer(data.n_features, TrainParams(fit_bias=False, threads=2), w=w).fit(data, epochs=2)
    assert w[-1] == 0.75


def test_callback_true_stops_early() -> None:
    data = tiny()
    seen: list[EpochStats] = []

    def stop_after_two(stats: EpochStats) -> bool:
        seen.append(stats)
        return stats.epoch == 1

    history = Trainer(data.n_features, TrainParams()).fit(data, epochs=10,
                                                         callback=stop_after_two)
    assert len(history) == 2 and seen == history
    assert history[1].train_loss < history[0].train_loss


def test_data_with_out_of_range_index_is_rejected_before_training() -> None:
    data = tiny()
    bad = Rows(data.indptr, data.indices.copy(), data.values, data.labels, data.n_features)
    bad.indices[5] = data.n_features
    trainer = Trainer(data.n_features, TrainParams())
    with pytest.raises(DataError):
        trainer.fit(bad, epochs=1)
    assert not trainer.w.any()


@pytest.mark.parametrize(
    ("field", "value"),
    [("loss", "huber"), ("learning_rate", 0.0), ("learning_rate", float("nan")),
     ("learning_rate", -1.0), ("lr_schedule", "optimal"), ("lr_decay", 0.0),
     ("lr_decay", 1.5), ("power_t", -0.1), ("l2", -1e-3), ("threads", 0), ("mode", "fast"),
     ("batch_rows", 0), ("hot_features", -1), ("hot_features", 1.5)],
)
def test_invalid_params_raise_value_error_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        TrainParams(**{field: value})


def test_trainer_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="n_features"):
        Trainer(0, TrainParams())
    with pytest.raises(ValueError):
        Trainer(5, TrainParams(), w=np.zeros(5))


def test_accepts_the_project_csr_container() -> None:
    csr = pytest.importorskip("hogwild.data.csr")
    data = tiny()
    container = csr.CSRData(data.indptr, data.indices, data.values, data.labels,
                            data.n_features)
    trainer = Trainer(data.n_features, TrainParams(threads=2))
    trainer.fit(container, epochs=5)
    assert evaluate(container, trainer.w, "hinge").accuracy > 0.8


# --- buffered hot features -------------------------------------------------------------


def skewed(n_rows: int, n_features: int, hot_id: int, seed: int = 0) -> Rows:
    """Sorted rows of random rare features plus ``hot_id`` in every row; label = its sign."""
    rng = np.random.default_rng(seed)
    rows = [np.unique(np.append(rng.choice(n_features, size=5), hot_id))
            for _ in range(n_rows)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int32)
    values = rng.uniform(0.1, 1.0, size=indices.shape[0]).astype(np.float32)
    labels = rng.choice([-1.0, 1.0], size=n_rows).astype(np.float32)
    values[indices == hot_id] *= labels[np.repeat(np.arange(n_rows), np.diff(indptr))
                                        ][indices == hot_id]
    return Rows(indptr, indices, values, labels, n_features)


def record_hot(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the hot argument of every kernel call the trainer makes."""
    seen: list[int] = []
    real = kernels.sgd_range

    def spy(*args: Any) -> Any:
        seen.append(int(args[16]) if len(args) > 16 else 0)
        return real(*args)

    monkeypatch.setattr(kernels, "sgd_range", spy)
    return seen


def test_hot_features_used_with_two_threads_on_ranked_data(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = skewed(4000, 3000, hot_id=0)
    seen = record_hot(monkeypatch)
    trainer = Trainer(data.n_features, TrainParams(threads=2, hot_features=10_000))
    trainer.fit(data, epochs=3)
    assert seen and set(seen) == {3000}  # capped at n_features
    assert evaluate(data, trainer.w, "hinge").accuracy > 0.95


def test_hot_features_ignored_when_frequent_features_have_high_ids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Feature 2999 is in every row but would be published only at the end of a call.
    data = skewed(4000, 3000, hot_id=2999)
    seen = record_hot(monkeypatch)
    trainer = Trainer(data.n_features, TrainParams(threads=2, hot_features=10_000))
    trainer.fit(data, epochs=3)
    assert seen and set(seen) == {0}
    assert evaluate(data, trainer.w, "hinge").accuracy > 0.95


@pytest.mark.parametrize("params", [TrainParams(mode="serial", hot_features=100),
                                    TrainParams(threads=1, hot_features=100),
                                    TrainParams(threads=2, mode="locked", hot_features=100)])
def test_hot_features_only_in_hogwild_mode_with_threads(
        monkeypatch: pytest.MonkeyPatch, params: TrainParams) -> None:
    data = skewed(500, 300, hot_id=0)
    seen = record_hot(monkeypatch)
    Trainer(data.n_features, params).fit(data, epochs=1)
    assert seen and set(seen) == {0}


def test_choose_hot_features() -> None:
    ranked = csr_arrays(skewed(2000, 3000, hot_id=0), 3000)
    unranked = csr_arrays(skewed(2000, 3000, hot_id=2999), 3000)
    assert choose_hot_features(ranked, 3000, 10_000, 2, 1000) == 3000
    assert choose_hot_features(ranked, 3000, 500, 2, 1000) == 500
    assert choose_hot_features(ranked, 3000, 500, 1, 1000) == 0
    assert choose_hot_features(ranked, 3000, 0, 2, 1000) == 0
    assert choose_hot_features(unranked, 3000, 10_000, 2, 1000) == 0
    # Feature 2999 is not buffered with hot=2000, so buffering the rest is fine.
    assert choose_hot_features(unranked, 3000, 2000, 2, 1000) == 2000
    # Short calls publish everything often enough whatever the order.
    assert choose_hot_features(unranked, 3000, 10_000, 2, 64) == 3000


def test_serial_with_hot_features_still_equals_reference() -> None:
    data = tiny()
    trainer = Trainer(data.n_features, TrainParams(mode="serial", hot_features=5, l2=0.0,
                                                   batch_rows=7, learning_rate=0.5,
                                                   lr_schedule="constant"))
    trainer.fit(data, epochs=1)
    w = np.zeros(data.n_features + 1)
    reference_pass(data, w, list(range(60)), 0.5, 0.0, "hinge")
    np.testing.assert_allclose(trainer.w, w, rtol=1e-12, atol=1e-12)


# --- real data sets -----------------------------------------------------------------------


def load(name: str, n_features: int) -> tuple[Rows, Rows]:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    paths = [DATA / f"{name}.{split}.libsvm.gz" for split in ("train", "test")]
    for p in paths:
        if not p.exists():
            pytest.skip(f"data set {p} not present")
    out = []
    for p in paths:
        x, y = sklearn_datasets.load_svmlight_file(str(p), n_features=n_features)
        x.sort_indices()
        out.append(Rows(x.indptr.astype(np.int64), x.indices.astype(np.int32),
                        x.data.astype(np.float32), y.astype(np.float32), n_features))
    train, test = out
    # Permute the training rows once, physically, as the data layer does for a shard.
    perm = np.random.default_rng(0).permutation(len(train.labels))
    starts, stops = train.indptr[perm], train.indptr[perm + 1]
    pieces = [np.arange(a, b) for a, b in zip(starts, stops)]
    take = np.concatenate(pieces)
    indptr = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
    train = Rows(indptr, train.indices[take], train.values[take], train.labels[perm],
                 n_features)
    return train, test


@pytest.fixture(scope="module")
def earn() -> tuple[Rows, Rows]:
    return load("reuters21578_modapte_earn", 15_206)


@pytest.fixture(scope="module")
def spam() -> tuple[Rows, Rows]:
    return load("spamassassin", 23_941)


def test_warmup_runs() -> None:
    warmup()


def test_hogwild_two_threads_reuters_earn(earn: tuple[Rows, Rows]) -> None:
    train, test = earn
    trainer = Trainer(train.n_features, TrainParams(threads=2, mode="hogwild"))
    history = trainer.fit(train, epochs=5)
    assert history[-1].train_loss < history[0].train_loss
    assert evaluate(test, trainer.w, "hinge").accuracy >= 0.97


def test_hogwild_two_threads_spamassassin(spam: tuple[Rows, Rows]) -> None:
    train, test = spam
    trainer = Trainer(train.n_features, TrainParams(threads=2, mode="hogwild"))
    trainer.fit(train, epochs=5)
    assert evaluate(test, trainer.w, "hinge").accuracy >= 0.98


@pytest.mark.parametrize("mode", ["locked", "serial"])
def test_locked_and_serial_modes_learn(earn: tuple[Rows, Rows], mode: str) -> None:
    train, test = earn
    majority = max(np.mean(test.labels > 0), np.mean(test.labels < 0))
    trainer = Trainer(train.n_features, TrainParams(threads=2, mode=mode))
    trainer.fit(train, epochs=3)
    assert evaluate(test, trainer.w, "hinge").accuracy >= majority + 0.2


def test_logistic_loss_learns_spamassassin(spam: tuple[Rows, Rows]) -> None:
    train, test = spam
    trainer = Trainer(train.n_features, TrainParams(loss="logistic", learning_rate=2.0))
    trainer.fit(train, epochs=5)
    assert evaluate(test, trainer.w, "logistic").accuracy >= 0.97


def renumbered(train: Rows, test: Rows) -> tuple[Any, Any]:
    from hogwild.data.csr import CSRData
    from hogwild.data.transform.reorder import frequency_order, renumber

    tr = CSRData(train.indptr, train.indices, train.values, train.labels, train.n_features)
    te = CSRData(test.indptr, test.indices, test.values, test.labels, test.n_features)
    order = frequency_order(tr)
    return renumber(tr, order), renumber(te, order)


@pytest.mark.parametrize(("name", "floor"), [("earn", 0.97), ("spam", 0.98)])
def test_hogwild_hot_features_on_renumbered_data(name: str, floor: float,
                                                 request: pytest.FixtureRequest) -> None:
    train, test = renumbered(*request.getfixturevalue(name))
    trainer = Trainer(train.n_features, TrainParams(threads=2, hot_features=RENUMBERED_HOT_FEATURES))
    history = trainer.fit(train, epochs=5)
    assert history[-1].train_loss < history[0].train_loss
    assert evaluate(test, trainer.w, "hinge").accuracy >= floor
