"""Warm start: `train` / `run` with initial_model, and the estimators' warm_start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from hogwild.cli import main
from hogwild.engine.stopping import EarlyStopping
from hogwild.estimators import HogwildClassifier, HogwildRegressor
from hogwild.model.saved import SavedModel

# One serial thread: every run is the same function of its settings.
_BASE = ("--data-cache", "false", "--loss", "logistic", "--trainer", "serial", "--threads", "1",
         "--patience", "0", "-q", "--json")


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, *extra: str,
           command: str = "train") -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    base = _BASE if command == "train" else _BASE[:4] + _BASE[6:]  # no trainer
    code = main([command, "--out", str(tmp_path / name), *base, *extra], environ={})
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else {}, captured.err


def test_one_more_epoch_from_a_saved_model_beats_the_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, first, _ = _train(tmp_path, capsys, "a", "--epochs", "1")
    assert code == 0 and first["initial_model"] is None
    code, more, _ = _train(tmp_path, capsys, "b", "--epochs", "1",
                           "--initial-model", str(tmp_path / "a" / "latest"))
    assert code == 0
    assert more["test_loss"] < first["test_loss"]
    assert more["initial_model"]["epochs"] == 1
    assert more["initial_model"]["test_loss"] == pytest.approx(first["test_loss"])
    assert more["initial_model"]["path"] == str((tmp_path / "a" / "latest").resolve())
    # Also what two epochs from zeros reach, or better (the step sizes start again).
    code, two, _ = _train(tmp_path, capsys, "c", "--epochs", "2")
    assert more["test_loss"] <= two["test_loss"] * 1.05
    # The saved model of the warm run records where it started.
    saved = SavedModel.load(tmp_path / "b" / "latest")
    assert saved.meta["metrics"]["initial_model"]["epochs"] == 1


def test_mismatches_are_refused_in_one_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = _train(tmp_path, capsys, "a", "--epochs", "1")
    assert code == 0
    start = str(tmp_path / "a" / "latest")
    wider = tmp_path / "wide.svm"
    wider.write_text("1 1:1 30000:1\n-1 2:1\n" * 20)
    cases = {
        "30000": ("--data", str(wider)),            # features beyond the model's
        "n_features is 100": ("--n-features", "100"),
        "loss logistic, this run hinge": ("--loss", "hinge"),
        "model kind linear, this run mlp": ("--model", "mlp"),
        "zero_based false": ("--zero-based",),
        "no model at": (),
    }
    for expected, extra in cases.items():
        initial = str(tmp_path / "none") if expected == "no model at" else start
        code, _, err = _train(tmp_path, capsys, "x", "--epochs", "1", *extra,
                              "--initial-model", initial)
        lines = err.strip().splitlines()
        assert code == 2, (expected, err)
        assert len(lines) == 1 and "'initial_model'" in lines[0] and expected in lines[0], err
    assert not (tmp_path / "x" / "latest").exists()  # nothing trained on another space


def test_csv_warm_start_hashes_with_the_models_parameters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def write(path: Path, towns: range) -> None:
        rows = [f"{i % 2},{'paris' if i % 2 else f'town{towns[i % len(towns)]}'}"
                for i in range(300)]
        path.write_text("y,city\n" + "\n".join(rows) + "\n")

    write(tmp_path / "a.csv", range(40))
    write(tmp_path / "b.csv", range(40, 100))  # new values: fitted anew, another layout
    spec = "?label=y&categorical=city&onehot_max=1000"
    code, _, _ = _train(tmp_path, capsys, "a", "--epochs", "1",
                        "--data", f"csv:{tmp_path / 'a.csv'}{spec}")
    assert code == 0
    code, _, _ = _train(tmp_path, capsys, "b", "--epochs", "1",
                        "--data", f"csv:{tmp_path / 'b.csv'}{spec}",
                        "--initial-model", str(tmp_path / "a" / "latest"))
    assert code == 0
    a, b = SavedModel.load(tmp_path / "a" / "latest"), SavedModel.load(tmp_path / "b" / "latest")
    assert b.hashing == a.hashing and b.n_features == a.n_features
    # svmlight data against a csv: model is another feature space.
    code, _, err = _train(tmp_path, capsys, "c", "--epochs", "1",
                          "--initial-model", str(tmp_path / "a" / "latest"))
    assert code == 2 and "mapped table columns" in err


def test_run_starts_the_workers_from_the_initial_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, first, _ = _train(tmp_path, capsys, "a", "--epochs", "1")
    assert code == 0
    cluster = ("--workers", "2", "--insecure", "--register-timeout", "60")
    code, cold, err = _train(tmp_path, capsys, "cold", "--epochs", "1", *cluster,
                             command="run")
    assert code == 0, err
    code, warm, err = _train(tmp_path, capsys, "warm", "--epochs", "1", *cluster,
                             "--initial-model", str(tmp_path / "a" / "latest"), command="run")
    assert code == 0, err
    assert warm["initial_model"]["epochs"] == 1 and cold["initial_model"] is None
    assert warm["test_loss"] < min(cold["test_loss"], first["test_loss"])
    # The workers trained from the initial weights too, not only the coordinator's model:
    # a worker started from zeros would stay about max|w0| away from the global model.
    w0 = SavedModel.load(tmp_path / "a" / "latest").w
    diffs = [state["max_abs_diff_to_global"] for state in warm["worker_states"]]
    assert len(diffs) == 2 and max(diffs) < 0.1 * float(np.abs(w0).max()), diffs


def test_a_warm_start_that_only_gets_worse_saves_the_model_it_was_given(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The given model is a candidate for the saved one (epoch 0), in `train` and in `run`:
    a strong l2 shrinks every epoch's model well below it."""
    code, first, _ = _train(tmp_path, capsys, "a", "--epochs", "3")
    assert code == 0
    start = str(tmp_path / "a" / "latest")
    given = SavedModel.load(tmp_path / "a" / "latest").w
    code, warm, err = _train(tmp_path, capsys, "b", "--epochs", "3", "--l2", "0.1",
                             "--initial-model", start)
    assert code == 0, err
    assert warm["best_epoch"] == warm["saved_epoch"] == 0 and warm["epochs"] == 3
    assert warm["test_loss"] == pytest.approx(first["test_loss"])
    np.testing.assert_allclose(SavedModel.load(tmp_path / "b" / "latest").w, given)
    cluster = ("--workers", "2", "--insecure", "--register-timeout", "60")
    code, run, err = _train(tmp_path, capsys, "c", "--epochs", "3", "--l2", "0.1", *cluster,
                            "--initial-model", start, command="run")
    assert code == 0, err
    assert run["saved_model"]["round"] == 0 and not run["saved_model"]["final"]
    assert run["saved_epoch"] == 0
    assert run["test_loss"] == pytest.approx(first["test_loss"])


def test_the_given_model_is_kept_unless_an_epoch_beats_it() -> None:
    stopper = EarlyStopping(patience=1)
    stopper.start_from(0.30, np.array([7.0]), accuracy=0.95)
    assert stopper.update(0.50, np.array([1.0]), accuracy=0.90) is None  # patience: from here
    assert stopper.best_index == -1 and stopper.best_weights is not None
    assert stopper.best_weights[0] == 7.0
    stopper.update(0.25, np.array([2.0]), accuracy=0.96)
    assert stopper.best_index == 1 and stopper.best_weights[0] == 2.0


def _blobs(seed: int, rows: int = 1500, d: int = 40) -> tuple[sp.csr_matrix, np.ndarray]:
    X = sp.random(rows, d, density=0.15, random_state=seed, format="csr")
    truth = np.random.default_rng(99).normal(size=d)
    return X, X @ truth


def _log_loss(model: HogwildClassifier, X: Any, y: np.ndarray) -> float:
    m = model.decision_function(X).ravel()
    s = np.where(y == 1, 1.0, -1.0)
    return float(np.mean(np.logaddexp(0.0, -s * m)))


def test_classifier_warm_start_continues_the_last_fit() -> None:
    X, score = _blobs(0)
    y = (score > 0).astype(int)
    params = {"loss": "logistic", "epochs": 1, "threads": 1, "learning_rate": 0.1}
    once = HogwildClassifier(**params).fit(X, y)
    cold = _log_loss(HogwildClassifier(**params).fit(X, y).fit(X, y), X, y)
    assert cold == pytest.approx(_log_loss(once, X, y))  # without warm_start: from zeros
    warm = HogwildClassifier(warm_start=True, **params).fit(X, y).fit(X, y)
    assert _log_loss(warm, X, y) < _log_loss(once, X, y)
    assert warm.n_iter_ == 1
    with pytest.raises(ValueError, match="features"):
        warm.fit(X[:, :30], y)
    with pytest.raises(ValueError, match="classes"):
        warm.fit(X, np.where(y == 1, 2, 0))


def test_regressor_warm_start_from_a_loaded_model(tmp_path: Path) -> None:
    X, y = _blobs(1)
    params = {"epochs": 1, "threads": 1}
    first = HogwildRegressor(**params).fit(X, y)
    first.save(tmp_path)
    loaded = HogwildRegressor.load(tmp_path).set_params(warm_start=True)
    again = loaded.fit(X, y)
    mse = [float(np.mean((m.predict(X) - y) ** 2)) for m in (first, again)]
    assert mse[1] < mse[0]
