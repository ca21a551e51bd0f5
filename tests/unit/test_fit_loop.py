"""The one fit loop (engine.fit): its rules, and that every trainer of this process goes through it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hogwild.config import Settings
from hogwild.engine import fit as fit_module
from hogwild.engine.fit import FitLoop
from hogwild.engine.trainer import EpochStats
from hogwild.errors import TrainingDiverged
from hogwild.model.evaluation import Metrics


def _stats(epoch: int, loss: float = 1.0) -> EpochStats:
    return EpochStats(epoch=epoch, seconds=0.0, train_loss=loss, examples=10)


def _scripted(losses: list[float], accuracies: list[float | None] | None = None) -> FitLoop:
    """A loop whose validation scores are ``losses`` in turn (epoch 0's first); the weights
    are a counter of the epochs trained, so the model kept says which epoch it was."""
    scores = iter(zip(losses, accuracies or [None] * len(losses), strict=True))
    w = np.zeros(3)
    return FitLoop(w, lambda _: Metrics(*next(scores), n=10), epochs=10, learning_rate=0.5,
                   patience=2, min_delta=0.01, target_loss=0.1)


def _drive(loop: FitLoop, epochs: int) -> str:
    """Train up to ``epochs`` epochs (each adds 1 to every weight) through ``loop``; why it
    stopped."""
    def epoch(e: int) -> EpochStats:
        loop.w += 1.0
        return _stats(e)
    loop.max_epochs = epochs
    loop.run(epoch)
    return loop.stop_reason


def test_early_stopping_keeps_the_best_epoch_and_says_why() -> None:
    loop = _scripted([9.0, 1.0, 0.5, 0.6, 0.7, 0.2, 0.1])
    rows: list[tuple[int, bool | None]] = []
    loop.observe = lambda row, best: rows.append((row["epoch"], best))
    loop.begin()
    assert _drive(loop, 10) == "early stopping"
    # Epoch 0 is recorded, no candidate; epoch 2 is kept, the row of each is told apart.
    assert rows == [(0, None), (1, True), (2, True), (3, False), (4, False)]
    assert loop.epochs == 4 and loop.best_epoch() == 2
    assert loop.kept_weights().tolist() == [2.0, 2.0, 2.0]
    assert loop.w.tolist() == [4.0, 4.0, 4.0]


def test_target_loss_max_epochs_and_time_budget() -> None:
    loop = _scripted([9.0, 1.0, 0.05])
    loop.begin()
    assert _drive(loop, 10) == "target loss" and loop.epochs == 2
    loop = _scripted([9.0, 1.0, 0.9])
    loop.begin()
    assert _drive(loop, 2) == "max epochs" and loop.epochs == 2
    loop = _scripted([9.0, 1.0, 0.9])
    loop.time_budget = 1e-12  # any epoch takes longer than this
    loop.begin()
    assert _drive(loop, 2) == "time budget" and loop.epochs == 1


def test_a_classifier_keeps_the_most_accurate_and_a_warm_start_is_a_candidate() -> None:
    # better(): the more accurate model, whatever its loss; the model given (epoch 0) wins
    # when training only made it worse, and its row is shown as the one kept.
    loop = _scripted([0.3, 0.2, 0.25], [0.95, 0.90, 0.93])
    rows: list[tuple[int, bool | None]] = []
    loop.observe = lambda row, best: rows.append((row["epoch"], best))
    loop.w[:] = 7.0
    loop.begin(warm_started=True)
    _drive(loop, 2)
    assert loop.best_epoch() == 0 and loop.kept_weights().tolist() == [7.0, 7.0, 7.0]
    assert rows == [(0, True), (1, False), (2, False)]
    cold = _scripted([0.3, 0.2, 0.25], [0.95, 0.90, 0.93])
    cold.begin()
    _drive(cold, 2)
    assert cold.best_epoch() == 2  # without a warm start epoch 0 is no candidate


def test_keep_last_ignores_the_best() -> None:
    loop = FitLoop(np.zeros(2), epochs=3, learning_rate=0.5, keep_best=False)
    loop.begin()
    losses = iter([0.1, 5.0, 9.0])

    def epoch(e: int) -> EpochStats:
        loop.w += 1.0
        return _stats(e, next(losses))
    loop.run(epoch)
    assert loop.stop_reason == "max epochs" and loop.best_epoch() == 3
    assert loop.kept_weights().tolist() == [3.0, 3.0]


@pytest.mark.parametrize("what", ["weights", "train loss", "validation loss"])
def test_divergence_stops_the_loop(what: str) -> None:
    val = Metrics(loss=float("inf") if what == "validation loss" else 1.0, accuracy=None, n=5)
    loop = FitLoop(np.zeros(2), lambda _: val, epochs=3, learning_rate=0.25)
    loop.begin()
    if what == "weights":
        loop.w[0] = np.nan
    with pytest.raises(TrainingDiverged, match="epoch 1" + (", validation loss"
                                                             if what == "validation loss" else "")):
        loop.after_epoch(_stats(0, float("nan") if what == "train loss" else 1.0))


# --- every trainer of this process goes through the loop --------------------------------------

def _data(path: Path, rows: int = 600, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=40)
    lines = []
    for _ in range(rows):
        ids = np.sort(rng.choice(40, size=6, replace=False))
        vals = rng.random(6)
        label = 1 if float(vals @ w_true[ids]) > 0 else -1
        lines.append(f"{label} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in zip(ids, vals)))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def loops(monkeypatch: pytest.MonkeyPatch) -> list[FitLoop]:
    """Every FitLoop made while the test runs, wherever it was made."""
    made: list[FitLoop] = []
    original = FitLoop.__init__

    def recording(self: FitLoop, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(fit_module.FitLoop, "__init__", recording)
    return made


@pytest.mark.parametrize(("rule", "reason", "epochs"), [
    ({"time_budget": 1e-9}, "time budget", 1),
    ({"target_loss": 100.0}, "target loss", 1),
    # No decrease of 100 ever counts: the second epoch is the first without progress.
    ({"patience": 1, "min_delta": 100.0}, "early stopping", 2),
    ({"patience": 0}, "max epochs", 3),
])
@pytest.mark.parametrize("out_of_core", [False, True])
def test_train_in_memory_and_out_of_core_stop_by_the_same_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loops: list[FitLoop],
        rule: dict[str, float], reason: str, epochs: int, out_of_core: bool) -> None:
    from hogwild.inprocess.local import train_job

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    settings = Settings(data=_data(tmp_path / "d.svm"), threads=1, epochs=3,
                        out_of_core=out_of_core, out_dir=str(tmp_path / "out"), **rule)
    with open(tmp_path / "log.txt", "w") as out:
        metrics = train_job(settings, out=out)
    assert metrics["stop_reason"] == reason and metrics["epochs"] == epochs
    assert metrics.get("out_of_core", False) is out_of_core
    (loop,) = loops
    assert loop.stop_reason == reason and loop.epochs == epochs
    rows = [json.loads(line) for line in
            (tmp_path / "out" / "latest" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == list(range(epochs + 1))
    assert metrics["saved_epoch"] == loop.best_epoch()


def test_experiment_and_estimators_train_through_the_loop(tmp_path: Path,
                                                          loops: list[FitLoop]) -> None:
    from hogwild.data.sources import load_source
    from hogwild.engine.runstart import load_splits
    from hogwild.estimators import HogwildClassifier
    from hogwild.experiment import runner
    from hogwild.experiment.plan import DataSpec, ExperimentOptions, RunSpec

    source = _data(tmp_path / "d.svm")
    settings = Settings(data=source, threads=1, test_fraction=0.2)
    spec = RunSpec(data=DataSpec(name="d", source=source, rows=600, loss="hinge"),
                   trainer="serial", threads=1)
    opts = ExperimentOptions(threads=(1,), trainers=("serial",), epochs=3, repeats=1, cores=1)
    rec = runner.run_inprocess(spec, load_splits(settings), settings, opts, 0)
    assert rec["status"] == "ok" and [r["epoch"] for r in rec["epoch_rows"]] == [0, 1, 2, 3]
    assert len(loops) == 1 and loops[0].epochs == 3
    data = load_source(source)
    X = sp.csr_matrix((data.values, data.indices, data.indptr),
                      shape=(data.n_rows, data.n_features))
    est = HogwildClassifier(threads=1, epochs=4).fit(X, data.labels)
    assert len(loops) == 2 and loops[1].epochs == 4 and loops[1].stop_reason == "max epochs"
    # The estimator keeps the last model, the loop's weights.
    assert np.array_equal(est.weights_[0], loops[1].w)


def test_divergence_is_caught_by_the_loop_for_every_trainer(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            loops: list[FitLoop]) -> None:
    from hogwild.data.sources import load_source
    from hogwild.engine.runstart import load_splits
    from hogwild.estimators import HogwildRegressor
    from hogwild.experiment import runner
    from hogwild.experiment.plan import DataSpec, ExperimentOptions, RunSpec
    from hogwild.inprocess.local import train_job

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    source = _data(tmp_path / "d.svm")
    settings = Settings(data=source, threads=1, loss="squared", learning_rate=1e12, epochs=5,
                        out_dir=str(tmp_path / "out"))
    for out_of_core in (False, True):
        with pytest.raises(TrainingDiverged), open(tmp_path / "log.txt", "w") as out:
            train_job(settings.replace(out_of_core=out_of_core), out=out)
    spec = RunSpec(data=DataSpec(name="d", source=source, rows=600, loss="squared"),
                   trainer="serial", threads=1)
    opts = ExperimentOptions(threads=(1,), trainers=("serial",), epochs=5, repeats=1, cores=1)
    rec = runner.run_inprocess(spec, load_splits(settings), settings, opts, 0)
    # The diverged epoch's row keeps its training time; the run has no test score.
    assert rec["status"] == "diverged" and rec["test_loss"] is None
    assert set(rec["epoch_rows"][-1]) == {"epoch", "seconds", "cpu_seconds", "elapsed",
                                          "train_loss_during"}
    data = load_source(source)
    X = sp.csr_matrix((data.values, data.indices, data.indptr),
                      shape=(data.n_rows, data.n_features))
    with pytest.raises(ValueError, match="training diverged"):
        HogwildRegressor(threads=1, epochs=5, learning_rate=1e12).fit(X, data.labels)
    assert len(loops) == 4
    assert all(loop.epochs < 5 for loop in loops)  # each stopped at the diverged epoch
