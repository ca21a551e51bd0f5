"""`hogwild inspect`: summaries and named top weights of saved models, through main()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.model.saved import SavedModel
from hogwild.model.spec import ModelSpec


def _inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["inspect", *args, "--json"], environ={})
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def _train(tmp_path: Path, data: str, *extra: str) -> Path:
    code = main(["train", "--data", data, "--out", str(tmp_path / "runs"), "--epochs", "3",
                 "--data-cache", "false", "--loss", "logistic", "-q", *extra], environ={})
    assert code == 0
    return tmp_path / "runs" / "latest"


def _svmlight(path: Path, rows: int = 400, seed: int = 0) -> None:
    """Labels decided by feature id 3 (positive) against id 7 (negative), ids 1-based in the
    file, with noise features 1..10."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((rows, 10)) < 0.3).astype(np.float32)
    score = dense[:, 2] - dense[:, 6]
    dense[score == 0, 2] = 1.0   # every row decided by one of the two
    dense[score == 0, 6] = 0.0
    labels = np.where(dense[:, 2] > dense[:, 6], 1.0, -1.0).astype(np.float32)
    import scipy.sparse as sp

    write_svmlight(CSRData.from_scipy(sp.csr_matrix(dense), labels), path)


def test_svmlight_model_names_the_files_ids(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _svmlight(tmp_path / "d.svm")
    run = _train(tmp_path, str(tmp_path / "d.svm"))
    code, doc = _inspect(capsys, str(run), "--top", "2")
    assert code == 0
    assert doc["positive"][0]["feature"] == 3 and doc["negative"][0]["feature"] == 7
    assert doc["positive"][0]["name"] == "feature 3"
    assert len(doc["positive"]) <= 2 and len(doc["negative"]) <= 2
    model = SavedModel.load(run)
    assert doc["n_features"] == model.n_features
    assert doc["nonzero"] == int(np.count_nonzero(model.coef))
    assert doc["bias"] == pytest.approx(float(model.intercept))
    assert doc["norm"] == pytest.approx(float(np.linalg.norm(model.coef)))
    # The text report says the same, and accepts the model file as predict does.
    code = main(["inspect", str(run / "model.npz"), "--top", "1"], environ={})
    text = capsys.readouterr().out
    assert code == 0 and "feature 3" in text and "feature 7" in text and "bias" in text


def test_csv_model_names_columns_and_values(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    lines = ["y,city,color"]
    for i in range(600):
        city = "paris" if i % 3 == 0 else f"town{rng.integers(0, 200)}"
        color = ["red", "blue"][int(rng.integers(0, 2))]
        lines.append(f"{1 if city == 'paris' else 0},{city},{color}")
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    # onehot_max=2: city (about 200 values) is hashed, color one-hot.
    run = _train(tmp_path, f"csv:{tmp_path / 't.csv'}?label=y&categorical=city,color"
                           "&onehot_max=2")
    code, doc = _inspect(capsys, str(run), "--top", "3")
    assert code == 0 and doc["notes"] == []
    named = [e["name"] for e in doc["positive"] + doc["negative"]]
    assert any(name.lstrip("-") == "city=paris" for name in named), named
    assert all(name.lstrip("-").startswith(("city", "color=")) for name in named), named
    # A model saved before the values were kept: buckets by number, and a note says why.
    meta = json.loads((run / "model.json").read_text())
    for column in meta["hashing"]["columns"]:
        column.pop("top_values", None)
    (run / "model.json").write_text(json.dumps(meta))
    code, doc = _inspect(capsys, str(run), "--top", "3")
    assert code == 0
    assert any("city" in note and "earlier hogwild" in note for note in doc["notes"])
    assert any(e["name"].startswith("city[bucket ") for e in doc["positive"] + doc["negative"])


def test_mlp_model_gives_layer_shapes_and_says_why_no_top_weights(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = ModelSpec("mlp", 12, (4, 3))
    w = spec.initial_weights(0)
    SavedModel(w=w, loss="logistic", model="mlp", arrays=spec.arrays(w)).save(tmp_path)
    code, doc = _inspect(capsys, str(tmp_path))
    assert code == 0
    shapes = {layer["name"]: layer["shape"] for layer in doc["layers"]}
    assert shapes["W1"] == [12, 4] and shapes["W2"] == [4, 3] and shapes["W3"] == [3, 1]
    assert doc["parameters"] == spec.dim and "positive" not in doc
    assert len(doc["notes"]) == 1 and "MLP" in doc["notes"][0]


def test_multiclass_model_reports_each_class(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    w = np.zeros((3, 6))
    w[0, 1], w[1, 4], w[2, 0], w[2, 5] = 2.0, -1.5, 0.5, 0.25
    SavedModel(w=w, loss="hinge", task="multiclass", classes=(1, 2, 3)).save(tmp_path)
    code, doc = _inspect(capsys, str(tmp_path / "model.json"), "--top", "1")
    assert code == 0
    per = {part["class"]: part for part in doc["per_class"]}
    assert per[1]["positive"][0]["feature"] == 2 and per[1]["negative"] == []
    assert per[2]["negative"][0]["feature"] == 5
    assert per[3]["bias"] == 0.25 and doc["nonzero"] == 3


@pytest.mark.parametrize("what", ["missing", "empty dir", "not a model"])
def test_bad_path_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         what: str) -> None:
    path = tmp_path / "nothing"
    if what == "empty dir":
        path.mkdir()
    elif what == "not a model":
        path = tmp_path / "metrics.json"
        path.write_text("{}")
    code = main(["inspect", str(path)], environ={})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("hogwild inspect: error:") and str(path) in err[0]


def test_the_epoch_of_the_saved_weights_is_told_when_it_is_not_the_last() -> None:
    from hogwild.commands.inspect import summary_lines

    doc: dict[str, Any] = {"model": "m", "kind": "linear", "task": "binary", "loss": "hinge",
                           "classes": None, "epochs": 5, "saved_epoch": 2, "data": "d.svm",
                           "n_features": 3, "nonzero": 3, "notes": [], "top": 0,
                           "bias": 0.0, "norm": 1.0}
    assert "trained: epochs 5, weights of epoch 2 (the best validated), data d.svm" in (
        summary_lines(doc))
    run = doc | {"epochs": 10.0, "saved_epoch": 9.875}
    assert any("weights of epoch 9.88 " in line for line in summary_lines(run))
    last = doc | {"saved_epoch": 5}
    assert "trained: epochs 5, data d.svm" in summary_lines(last)


def test_a_trained_model_records_the_epoch_of_its_weights(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.svm"
    _svmlight(data)
    _train(tmp_path, str(data))
    code, doc = _inspect(capsys, str(tmp_path / "runs" / "latest"))
    metrics = json.loads((tmp_path / "runs" / "latest" / "metrics.json").read_text())
    assert code == 0 and doc["saved_epoch"] == metrics["saved_epoch"] == metrics["best_epoch"]
