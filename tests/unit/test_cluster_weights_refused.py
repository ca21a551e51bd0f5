"""A weight column reaches `train`'s kernel; a cluster run, which cannot ship it, refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hogwild import config
from hogwild.cluster.coordinator.data.loading import load_data
from hogwild.errors import ConfigError


def _csv(tmp_path: Path) -> str:
    path = tmp_path / "rows.csv"
    lines = ["y,a,b,w"] + [f"{i % 2},{i % 5},{i % 3},{1 + i % 4}" for i in range(200)]
    path.write_text("\n".join(lines) + "\n")
    return f"csv:{path}?label=y&categorical=a,b&weight=w"


def test_a_cluster_run_refuses_a_weight_column_it_would_drop(tmp_path: Path) -> None:
    settings = config.load(None, {}, {"data": _csv(tmp_path), "workers": 2})
    with pytest.raises(ConfigError, match="weight"):
        load_data(settings)


def test_without_the_weight_column_the_same_data_loads(tmp_path: Path) -> None:
    source = _csv(tmp_path).replace("&weight=w", "")
    splits, _, train = load_data(config.load(None, {}, {"data": source, "workers": 2}))
    assert train.n_rows > 0 and splits.train.weights is None
    # class_weight travels in the run's configuration, not in the shards: allowed.
    weighted = config.load(None, {}, {"data": source, "workers": 2,
                                      "class_weight": "balanced"})
    splits, _, _ = load_data(weighted)
    assert splits.train.weights is not None
