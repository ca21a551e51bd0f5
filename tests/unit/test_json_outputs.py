"""The run's JSON outputs are JSON: a number that is not finite (a loss that overflowed, a
metric not measured) is written as null, never as the Infinity or NaN that strict readers
refuse."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.base import atomic
from hogwild.model.files import MODEL_META_FILE
from hogwild.outputs import artifacts
from hogwild.outputs.history import EvalHistory


def _strict(text: str) -> Any:
    """``text`` parsed as a strict reader does: Infinity, -Infinity and NaN are errors."""
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _row(train_loss: Any, val_loss: Any = 0.25) -> dict[str, Any]:
    return {"elapsed": 1.5, "round": 3, "examples": 300, "val_loss": val_loss,
            "train_loss": train_loss, "deltas_received": 6}


def test_an_evaluation_with_an_infinite_loss_is_written_with_null(tmp_path: Path) -> None:
    history = EvalHistory(tmp_path)
    history.begin()
    history.add(_row(0.5))
    history.add(_row(math.inf, val_loss=np.float64("nan")))
    history.add(_row(np.float32("-inf")))
    lines = (tmp_path / artifacts.HISTORY_FILE).read_text(encoding="utf-8").splitlines()
    rows = [_strict(line) for line in lines]
    assert [(r["train_loss"], r["val_loss"]) for r in rows] == [
        (0.5, 0.25), (None, None), (None, 0.25)]
    assert rows[1]["round"] == 3 and rows[1]["examples"] == 300
    # The rows as appended and as a run's end rewrites them read the same.
    artifacts.write_history(tmp_path, [_row(0.5), _row(math.inf, np.float64("nan")),
                                       _row(np.float32("-inf"))])
    again = (tmp_path / artifacts.HISTORY_FILE).read_text(encoding="utf-8").splitlines()
    assert [_strict(line) for line in again] == rows


def test_every_json_writer_of_a_run_writes_json(tmp_path: Path) -> None:
    weird = {"test_loss": math.inf, "best": {"loss": -math.inf, "at": [1.0, math.nan]},
             "per_class": np.array([0.5, np.inf]), "accuracy": np.float32(0.875)}
    artifacts.write_metrics(tmp_path, weird)
    artifacts.save_model(tmp_path, np.zeros(3), weird)
    artifacts.write_trace(tmp_path, [weird])
    artifacts.append_history(tmp_path, weird)
    texts = [(tmp_path / name).read_text(encoding="utf-8") for name in (
        artifacts.METRICS_FILE, MODEL_META_FILE, artifacts.TRACE_FILE,
        artifacts.HISTORY_FILE)]
    expected = {"test_loss": None, "best": {"loss": None, "at": [1.0, None]},
                "per_class": [0.5, None], "accuracy": 0.875}
    for text in texts:
        assert _strict(text) == expected, text
    # Finite values are written exactly as before.
    assert atomic.dumps({"b": 0.1, "a": np.float64(2.5), "c": [1, 2]}) == \
        '{"a": 2.5, "b": 0.1, "c": [1, 2]}'
