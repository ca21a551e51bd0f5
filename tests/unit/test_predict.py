"""`hogwild predict` / `hogwild eval` through main(): predictions, metrics, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn import metrics as skm

from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.sources import BUNDLED_DIR, load_source
from hogwild.model.saved import SavedModel
from hogwild.model.scoring import margins


def _train(tmp_path: Path, data: str, *extra: str) -> Path:
    out = tmp_path / "run"
    code = main(["train", "--data", data, "--out", str(out), "--epochs", "3",
                 "--data-cache", "false", *extra], environ={})
    assert code == 0
    return out / "latest"  # the run just published


def _floats(path: Path) -> np.ndarray:
    return np.loadtxt(path, dtype=np.float64, ndmin=1)


@pytest.mark.parametrize("name", ["spamassassin", "rcv1_vw_subset"])
def test_predict_accuracy_equals_the_runs_test_accuracy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        name: str) -> None:
    monkeypatch.chdir(tmp_path)
    out = _train(tmp_path, f"bundled:{name}")
    reported = json.loads((out / "metrics.json").read_text())
    capsys.readouterr()
    test_file = BUNDLED_DIR / f"{name}.test.libsvm.gz"
    preds = tmp_path / "preds.txt"
    assert main(["predict", "--model", str(out), "--data", str(test_file),
                 "--out", str(preds)]) == 0
    printed = capsys.readouterr().out
    labels = load_source(str(test_file), cache=False).labels
    predicted = _floats(preds)
    assert predicted.shape == labels.shape
    assert set(np.unique(predicted)) <= {-1.0, 1.0}
    accuracy = float(np.mean(predicted == labels))
    assert accuracy == pytest.approx(reported["test_accuracy"], abs=1e-12)
    assert f"accuracy {reported['test_accuracy']:.4f}" in printed
    assert f"loss {reported['test_loss']:.4f}" in printed
    # The full metric set matches the one the run put into metrics.json.
    assert main(["eval", "--model", str(out / "model.npz"), "--data", str(test_file),
                 "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    for key in ("precision", "recall", "f1", "roc_auc"):
        assert evaluated[key] == pytest.approx(reported[f"test_{key}"], abs=1e-12), key
    assert evaluated["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert evaluated["loss"] == pytest.approx(reported["test_loss"], rel=1e-9)


def test_raw_proba_and_metrics_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    out = _train(tmp_path, "bundled:spamassassin", "--loss", "logistic")
    model = SavedModel.load(out)
    test = load_source("bundled:spamassassin/test", cache=False)
    want = margins(model.w, test)
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--data", "bundled:spamassassin/test",
                 "--raw"]) == 0
    captured = capsys.readouterr()
    raw = np.array(captured.out.split(), dtype=np.float64)
    assert np.allclose(raw, want, rtol=1e-8, atol=1e-12)
    assert "accuracy" in captured.err  # the summary stays off stdout
    assert main(["predict", "--model", str(out), "--data", "bundled:spamassassin/test",
                 "--proba", "--metrics", "--out", str(tmp_path / "p.txt")]) == 0
    proba = _floats(tmp_path / "p.txt")
    assert np.allclose(proba, 1.0 / (1.0 + np.exp(-want)), rtol=1e-8, atol=1e-12)
    printed = capsys.readouterr().out
    y = test.labels
    assert f"roc_auc {skm.roc_auc_score(y > 0, want):.4f}" in printed
    assert f"f1 {skm.f1_score(y, np.where(want >= 0, 1, -1)):.4f}" in printed


def test_proba_needs_logistic_and_other_one_line_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    SavedModel(w=np.ones(3), loss="hinge").save(tmp_path / "m")
    data = tmp_path / "d.svm"
    data.write_text("1 1:1 2:0.5\n-1 2:1\n")
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(data),
                 "--proba"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("hogwild predict: error: --proba needs a model trained with the logistic "
                   "loss; this one uses hinge (binary)")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    meta["format_version"] = 7
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(data)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model format 7 is not supported" in err
    assert main(["predict", "--model", str(tmp_path / "none"), "--data", str(data)]) == 1
    assert "no model at" in capsys.readouterr().err
    SavedModel(w=np.ones(3), loss="hinge").save(tmp_path / "m")
    assert main(["predict", "--model", str(tmp_path / "m"), "--data",
                 str(tmp_path / "missing.svm")]) == 1
    assert "data file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["predict", "--model", "m", "--data", "d", "--raw", "--proba"])
    assert info.value.code == 2


def test_features_beyond_the_model_are_warned_about_and_ignored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    SavedModel(w=np.array([1.0, -2.0, 0.5]), loss="hinge", classes=(0, 1)).save(tmp_path)
    data = tmp_path / "d.svm"
    data.write_text("1 1:1 3:7 5:1\n0 2:1\n0 4:2\n")
    assert main(["predict", "--model", str(tmp_path), "--data", str(data), "--raw",
                 "--out", str(tmp_path / "raw.txt")]) == 0
    captured = capsys.readouterr()
    assert "has 5 features, the model 2: 3 entries of the features beyond are ignored" in \
        captured.err
    # Row margins over features 1 and 2 only, plus the bias 0.5.
    assert _floats(tmp_path / "raw.txt").tolist() == [1.5, -1.5, 0.5]
    # Labels 0/1 are the model's classes (internally -1/+1 for the hinge loss).
    assert "accuracy 0.6667  loss 0.5000" in captured.out


def test_labels_outside_the_classes_give_no_metrics(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    SavedModel(w=np.array([1.0, 0.0]), loss="hinge").save(tmp_path)
    data = tmp_path / "d.svm"
    data.write_text("3 1:1\n-1 1:-1\n")
    assert main(["predict", "--model", str(tmp_path), "--data", str(data)]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == ["1", "-1"]
    assert "1 of 2 labels are not among the model's classes [-1, 1] (3): no metrics" in \
        captured.err
    assert "accuracy" not in captured.err
    assert main(["eval", "--model", str(tmp_path), "--data", str(data)]) == 1
    assert "not among the model's classes" in capsys.readouterr().err


def test_multiclass_predicts_the_argmax_class(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    d, k, n = 30, 4, 200
    w = rng.normal(size=(k, d + 1))
    classes = (1, 3, 5, 8)
    SavedModel(w=w, loss="logistic", task="multiclass", classes=classes).save(tmp_path / "m")
    dense = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.3)
    scores = dense @ w[:, :d].T + w[:, d]
    truth = np.array(classes)[np.argmax(scores, axis=1)]
    truth[:20] = classes[0]  # some wrong
    import scipy.sparse as sp

    data = CSRData.from_scipy(sp.csr_matrix(dense), truth)
    path = tmp_path / "d.svm"
    write_svmlight(data, path)
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(path),
                 "--out", str(tmp_path / "p.txt"), "--metrics"]) == 0
    predicted = _floats(tmp_path / "p.txt")
    expected = np.array(classes)[np.argmax(scores, axis=1)]
    assert np.array_equal(predicted, expected)
    out = capsys.readouterr().out
    assert f"accuracy {np.mean(expected == truth):.4f}" in out
    macro = skm.f1_score(truth, expected, average="macro")
    assert f"f1 {macro:.4f}" in out
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(path),
                 "--proba", "--out", str(tmp_path / "pp.txt")]) == 0
    proba = np.loadtxt(tmp_path / "pp.txt")
    assert proba.shape == (n, k) and np.allclose(proba.sum(axis=1), 1.0, atol=1e-7)
    assert np.array_equal(np.argmax(proba, axis=1), np.argmax(scores, axis=1))


def test_parallel_scoring_equals_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    from hogwild.model import scoring

    # Split even this small set into one block per thread.
    monkeypatch.setattr(scoring, "MIN_NNZ_PER_THREAD", 1000)
    data = load_source("synthetic:rcv1?rows=12000&seed=4")
    rng = np.random.default_rng(1)
    w = rng.normal(size=data.n_features + 1)
    want = data.to_scipy() @ w[:-1] + w[-1]
    for threads in (1, 2, 3, 7):
        assert np.allclose(margins(w, data, threads), want, rtol=1e-10, atol=1e-10)
    wk = rng.normal(size=(3, data.n_features + 1))
    want_k = data.to_scipy() @ wk[:, :-1].T + wk[:, -1]
    assert np.allclose(margins(wk, data, 2), want_k, rtol=1e-10, atol=1e-10)


def test_prediction_chunks_join_to_the_whole_file(tmp_path: Path) -> None:
    from hogwild.commands.predict import prediction_chunks, score_file

    model = SavedModel(w=np.array([1.0, -2.0, 0.25]), loss="logistic", classes=(0, 1))
    data = tmp_path / "d.svm"
    data.write_text("".join(f"{i % 2} 1:{i / 7:.4f} 2:{(i % 5) / 3:.4f}\n" for i in range(11)))
    scored = score_file(model, str(data))
    for output in ("label", "raw", "proba"):
        whole = b"".join(prediction_chunks(scored, output))
        assert b"".join(prediction_chunks(scored, output, rows_per_chunk=3)) == whole
        assert len(whole.splitlines()) == 11
    labels = b"".join(prediction_chunks(scored, "label")).split()
    assert [int(x) for x in labels] == scored.labels.tolist()


def test_multiclass_training_then_predict_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import scipy.sparse as sp
    from sklearn.datasets import make_classification

    monkeypatch.chdir(tmp_path)
    X, y = make_classification(3000, 40, n_informative=12, n_classes=3, random_state=2)
    labels = np.array([2, 4, 9])[y]
    write_svmlight(CSRData.from_scipy(sp.csr_matrix(X[:2400]), labels[:2400]), tmp_path / "tr.svm")
    write_svmlight(CSRData.from_scipy(sp.csr_matrix(X[2400:]), labels[2400:]), tmp_path / "te.svm")
    out = _train(tmp_path, str(tmp_path / "tr.svm"), "--test", str(tmp_path / "te.svm"),
                 "--loss", "logistic", "--learning-rate", "0.05")
    reported = json.loads((out / "metrics.json").read_text())
    model = SavedModel.load(out)
    assert model.task == "multiclass" and model.classes == (2, 4, 9) and model.w.shape[0] == 3
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--data", str(tmp_path / "te.svm"),
                 "--out", str(tmp_path / "p.txt"), "--metrics"]) == 0
    predicted = _floats(tmp_path / "p.txt")
    assert set(np.unique(predicted)) <= {2.0, 4.0, 9.0}
    accuracy = float(np.mean(predicted == labels[2400:]))
    assert accuracy == pytest.approx(reported["test_accuracy"], abs=1e-12)
    assert accuracy > 0.6
    assert f"f1 {reported['test_f1']:.4f}" in capsys.readouterr().out
    # The Python API reads the same multiclass model and predicts the same labels.
    from hogwild import HogwildClassifier

    clf = HogwildClassifier.load(out)
    test = load_source(str(tmp_path / "te.svm"), cache=False)
    assert clf.classes_.tolist() == [2, 4, 9] and clf.coef_.shape == (3, 40)
    assert np.array_equal(clf.predict(test.to_scipy()), predicted)


def test_rows_without_labels_give_predictions_but_no_metrics(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hogwild.commands.predict
    from hogwild.commands.predict import score_file

    model = SavedModel(w=np.array([1.0, 0.0]), loss="hinge")
    nan = float("nan")
    for labels, note in (([nan, nan], "the data has no labels: no metrics"),
                         ([1.0, nan], "1 of 2 rows have no label: no metrics")):
        data = CSRData(np.array([0, 1, 2]), np.array([0, 0]), np.array([2.0, -1.0]),
                       np.array(labels), 1)
        monkeypatch.setattr(hogwild.commands.predict, "load_source", lambda *a, d=data, **k: d)
        scored = score_file(model, "unlabelled.csv")
        assert scored.metrics is None and scored.note == note
        assert scored.labels.tolist() == [1, -1]
