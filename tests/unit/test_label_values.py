"""Class labels as the user wrote them: parsed labels are float32, yet a model's classes, its
predictions and its metrics speak of 0.1, not of the float32 nearest to it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.labels import LabelMap, as_written
from hogwild.model.saved import label_value


def test_float32_labels_give_the_classes_as_written() -> None:
    parsed = np.array([0.1, 0.2, 0.1, 0.25], dtype=np.float32)
    labels = LabelMap.fit(parsed, classifier=True, source="t")
    assert labels.classes == (0.1, 0.2, 0.25)
    assert labels.json_classes() == [0.1, 0.2, 0.25]
    assert labels.class_index(parsed, "t").tolist() == [0, 1, 0, 2]
    assert labels.decode(np.array([2.0, 0.0])).tolist() == [0.25, 0.1]
    # float64 labels (the estimators' own arrays) are compared as they are
    wide = LabelMap.fit(np.array([0.1, 0.3]), classifier=True, source="t")
    assert wide.class_index(np.array([0.3, 0.1]), "t").tolist() == [1, 0]
    assert as_written(parsed).tolist() == [0.1, 0.2, 0.1, 0.25]


def test_a_saved_float32_class_reads_back_as_written() -> None:
    # what models saved before this held for a label 0.1
    assert label_value(0.10000000149011612) == 0.1
    assert label_value(0.123456789) == 0.123456789  # not a float32 value: kept
    assert label_value(2.0) == 2 and isinstance(label_value(2.0), int)


def test_train_and_predict_with_decimal_labels(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.svm"
    data.write_text("0.1 1:1\n0.2 2:1\n0.1 1:1 3:0.5\n0.2 2:1 3:0.5\n" * 5)
    out = tmp_path / "out"
    assert main(["train", "--data", str(data), "--test", str(data), "--epochs", "3",
                 "--threads", "1", "--data-cache", "false", "--out", str(out)],
                environ={}) == 0
    assert json.loads((out / "model.json").read_text())["classes"] == [0.1, 0.2]
    capsys.readouterr()
    predictions = tmp_path / "p.txt"
    assert main(["predict", "--model", str(out), "--data", str(data), "--out",
                 str(predictions), "--metrics"], environ={}) == 0
    assert "accuracy 1.0000" in capsys.readouterr().out
    assert predictions.read_text().split()[:4] == ["0.1", "0.2", "0.1", "0.2"]
