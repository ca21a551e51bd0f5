"""The sparse-input MLP: compiled gradients against numerical ones, training, threads, layout,
saving, settings and run-config validation."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild import config
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.worker.plan import RunPlan
from hogwild.data.formats.placement import permuted
from hogwild.data.sources import load_source
from hogwild.data.transform.reorder import frequency_order, renumber
from hogwild.engine.mlp import MLPTrainer
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.errors import ConfigError, InvalidMessage, ModelError
from hogwild.inprocess.local import train_job
from hogwild.model import mlp_kernels
from hogwild.model.evaluation import evaluate, predict
from hogwild.model.files import MODEL_FILE, MODEL_META_FILE
from hogwild.model.losses import get_loss
from hogwild.model.saved import SavedModel
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts

from .rows import Rows


def xor_rows(n_rows: int = 2000, seed: int = 0) -> Rows:
    """Sparse rows whose label is the XOR of two feature groups: no linear model fits it."""
    rng = np.random.default_rng(seed)
    a = rng.random(n_rows) < 0.5
    b = rng.random(n_rows) < 0.5
    indptr, indices, values = [0], [], []
    for i in range(n_rows):
        cols = {0 if a[i] else 1, 2 if b[i] else 3, *rng.integers(4, 30, size=3).tolist()}
        for c in sorted(cols):
            indices.append(c)
            values.append(1.0 if c < 4 else rng.uniform(0.1, 0.5))
        indptr.append(len(indices))
    labels = np.where(a ^ b, 1.0, -1.0)
    return Rows(np.asarray(indptr, np.int64), np.asarray(indices, np.int32),
                np.asarray(values, np.float32), labels.astype(np.float32), 30)


def one_row(spec: ModelSpec) -> tuple[np.ndarray, ...]:
    indptr = np.array([0, 3], dtype=np.int64)
    indices = np.array([0, 2, spec.n_features - 1], dtype=np.int32)
    values = np.array([0.5, -1.2, 2.0], dtype=np.float32)
    return indptr, indices, values


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("loss_name,label", [("logistic", 1.0), ("squared", 0.3),
                                             ("hinge", 1.0)])
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("hidden,deep_lr", [((4,), 1.0), ((5, 3), 1.0), ((4,), 0.25)])
def test_compiled_gradient_equals_numerical_gradient(loss_name: str, label: float,
                                                     binary: bool, hidden: tuple[int, ...],
                                                     deep_lr: float) -> None:
    """One SGD step with no L2 moves every parameter by -lr x gradient (the deep part by
    -deep_lr x lr x gradient): compare that gradient, coordinate by coordinate, with central
    differences of the compiled loss, the wide weights and the output bias included."""
    spec = ModelSpec("mlp", 6, hidden, binary)
    rng = np.random.default_rng(7)
    w0 = spec.initial_weights(3) + rng.normal(scale=0.3, size=spec.dim)
    indptr, indices, values = one_row(spec)
    labels = np.array([label], dtype=np.float32)
    code = get_loss(loss_name).code
    h = spec.hidden_array()
    if loss_name == "hinge":  # stay away from the kink: the margin must be below 1
        m = np.empty(1)
        mlp_kernels.mlp_decision(indptr, indices, values, w0, 6, h, binary, m)
        if label * m[0] >= 0.9:
            w0[-1] -= label * (label * m[0] + 1.0)
    lr = 1e-3
    w1 = w0.copy()
    mlp_kernels.mlp_sgd_range(indptr, indices, values, labels, 0, 1, w1, 6, h, code, lr, 0,
                              0.5, 1.0, 0.0, True, binary, 1.0, 64, deep_lr)
    # The wide part (each row's last weight, and the output bias) steps at lr.
    scale = np.full(spec.dim, deep_lr)
    scale[hidden[0]:spec.shared_from:hidden[0] + 1] = 1.0
    scale[-1] = 1.0
    grad = (w0 - w1) / (lr * scale)

    def loss_at(v: np.ndarray) -> float:
        return float(mlp_kernels.mlp_evaluate(indptr, indices, values, labels, v, 6, h,
                                              binary, code)[0])

    eps = 1e-6
    numeric = np.empty(spec.dim)
    for i in range(spec.dim):
        e = np.zeros(spec.dim)
        e[i] = eps
        numeric[i] = (loss_at(w0 + e) - loss_at(w0 - e)) / (2 * eps)
    assert np.max(np.abs(numeric)) > 0.05  # the check is not vacuous
    np.testing.assert_allclose(grad, numeric, atol=1e-7, rtol=1e-5)
    # Only the rows of the row's features move in W1 and the wide weights.
    b = spec.shared_from
    moved = np.flatnonzero(np.any(w1[:b].reshape(6, -1) != w0[:b].reshape(6, -1), axis=1))
    assert set(moved.tolist()) == {0, 2, 5}


def test_binary_features_ignore_the_values() -> None:
    spec = ModelSpec("mlp", 6, (4,), binary_features=True)
    w = spec.initial_weights(1)
    indptr, indices, values = one_row(spec)
    out_values, out_ones = np.empty(1), np.empty(1)
    h = spec.hidden_array()
    mlp_kernels.mlp_decision(indptr, indices, values, w, 6, h, True, out_values)
    mlp_kernels.mlp_decision(indptr, indices, np.ones(3, np.float32), w, 6, h, False, out_ones)
    assert out_values[0] == pytest.approx(out_ones[0], rel=1e-12)


def test_without_fit_bias_the_biases_stay_zero() -> None:
    spec = ModelSpec("mlp", 30, (8, 4))
    data = xor_rows(200)
    trainer = MLPTrainer(spec, TrainParams(loss="logistic", learning_rate=0.1, fit_bias=False,
                                           threads=1), seed=0)
    trainer.fit(data, 2)
    arrays = spec.arrays(trainer.w)
    for name in ("b1", "b2", "b3"):
        assert not np.any(arrays[name]), name
    assert np.any(arrays["W2"] != spec.arrays(spec.initial_weights(0))["W2"])


# ------------------------------------------------------------------------------ training


def _spam_raw() -> tuple[Any, Any]:
    from hogwild.data.sources import default_test_source

    test_spec = default_test_source("bundled:spamassassin")
    assert test_spec
    return load_source("bundled:spamassassin"), load_source(test_spec)


def test_training_reduces_the_loss_and_learns_what_a_linear_model_cannot() -> None:
    data = xor_rows(3000)
    test = xor_rows(1000, seed=1)
    spec = ModelSpec("mlp", 30, (16,))
    trainer = MLPTrainer(spec, TrainParams(loss="logistic", learning_rate=0.2, threads=1),
                         seed=0)
    before = evaluate(test, trainer.w, "logistic", spec)
    history = trainer.fit(data, 8)
    after = evaluate(test, trainer.w, "logistic", spec)
    assert history[-1].train_loss < 0.5 * history[0].train_loss
    assert after.loss < 0.5 * before.loss
    assert after.accuracy is not None and after.accuracy >= 0.97
    # The linear model on the same rows stays near chance: the XOR needs the hidden layer.
    linear = Trainer(30, TrainParams(loss="logistic", learning_rate=0.2, threads=1))
    linear.fit(data, 8)
    lin = evaluate(test, linear.w, "logistic")
    assert lin.accuracy is not None and lin.accuracy < 0.8


def _spam() -> tuple[Any, Any]:
    """SpamAssassin train and test, one width, renumbered by frequency as runs do."""
    train, test = _spam_raw()
    width = max(train.n_features, test.n_features)
    train, test = train.with_n_features(width), test.with_n_features(width)
    train = permuted(train, seed=0)  # the file lists the ham first
    order = frequency_order(train)
    return renumber(train, order), renumber(test, order)


def test_two_hogwild_threads_train_as_accurately_as_one() -> None:
    train, test = _spam()
    spec = ModelSpec("mlp", train.n_features, (32,))
    accuracies = {}
    for threads in (1, 2):
        trainer = MLPTrainer(spec, TrainParams(loss="logistic", learning_rate=0.2,
                                               threads=threads, batch_rows=512), seed=0)
        trainer.fit(train, 4)
        metrics = evaluate(test, trainer.w, "logistic", spec)
        assert metrics.accuracy is not None
        accuracies[threads] = metrics.accuracy
    assert accuracies[1] >= 0.97
    assert accuracies[2] >= accuracies[1] - 0.01, accuracies


def test_unbuffered_dense_layers_train_too() -> None:
    train, test = _spam()
    spec = ModelSpec("mlp", train.n_features, (32,))
    trainer = MLPTrainer(spec, TrainParams(loss="logistic", learning_rate=0.2, threads=2,
                                           batch_rows=512), seed=1, flush_rows=1)
    trainer.fit(train, 4)
    metrics = evaluate(test, trainer.w, "logistic", spec)
    assert metrics.accuracy is not None and metrics.accuracy >= 0.97


# ------------------------------------------------------------------- layout and saving


def test_layout_arrays_and_flat_vector_round_trip() -> None:
    spec = ModelSpec("mlp", 10, (4, 3))
    assert spec.dim == 10 * (4 + 1) + 4 + 4 * 3 + 3 + 3 + 1
    assert spec.shared_from == 50 and spec.row_width == 5
    w = np.arange(spec.dim, dtype=np.float64)
    arrays = spec.arrays(w)
    assert {k: v.shape for k, v in arrays.items()} == {
        "W1": (10, 4), "b1": (4,), "W2": (4, 3), "b2": (3,), "W3": (3, 1), "b3": (1,),
        "wide": (10,)}
    assert arrays["b3"][0] == spec.dim - 1  # the output bias is the last entry
    # Feature f's row: its 4 embedding weights, then its wide weight.
    assert arrays["W1"][2].tolist() == [10, 11, 12, 13] and arrays["wide"][2] == 14
    np.testing.assert_array_equal(spec.flatten(arrays), w)
    layout = mlp_kernels.dense_layout(10, spec.hidden_array())
    assert layout.tolist() == [0, 4, 16, 19, 22, 23]
    with pytest.raises(ValueError, match="W2"):
        spec.flatten({**arrays, "W2": np.zeros((3, 4))})
    assert ModelSpec.linear(10).dim == 11 and ModelSpec.linear(10).shared_from == 10


def test_initialisation_is_seeded_and_he_scaled() -> None:
    spec = ModelSpec("mlp", 500, (200, 100))
    a, b, c = spec.initial_weights(1), spec.initial_weights(1), spec.initial_weights(2)
    np.testing.assert_array_equal(a, b)
    assert np.any(a != c)
    arrays = spec.arrays(a)
    assert abs(arrays["W2"].std() - np.sqrt(2 / 200)) < 0.01
    assert abs(arrays["W1"].std() - 0.1) < 0.01
    assert not np.any(arrays["b1"]) and not np.any(arrays["b3"])
    # The output layer and the wide part start at zero: the start is the linear model's.
    assert not np.any(arrays["W3"]) and not np.any(arrays["wide"])


def test_restore_maps_first_layer_rows_back_to_input_ids() -> None:
    data = xor_rows(300)
    order = np.random.default_rng(0).permutation(30).astype(np.int32)
    renumbered = Rows(data.indptr, order[data.indices], data.values, data.labels, 30)
    # Rows must keep ascending ids for nothing here; the MLP does not need sorted rows.
    spec = ModelSpec("mlp", 30, (6,))
    w = spec.initial_weights(5)
    restored = spec.restore(w, order)
    np.testing.assert_allclose(predict(data, restored, spec), predict(renumbered, w, spec))


def test_saved_model_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "run"
    settings = config.load(flags={"model": "mlp", "hidden": "16,8", "loss": "logistic",
                                  "learning_rate": 0.2, "epochs": 2, "threads": 2,
                                  "out_dir": str(out), "data_cache": False})
    metrics = train_job(settings, out=io.StringIO())
    out = out / artifacts.LATEST  # the run's own directory in the runs root
    meta = json.loads((out / MODEL_META_FILE).read_text())
    assert meta["model"] == "mlp" and meta["hidden"] == [16, 8]
    assert meta["format_version"] == 2 and meta["task"] == "binary"
    assert metrics["model"] == "mlp"
    with np.load(out / MODEL_FILE) as archive:
        # no "w"
        assert sorted(archive.files) == ["W1", "W2", "W3", "b1", "b2", "b3", "wide"]
        assert archive["W2"].shape == (16, 8) and archive["W3"].shape == (8, 1)
    saved = SavedModel.load(out)
    spec, w = saved.spec, saved.w
    assert spec == ModelSpec("mlp", meta["n_features"], (16, 8))
    # The saved weights are in the input files' ids: scoring the raw test file with them
    # gives the accuracy the run reported.
    _, test = _spam_raw()
    loaded = evaluate(test.with_n_features(spec.n_features), w, "logistic", spec)
    assert loaded.accuracy == pytest.approx(metrics["test_accuracy"], abs=1e-12)
    assert loaded.loss == pytest.approx(metrics["test_loss"], rel=1e-9)
    # Saving the loaded model again gives the same arrays.
    again = tmp_path / "again"
    saved.save(again)
    reloaded = SavedModel.load(again)
    np.testing.assert_array_equal(reloaded.w, saved.w)
    assert reloaded.spec == spec


def test_saved_mlp_with_inconsistent_metadata_is_refused(tmp_path: Path) -> None:
    spec = ModelSpec("mlp", 12, (4,))
    w = spec.initial_weights(0)
    SavedModel(w=w, loss="hinge", model="mlp", arrays=spec.arrays(w)).save(tmp_path)
    assert SavedModel.load(tmp_path).spec == spec
    meta_path = tmp_path / MODEL_META_FILE
    doc = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**doc, "hidden": [5]}))
    with pytest.raises(ModelError, match="hidden"):
        SavedModel.load(tmp_path)
    bad = spec.arrays(w)
    bad["b1"] = np.zeros(3)
    with pytest.raises(ModelError, match="b1"):
        SavedModel(w=np.zeros(0), loss="hinge", model="mlp", arrays=bad)


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize("value", ["0", "-3", "a", "[]", "[1.5]", "64,x", "true"])
def test_hidden_must_be_positive_integers(value: str) -> None:
    with pytest.raises(ConfigError, match="'hidden'"):
        config.load(flags={"hidden": value})


def test_hidden_in_a_settings_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("model: mlp\nhidden: [128, 32]\nbinary_features: true\n")
    s = config.load(good)
    assert (s.model, s.hidden, s.binary_features) == ("mlp", (128, 32), True)
    bad = tmp_path / "bad.yaml"
    bad.write_text("hidden: [64, 0]\n")
    with pytest.raises(ConfigError, match="'hidden'"):
        config.load(bad)
    with pytest.raises(ConfigError, match="'model'"):
        config.load(flags={"model": "transformer"})
    assert config.load(environ={"HOGWILD_HIDDEN": "[8]"}).hidden == (8,)
    with pytest.raises(ConfigError, match="'batch_size'"):
        config.load(flags={"model": "mlp", "batch_size": 8})
    with pytest.raises(ConfigError, match="'trainer'"):
        config.load(flags={"model": "mlp", "trainer": "syncsgd"})
    assert config.load().replace(hidden=(4, 2)).hidden == (4, 2)


def test_model_spec_rejects_bad_shapes() -> None:
    for hidden in ((), (0,), (3, -1), ("8",), 8):
        with pytest.raises(ValueError):
            ModelSpec("mlp", 10, hidden)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parameters"):
        ModelSpec("mlp", 2**28, (64,))
    with pytest.raises(ValueError, match="model must be"):
        ModelSpec("tree", 10)


def _run_config(**changes: Any) -> pb.RunConfig:
    base: dict[str, Any] = {
        "protocol_version": PROTOCOL_VERSION, "run_id": "r", "worker_id": 0, "dim": 11,
        "n_features": 10, "mode": "sync", "staleness": -1, "threads": 1, "round_size": 10,
        "max_rounds": 2, "train_rows": 100, "loss": "hinge", "learning_rate": 0.1,
        "lr_schedule": "constant", "lr_decay": 0.9, "power_t": 0.5, "l2": 0.0,
        "fit_bias": True, "barrier_timeout": 1.0, "rpc_timeout": 1.0, "deep_lr_scale": 1.0}
    base.update(changes)
    return pb.RunConfig(**base)


def test_run_config_carries_the_model() -> None:
    assert RunPlan.from_message(_run_config()).spec == ModelSpec.linear(10)
    mlp = ModelSpec("mlp", 10, (4, 3))
    plan = RunPlan.from_message(_run_config(model="mlp", hidden=[4, 3], dim=mlp.dim,
                                            binary_features=True))
    assert plan.spec == ModelSpec("mlp", 10, (4, 3), True)
    with pytest.raises(InvalidMessage, match="dim"):
        RunPlan.from_message(_run_config(model="mlp", hidden=[4, 3], dim=11))
    with pytest.raises(InvalidMessage, match="model"):
        RunPlan.from_message(_run_config(model="mlp", hidden=[], dim=11))
    with pytest.raises(InvalidMessage, match="model"):
        RunPlan.from_message(_run_config(model="forest"))

def test_run_config_carries_the_deep_step() -> None:
    mlp = ModelSpec("mlp", 10, (4,))
    plan = RunPlan.from_message(_run_config(model="mlp", hidden=[4], dim=mlp.dim,
                                            deep_lr_scale=0.25))
    assert plan.deep_lr_scale == 0.25
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidMessage, match="deep_lr_scale"):
            RunPlan.from_message(_run_config(model="mlp", hidden=[4], dim=mlp.dim,
                                             deep_lr_scale=bad))
    # A linear model has no deep part: the field is not looked at.
    assert RunPlan.from_message(_run_config(deep_lr_scale=0.0)).deep_lr_scale == 1.0


@pytest.mark.parametrize("value", ["0", "-0.5", "inf", "x"])
def test_deep_lr_scale_must_be_positive(value: str) -> None:
    with pytest.raises(ConfigError, match="'deep_lr_scale'"):
        config.load(flags={"deep_lr_scale": value})
    with pytest.raises(ValueError, match="deep_lr_scale"):
        MLPTrainer(ModelSpec("mlp", 4, (2,)), TrainParams(), deep_lr_scale=0.0)


# ------------------------------------------------------------------------ the wide part


def test_wide_part_alone_is_the_linear_model() -> None:
    """With the deep part at zero (W1, b1 and Wo all 0) the MLP's margin is the linear
    model's over [wide weights, output bias], and it stays there in training: every deep
    gradient is 0, and the wide part steps exactly as the linear kernel steps its weights."""
    train, test = _spam()
    d = train.n_features
    spec = ModelSpec("mlp", d, (8,))
    params = TrainParams(loss="hinge", learning_rate=0.5, l2=1e-4, threads=1)
    w = np.zeros(spec.dim)
    rng = np.random.default_rng(0)
    rows = w[:spec.shared_from].reshape(d, 9)
    rows[:, 8] = rng.normal(scale=0.1, size=d)
    w[-1] = 0.3
    linear_w = np.append(rows[:, 8], 0.3)
    np.testing.assert_allclose(predict(test, w, spec), predict(test, linear_w), rtol=1e-12)
    mlp = MLPTrainer(spec, params, w=w.copy(), deep_lr_scale=0.7)
    linear = Trainer(d, params, w=linear_w.copy())
    mlp.fit(train, 2)
    linear.fit(train, 2)
    arrays = spec.arrays(mlp.w)
    for name in ("W1", "b1", "W2"):
        assert not np.any(arrays[name]), name
    np.testing.assert_allclose(np.append(arrays["wide"], arrays["b2"]), linear.w, rtol=1e-9,
                               atol=1e-12)
    assert np.any(linear.w[:-1] != linear_w[:-1])  # training moved the weights


def test_the_deep_part_adds_what_the_wide_part_cannot() -> None:
    """On the XOR rows the trained model's wide part alone stays near chance; the deep part
    is what fits them."""
    data, test = xor_rows(3000), xor_rows(1000, seed=1)
    spec = ModelSpec("mlp", 30, (16,))
    trainer = MLPTrainer(spec, TrainParams(loss="logistic", learning_rate=0.2, threads=1),
                         seed=0, deep_lr_scale=1.0)
    trainer.fit(data, 8)
    full = evaluate(test, trainer.w, "logistic", spec).accuracy
    wide_only = trainer.w.copy()
    wide_only[spec.shared_from + 16:-1] = 0.0  # the output layer Wo
    wide = evaluate(test, wide_only, "logistic", spec).accuracy
    assert full is not None and wide is not None
    assert full >= 0.97 and wide < 0.8, (full, wide)


def test_a_model_saved_without_wide_weights_loads_with_zero_wide_part(tmp_path: Path) -> None:
    spec = ModelSpec("mlp", 12, (4,))
    w = spec.initial_weights(0)
    w[spec.shared_from:] = np.random.default_rng(1).normal(size=spec.dim - spec.shared_from)
    arrays = spec.arrays(w)
    del arrays["wide"]  # as written before the wide part existed
    saved = SavedModel(w=np.zeros(0), loss="hinge", model="mlp", arrays=arrays)
    saved.save(tmp_path)
    loaded = SavedModel.load(tmp_path)
    assert loaded.spec == spec
    np.testing.assert_array_equal(loaded.w, w)
