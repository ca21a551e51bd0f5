"""The saved-model format: SavedModel round trips, version checks, bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hogwild import __version__
from hogwild.errors import HogwildError, ModelError, ModelFormatError
from hogwild.model.saved import FORMAT_VERSION, SavedModel, default_task
from hogwild.outputs import artifacts


def _binary() -> SavedModel:
    return SavedModel(w=np.array([0.5, -1.25, 3.0]), loss="logistic", classes=(0, 1),
                      meta={"metrics": {"test_accuracy": 0.9}, "settings": {"seed": 3}})


@pytest.mark.parametrize("target", ["", "model.npz", "model.json"])
def test_round_trip_from_directory_or_either_file(tmp_path: Path, target: str) -> None:
    model = _binary()
    model.save(tmp_path)
    loaded = SavedModel.load(tmp_path / target)
    assert np.array_equal(loaded.w, model.w) and loaded.w.dtype == np.float64
    assert (loaded.loss, loaded.task, loaded.classes, loaded.fit_bias) == (
        "logistic", "binary", (0, 1), True)
    assert loaded.meta["metrics"] == {"test_accuracy": 0.9}
    assert loaded.n_features == 2 and loaded.hashing is None and loaded.multiclass is None


def test_json_has_the_format_keys(tmp_path: Path) -> None:
    _binary().save(tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    assert doc["format"] == "hogwild-model" and doc["format_version"] == FORMAT_VERSION == 2
    assert doc["model"] == "linear" and doc["task"] == "binary" and doc["classes"] == [0, 1]
    assert doc["n_features"] == 2 and doc["bias_index"] == 2 and doc["loss"] == "logistic"
    assert doc["hogwild_version"] == __version__ and "created" in doc
    assert "hashing" not in doc
    with np.load(tmp_path / "model.npz") as archive:
        assert archive.files == ["w"]


def test_multiclass_and_regression_round_trip(tmp_path: Path) -> None:
    w = np.arange(12, dtype=np.float64).reshape(3, 4)
    multi = SavedModel(w=w, loss="hinge", task="multiclass", classes=(1, 2.5, 7),
                       hashing={"n_features": 3, "seed": 1}, arrays={"extra": np.ones(2)})
    multi.save(tmp_path / "m")
    got = SavedModel.load(tmp_path / "m")
    assert got.w.shape == (3, 4) and got.multiclass == "ovr" and got.classes == (1, 2.5, 7)
    assert got.hashing == {"n_features": 3, "seed": 1}
    assert np.array_equal(got.arrays["extra"], np.ones(2))
    assert np.array_equal(got.intercept, [3.0, 7.0, 11.0])
    task, classes = default_task("squared")
    reg = SavedModel(w=np.ones(3), loss="squared", task=task, classes=classes)
    reg.save(tmp_path / "r")
    assert json.loads((tmp_path / "r" / "model.json").read_text())["classes"] is None
    assert SavedModel.load(tmp_path / "r").task == "regression"


def test_saved_model_is_frozen_and_copies_its_weights() -> None:
    w = np.array([1.0, 2.0])
    model = SavedModel(w=w, loss="hinge")
    w[0] = 99.0
    assert model.w[0] == 1.0
    with pytest.raises(ValueError):
        model.w[0] = 5.0
    with pytest.raises(AttributeError):
        model.loss = "squared"  # type: ignore[misc]


@pytest.mark.parametrize("version, shown", [(None, "1 (no format_version key)"), (1, "1"),
                                            (3, "3"), ("2", "'2'")])
def test_other_format_versions_are_refused_with_one_line(tmp_path: Path, version: object,
                                                         shown: str) -> None:
    _binary().save(tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    if version is None:
        del doc["format_version"]
    else:
        doc["format_version"] = version
    (tmp_path / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFormatError) as info:
        SavedModel.load(tmp_path)
    message = str(info.value)
    assert isinstance(info.value, HogwildError) and "\n" not in message
    assert f"model format {shown} is not supported by hogwild {__version__}" in message
    assert f"reads format {FORMAT_VERSION}" in message


def test_a_model_written_by_the_old_code_is_refused(tmp_path: Path) -> None:
    artifacts.save_model(tmp_path, np.ones(3), {"loss": "hinge", "n_features": 2})
    with pytest.raises(ModelFormatError, match="no format_version"):
        SavedModel.load(tmp_path / "model.npz")


@pytest.mark.parametrize("change, match", [
    ({"n_features": 5}, "n_features=5"),
    ({"task": "multiclass"}, "multiclass model over 2 classes"),
    ({"classes": [1, 0]}, "ascending"),
    ({"classes": ["a", "b"]}, "list of numbers"),
    ({"loss": "huber"}, "unknown loss"),
    ({"model": "tree"}, "model kind 'tree' is not supported"),
    ({"model": "mlp"}, "an MLP needs the 2-D arrays W1, W2"),
    ({"format": "other"}, "not a hogwild model"),
])
def test_inconsistent_metadata_is_refused(tmp_path: Path, change: dict[str, object],
                                          match: str) -> None:
    _binary().save(tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    doc.update(change)
    (tmp_path / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match=match):
        SavedModel.load(tmp_path)


def test_missing_corrupt_and_non_finite_models(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no model at"):
        SavedModel.load(tmp_path / "nowhere")
    with pytest.raises(ModelError, match="metadata not found"):
        SavedModel.load(tmp_path)
    _binary().save(tmp_path)
    (tmp_path / "model.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="cannot read"):
        SavedModel.load(tmp_path)
    with pytest.raises(ModelError, match="NaN"):
        SavedModel(w=np.array([np.nan, 1.0]), loss="hinge")
    with pytest.raises(ModelError, match="no classes"):
        SavedModel(w=np.ones(2), loss="squared", task="regression", classes=(0, 1))


def test_labels_and_probabilities_from_margins() -> None:
    binary = SavedModel(w=np.ones(2), loss="logistic", classes=(0, 1))
    assert binary.labels_from_margins([-0.5, 0.0, 2.0]).tolist() == [0, 1, 1]
    proba = binary.proba_from_margins([0.0, 800.0, -800.0])
    assert np.allclose(proba, [[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]])
    code, known = binary.encode_labels([0, 1, 3])
    assert code.tolist()[:2] == [-1.0, 1.0] and known.tolist() == [True, True, False]
    multi = SavedModel(w=np.zeros((3, 2)), loss="logistic", task="multiclass",
                       classes=(2, 5, 9))
    assert multi.labels_from_margins([[0.1, 0.3, -1], [2, 0, 0]]).tolist() == [5, 2]
    p = multi.proba_from_margins([[0.1, 0.3, -1.0]])
    assert np.allclose(p.sum(axis=1), 1.0) and int(np.argmax(p)) == 1
    with pytest.raises(ModelError, match="logistic"):
        SavedModel(w=np.ones(2), loss="hinge").proba_from_margins([0.0])
