"""shipping: local with Parquet on a real cluster: each worker reads its own row groups.

Real coordinator and worker processes on loopback (port 0), bounded waits, always reaped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tests.parquetdata import QUERY, write_parquet

from hogwild.data.sources import load_source

from .helpers import Cluster, one_worker_reads_other_data, read_metrics, require_reuters

pytest.importorskip("pyarrow")
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def _reuters_parquet(tmp_path: Path) -> tuple[str, str]:
    """Reuters' train and test sets as Parquet (train: 3 files of row groups of 400 rows)."""
    train, test = require_reuters()
    rows = load_source(str(train))
    folder = tmp_path / "reuters"
    folder.mkdir()
    third = rows.n_rows // 3
    for k in range(3):
        write_parquet(rows, folder / f"part-{k}.parquet", 400, first=k * third,
                      stop=rows.n_rows if k == 2 else (k + 1) * third)
    held = write_parquet(load_source(str(test)), tmp_path / "test.parquet", 1000)
    return f"parquet:{folder}?{QUERY}", f"parquet:{held}?{QUERY}"


def _settings(out: Path, data: str, test: str, **extra: Any) -> dict[str, Any]:
    return {"data": data, "test_data": test, "threads": 1, "epochs": 10, "patience": 0,
            "eval_interval": 0.5, "out_dir": str(out), "rpc_timeout": 5,
            "barrier_timeout": 5, "connect_timeout": 60, "register_timeout": 120, **extra}


def test_workers_read_their_row_groups_and_train_as_well_as_partition(tmp_path: Path) -> None:
    data, test = _reuters_parquet(tmp_path)
    results = {}
    for shipping in ("partition", "local"):
        cluster = Cluster(tmp_path / shipping)
        cluster.workdir.mkdir()
        try:
            cluster.start(2, **_settings(cluster.workdir / "out", data, test, shipping=shipping))
            assert cluster.coordinator is not None
            assert cluster.coordinator.wait(240) == 0, cluster.output()
            for proc in cluster.workers:
                assert proc.wait(60) == 0, proc.output()
            results[shipping] = read_metrics(cluster.workdir / "out")
        finally:
            cluster.reap()
    part, local = results["partition"], results["local"]
    print(f"\nPARQUET | partition {part['test_accuracy']:.4f} shipped {part['shipped_bytes']} | "
          f"local {local['test_accuracy']:.4f} plan {local['plan_bytes']}")
    assert local["shipping"] == "local" and local["shipped_bytes"] == 0
    assert local["test_accuracy"] >= part["test_accuracy"] - 0.01
    plan = local["local_ranges"]
    assert plan["format"] == "parquet" and plan["plan"] == "footers"
    groups = [g for w in plan["workers"] for g in w["row_groups"]]
    assert {g[0] for g in groups} == {f"part-{k}.parquet" for k in range(3)}
    # Every row once: the workers' pieces and the held-out rows make the data set.
    assert sum(g[3] for g in groups) == plan["train_rows"] == local["train_rows"]
    assert plan["train_rows"] + plan["val_rows"] == plan["total_rows"] == \
        load_source(str(require_reuters()[0])).n_rows
    assert all(w["train_rows"] > 0 for w in plan["workers"])
    # The saved model keeps the column mapping the workers encoded their rows with.
    model = json.loads((tmp_path / "local" / "out" / "latest" / "model.json").read_text())
    assert model["hashing"]["columns"][0]["kind"] == "sparse"


def test_a_worker_whose_files_differ_refuses_and_the_run_fails(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    data, test = _reuters_parquet(tmp_path)
    folder = Path(data.split(":", 1)[1].split("?")[0])
    other = tmp_path / "other"
    other.mkdir()
    rows = load_source(str(require_reuters()[0]))
    third = rows.n_rows // 3
    for k in range(3):  # the same rows in groups of 300: another layout
        write_parquet(rows, other / f"part-{k}.parquet", 300, first=k * third,
                      stop=rows.n_rows if k == 2 else (k + 1) * third)
    error = one_worker_reads_other_data(
        cluster, _settings(tmp_path / "out", data, test, shipping="local"),
        {"local_data": str(folder)}, {"local_data": str(other)})
    assert re.search(r"hogwild worker: error: cannot train on the planned rows: .*/other/"
                     r"part-\d\.parquet differs from the file the coordinator planned with: "
                     r"row group \d+", error), error
    assert not (tmp_path / "out" / "latest").exists()
