"""Row weights: sample_weight and class_weight scale each row's gradient in the kernels, in the
estimators, in `hogwild train --class-weight` and in a cluster run's RunConfig."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import recall_score

from hogwild import HogwildClassifier, HogwildRegressor, config
from hogwild.cli import main
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import value_bound
from hogwild.cluster.worker.plan import RunPlan
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.sources import load_source
from hogwild.data.transform.classweights import class_weights, run_class_weights
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.errors import ConfigError, InvalidMessage
from hogwild.model import kernels


def _rows(n: int = 200, d: int = 10, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = np.where(X @ rng.normal(size=d) + rng.normal(scale=2.0, size=n) > 0, 1, -1)
    return X, y


# ------------------------------------------------------------------------------ kernels


def test_a_row_weight_scales_its_step_and_zero_skips_it() -> None:
    X, y = _rows(1)
    data = CSRData.from_scipy(sp.csr_matrix(X), y)
    args = (data.indptr, data.indices, data.values, data.labels, 0, 1)
    tail = (10, 0, 0.1, 0, 1.0, 1.0, 0.0, True, 1.0, 0)
    plain = np.zeros(11)
    kernels.sgd_range(*args, plain, *tail)
    for c in (0.0, 1.0, 2.5):
        w = np.zeros(11)
        kernels.sgd_range(*args, w, *tail, np.array([c], np.float32))
        assert np.array_equal(w, c * plain)  # from zero, one hinge step: exactly c times


def test_trainer_with_unit_weights_is_the_unweighted_trainer() -> None:
    X, y = _rows(300)
    data = CSRData.from_scipy(sp.csr_matrix(X), y)
    for mode, batch in (("serial", 1), ("serial", 8), ("syncsgd", 8)):
        params = TrainParams(threads=2, mode=mode, batch_size=batch)
        a, b = Trainer(10, params), Trainer(10, params)
        a.fit(data, 2)
        b.fit(data.with_weights(np.ones(300)), 2)
        assert np.allclose(a.w, b.w, rtol=1e-12, atol=1e-12), mode


# ------------------------------------------------------------------------------ estimators


def test_weighted_fit_is_fit_on_duplicated_rows() -> None:
    X, y = _rows(400)
    counts = np.where(X[:, 0] > 0, 4, 1)  # half the space weighs 4: the optimum moves
    repeated = np.repeat(np.arange(X.shape[0]), counts)
    kw: dict[str, Any] = {"threads": 1, "loss": "logistic", "l2": 1e-2, "epochs": 40,
                          "learning_rate": 0.05}
    weighted = HogwildClassifier(**kw).fit(X, y, sample_weight=counts)
    duplicated = HogwildClassifier(seed=7, **kw).fit(X[repeated], y[repeated])
    plain = HogwildClassifier(**kw).fit(X, y)
    near = np.linalg.norm(weighted.weights_ - duplicated.weights_)
    # Measured: 0.02-0.03 apart (SGD noise), against 0.29 for the unweighted fit.
    assert near < 0.1 < np.linalg.norm(plain.weights_ - duplicated.weights_) / 2
    # The stream too, and the regressor.
    fed = HogwildClassifier(**kw).partial_fit(X, y, classes=[-1, 1], sample_weight=counts)
    assert not np.allclose(fed.weights_, HogwildClassifier(**kw).partial_fit(
        X, y, classes=[-1, 1]).weights_)
    reg = {"threads": 1, "epochs": 30, "l2": 1e-2}
    yr = X @ np.arange(10.0) * 0.1 + np.where(X[:, 0] > 0, 1.0, -1.0)
    w_reg = HogwildRegressor(**reg).fit(X, yr, sample_weight=counts)
    d_reg = HogwildRegressor(seed=3, **reg).fit(X[repeated], yr[repeated])
    assert np.linalg.norm(w_reg.weights_ - d_reg.weights_) < 0.1


@pytest.fixture(scope="module")
def imbalanced() -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
    """spamassassin with one positive (spam) row in ten kept: 4% positives."""
    train = load_source("bundled:spamassassin", cache=False)
    test = load_source("bundled:spamassassin/test", cache=False)
    pos, neg = np.flatnonzero(train.labels > 0), np.flatnonzero(train.labels < 0)
    keep = np.sort(np.concatenate([neg, pos[: len(pos) // 10]]))
    return train.to_scipy()[keep], train.labels[keep], test.to_scipy(), test.labels


def test_balanced_class_weight_raises_the_minority_recall(imbalanced: Any) -> None:
    X, y, X_test, y_test = imbalanced
    recall = {}
    for cw in (None, "balanced", {1.0: 10.0}, "1:10"):
        clf = HogwildClassifier(threads=1, epochs=2, class_weight=cw).fit(X, y)
        recall[str(cw)] = recall_score(y_test, clf.predict(X_test))
    # Measured: 0.45-0.58 unweighted, 0.77-0.91 balanced (seeds 0-2).
    assert recall["balanced"] > recall["None"] + 0.15
    assert recall["{1.0: 10.0}"] == recall["1:10"] > recall["None"] + 0.15


def test_weights_are_validated() -> None:
    X, y = _rows(20)
    clf = HogwildClassifier(threads=1)
    with pytest.raises(ValueError, match="sample_weight must be finite and >= 0; row 3"):
        clf.fit(X, y, sample_weight=np.where(np.arange(20) == 3, -1.0, 1.0))
    with pytest.raises(ValueError, match="sample_weight"):
        clf.fit(X, y, sample_weight=np.ones(19))
    with pytest.raises(ValueError, match="sample_weight"):
        clf.fit(X, y, sample_weight=np.where(np.arange(20) == 2, np.nan, 1.0))
    with pytest.raises(ValueError, match="class_weight"):
        HogwildClassifier(class_weight={5: 2.0}).fit(X, y)  # not a class
    with pytest.raises(ValueError, match="class_weight must be balanced or LABEL:WEIGHT"):
        HogwildClassifier(class_weight="1:x").fit(X, y)
    with pytest.raises(ValueError, match="class_weight='balanced' needs the class counts"):
        HogwildClassifier(class_weight="balanced").partial_fit(X, y, classes=[-1, 1])
    with pytest.raises(Exception, match="weight of row 1 must be finite and >= 0"):
        CSRData.from_scipy(sp.csr_matrix(X[:2]), y[:2], [1.0, -2.0])


# ------------------------------------------------------------------------------ settings, CLI


@pytest.mark.parametrize("text", ["1:x", "balance", "1:2,1:3", "1:-2", "1:inf", "1", ":2"])
def test_the_class_weight_setting_refuses_bad_text(text: str) -> None:
    with pytest.raises(ConfigError, match="'class_weight': must be balanced or LABEL:WEIGHT"):
        config.load(None, {}, {"class_weight": text})


def test_class_weight_is_refused_where_it_is_not_trained() -> None:
    for other, named in (({"loss": "squared"}, "loss squared"),
                         ({"model": "mlp"}, "model mlp"),
                         ({"out_of_core": True}, "out_of_core")):
        with pytest.raises(ConfigError, match=f"class_weight.*{named}"):
            config.load(None, {}, {"class_weight": "balanced", **other})
    s = config.load(None, {}, {"class_weight": " 1:2.0,-1:0.5"})
    assert s.class_weight == " 1:2.0,-1:0.5"


def test_class_weights_of_the_data() -> None:
    classes = (0.0, 1.0)
    assert class_weights("", classes, [8, 2]) is None
    assert class_weights("balanced", classes, [8, 2]).tolist() == [10 / 16, 10 / 4]
    assert class_weights("1:3", classes, None).tolist() == [1.0, 3.0]
    with pytest.raises(ConfigError, match="'class_weight': names label 2, which is not a class"):
        class_weights("2:3", classes, None)
    with pytest.raises(ConfigError, match="'class_weight': balanced counts the training rows"):
        class_weights("balanced", classes, None)
    # A cluster run's: the weights of targets -1 and +1.
    assert run_class_weights("balanced", classes, np.array([-1, -1, -1, 1])) == (
        4 / 6, 4 / 2)
    assert run_class_weights("", classes, None) == ()


def test_train_command_with_class_weight(imbalanced: Any, tmp_path: Path) -> None:
    X, y, _, _ = imbalanced
    data = tmp_path / "imbalanced.svm"
    write_svmlight(CSRData.from_scipy(X, y), data)
    recall = {}
    for flag in ([], ["--class-weight", "balanced"]):
        out = tmp_path / ("w" if flag else "plain")
        assert main(["train", "--data", str(data), "--test-data",
                     "bundled:spamassassin/test", "--n-features", str(X.shape[1]),
                     "--epochs", "2", "--threads", "1", "--no-data-cache", "--out", str(out),
                     *flag], environ={}) == 0
        metrics = json.loads((out / "latest" / "metrics.json").read_text())
        recall[bool(flag)] = metrics["test_recall"]
    assert recall[True] > recall[False] + 0.15


def test_train_command_refuses_a_bad_class_weight_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--class-weight", "yes:1", "--out", str(tmp_path)],
                environ={}) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "class_weight" in err and "LABEL:WEIGHT" in err
    assert main(["train", "--class-weight", "7:2", "--epochs", "1", "--out", str(tmp_path)],
                environ={}) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'class_weight': names label 7, which is not a class" in err


# ------------------------------------------------------------------------------ cluster


def _config(**changes: Any) -> pb.RunConfig:
    fields: dict[str, Any] = {
        "protocol_version": PROTOCOL_VERSION, "run_id": "r", "worker_id": 0, "dim": 11,
        "n_features": 10, "mode": "sync", "staleness": -1, "threads": 1, "round_size": 10,
        "max_rounds": 2, "train_rows": 100, "loss": "hinge", "learning_rate": 0.1,
        "lr_schedule": "constant", "lr_decay": 0.9, "power_t": 0.5, "l2": 0.0,
        "fit_bias": True, "barrier_timeout": 1.0, "rpc_timeout": 1.0, "max_abs_value": 1.0,
        "run_threads": 2}
    fields.update(changes)
    return pb.RunConfig(**fields)


def test_the_run_config_carries_the_class_weights_and_widens_the_bound() -> None:
    plain = RunPlan.from_message(_config())
    weighted = RunPlan.from_message(_config(class_weights=[0.5, 4.0]))
    assert plain.class_weights == () and weighted.class_weights == (0.5, 4.0)
    # A row's step grows with its weight: so does the bound on a legitimate delta value.
    assert weighted.max_delta_value == 4 * plain.max_delta_value  # l2 0: linear in the step
    assert value_bound(model="linear", loss="hinge", lr_schedule="constant",
                       learning_rate=0.4, lr_decay=0.9, l2=0.0, max_abs_value=1.0,
                       run_threads=2, round_size=10, max_rounds=2) == weighted.max_delta_value
    for bad in ([1.0], [1.0, -1.0], [1.0, float("nan")], [1.0, 2.0, 3.0]):
        with pytest.raises(InvalidMessage, match="run config class_weights"):
            RunPlan.from_message(_config(class_weights=bad))
    with pytest.raises(InvalidMessage, match="class_weights: weigh a linear classifier"):
        RunPlan.from_message(_config(class_weights=[1.0, 2.0], loss="squared"))


def test_class_weight_and_average_survive_save_and_load(tmp_path: Path) -> None:
    X, y = _rows(100)
    clf = HogwildClassifier(threads=1, class_weight={1: 2.0}, average=True).fit(X, y)
    clf.save(tmp_path / "m")
    loaded = HogwildClassifier.load(tmp_path / "m")
    assert loaded.class_weight == "1.0:2.0" and loaded.average is True
    assert loaded.t_ == clf.t_ and np.array_equal(loaded.predict(X), clf.predict(X))
    loaded.partial_fit(X, y)  # the class weights still name the classes; averaging anew
    assert loaded.t_ == clf.t_ + 100


def test_train_command_weighs_the_classes_of_multiclass_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6)).astype(np.float32)
    y = np.argmax(X[:, :3] + rng.normal(scale=0.5, size=(600, 3)), axis=1) * 10.0
    keep = np.flatnonzero((y != 20) | (np.arange(600) % 8 == 0))  # class 20 rare
    data = tmp_path / "three.svm"
    write_svmlight(CSRData.from_scipy(sp.csr_matrix(X[keep]), y[keep]), data)
    recall = {}
    for flag in ("", "balanced", "20:6"):
        out = tmp_path / (flag.replace(":", "-") or "plain")
        assert main(["train", "--data", str(data), "--epochs", "3", "--threads", "1",
                     "--no-data-cache", "--out", str(out), "--class-weight", flag],
                    environ={}) == 0
        model = HogwildClassifier.load(out / "latest")
        rare = y == 20
        recall[flag] = float(np.mean(model.predict(X[rare]) == 20))
    assert recall["balanced"] > recall[""] + 0.1 and recall["20:6"] > recall[""] + 0.1, recall
