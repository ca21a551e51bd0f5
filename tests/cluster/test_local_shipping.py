"""shipping: local on a real cluster: workers read their own row ranges of the training file.

Real coordinator and worker processes on loopback (port 0), bounded waits, always reaped.
"""

from __future__ import annotations

import gzip
import itertools
import re
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.data.parts.ranges import split_u

from .helpers import (
    PROGRESS_ROW,
    READY,
    Cluster,
    one_worker_reads_other_data,
    read_metrics,
    require_reuters,
    train_on_then_stop,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

WIDE = 20_000  # n_features: a plan from a sample needs the width (Reuters' ids are below it)
ADVERTISED = re.compile(r"registered as worker (\d+) of \d+ in run \w+ "
                        r"\(advertising ([\d.]+):(\d+)\)")


def reuters(out: Path, data: str | Path, **extra: Any) -> dict[str, Any]:
    _, test = require_reuters()
    base = {"data": str(data), "test_data": str(test), "threads": 1, "epochs": 10,
            "patience": 0, "eval_interval": 0.5, "out_dir": str(out), "rpc_timeout": 5,
            "barrier_timeout": 5, "connect_timeout": 60, "register_timeout": 120,
            "data_cache": False}
    base.update(extra)
    return base


def _run(cluster: Cluster, n: int, settings: dict[str, Any]) -> dict[str, Any]:
    cluster.start(n, **settings)
    assert cluster.coordinator is not None
    assert cluster.coordinator.wait(240) == 0, cluster.output()
    for proc in cluster.workers:
        assert proc.wait(60) == 0, proc.output()
    return read_metrics(Path(settings["out_dir"]))


def _plain_copy(tmp_path: Path) -> Path:
    train, _ = require_reuters()
    path = tmp_path / "train.svm"
    path.write_bytes(gzip.decompress(train.read_bytes()))
    return path


def _check_ranges(metrics: dict[str, Any], seed: int = 0) -> None:
    """The workers' ranges are disjoint, cover the file, and hold exactly its training rows."""
    plan = metrics["local_ranges"]
    total = plan["total_rows"]
    covered = np.zeros(total, dtype=np.int64)
    u = split_u(seed, np.arange(total))
    for worker in plan["workers"]:
        expect = 0
        for first, rows, start, end in worker["ranges"]:
            covered[first:first + rows] += 1
            assert 0 <= start < end <= plan["text_bytes"]
            expect += int(np.count_nonzero(u[first:first + rows] >= plan["holdout"]))
        assert worker["train_rows"] == expect > 0
    assert covered.min() == covered.max() == 1  # disjoint, and every row of the file
    assert sum(w["train_rows"] for w in plan["workers"]) == plan["train_rows"] \
        == metrics["train_rows"]
    assert plan["train_rows"] + plan["val_rows"] + plan["test_rows"] == total
    spans = sorted((s, e) for w in plan["workers"] for _, _, s, e in w["ranges"])
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # byte ranges tile the text


def test_local_shipping_matches_partition_and_ships_no_rows(tmp_path: Path) -> None:
    train, _ = require_reuters()
    results = {}
    for name, data, mode, shipping in [
            ("partition", train, "sync", "partition"),
            ("local", train, "sync", "local"),  # gzip: every worker inflates its part
            ("local-url-async", f"file://{_plain_copy(tmp_path)}", "async", "local")]:
        cluster = Cluster(tmp_path / name)
        cluster.workdir.mkdir()
        try:
            results[name] = _run(cluster, 2, reuters(cluster.workdir / "out", data,
                                                     shipping=shipping, mode=mode))
        finally:
            cluster.reap()
        if shipping == "local":
            assert re.search(r"worker\(s\) read their own rows \(local\)", cluster.output())
            assert "each checked against the coordinator's digest" in cluster.output()
    part, local, url = results["partition"], results["local"], results["local-url-async"]
    print(f"\nLOCAL | partition {part['test_accuracy']:.4f} shipped {part['shipped_bytes']} | "
          f"local {local['test_accuracy']:.4f} plan {local['plan_bytes']} | "
          f"url async {url['test_accuracy']:.4f}")
    assert part["shipped_bytes"] > 1_000_000 and part["local_ranges"] is None
    for m in (local, url):
        assert m["shipping"] == "local" and m["shipped_bytes"] == 0
        # what travels instead: the ranges and the feature order (4 bytes per feature)
        assert 0 < m["plan_bytes"] <= 2 * (4 * m["n_features"] + 4096)
        _check_ranges(m)
        assert m["test_accuracy"] >= part["test_accuracy"] - 0.01
    assert url["local_ranges"]["source"].startswith("file://")
    # The same file through a path and a URL: the same plan, byte for byte.
    assert url["local_ranges"]["workers"] == local["local_ranges"]["workers"]
    assert url["local_ranges"]["text_bytes"] == local["local_ranges"]["text_bytes"]


def test_a_worker_that_sees_another_file_refuses_and_the_run_fails(cluster: Cluster,
                                                                   tmp_path: Path) -> None:
    data = _plain_copy(tmp_path)
    other = tmp_path / "other" / "train.svm"
    other.parent.mkdir()
    text = data.read_bytes()
    changed = text.replace(b":0.1", b":0.2")  # the same size, other values everywhere
    assert changed != text and len(changed) == len(text)
    other.write_bytes(changed)
    out = tmp_path / "out"
    error = one_worker_reads_other_data(cluster, reuters(out, data, shipping="local"), {},
                                        {"local_data": str(other)})
    assert re.search(rf"hogwild worker: error: cannot train on the planned rows: {other} "
                     r"differs from the file the coordinator planned with: rows [\d,]+\.\.",
                     error), error
    coord_errors = [ln for ln in cluster.coordinator.lines if "error:" in ln]
    assert len(coord_errors) == 1 and "cannot load its rows: FAILED_PRECONDITION" in \
        coord_errors[0], cluster.coordinator.output()
    assert not (out / "latest").exists()
    print("\n" + error + "\n" + coord_errors[0])


@pytest.mark.parametrize("plan", ["scan", "sample"])
def test_a_restarted_worker_rereads_its_ranges_and_rejoins(cluster: Cluster, tmp_path: Path,
                                                           plan: str) -> None:
    # sample: the restarted worker's count of its ranges must equal its place's first count
    out = tmp_path / "out"
    train, _ = require_reuters()
    settings = reuters(out, train if plan == "scan" else _plain_copy(tmp_path),
                       shipping="local", epochs=1_000_000, time_budget=60, rpc_timeout=2,
                       barrier_timeout=2, local_plan=plan, n_features=WIDE)
    cluster.start(2, **settings)
    assert cluster.coordinator is not None
    addresses = {}
    for proc in cluster.workers:
        match = proc.wait_for(ADVERTISED, 60)
        addresses[int(match.group(1))] = (proc, match.group(2), int(match.group(3)))
    cluster.coordinator.wait_for(PROGRESS_ROW, 90)
    victim, host, port = addresses[1]
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait(10)
    coordinator = f"127.0.0.1:{cluster.coordinator.wait_for(READY, 1).group(1)}"
    again = cluster.spawn("worker-1-again", "worker", {
        **settings, "bind_host": "127.0.0.1", "workers": 2, "worker_port": port,
        "advertise_address": f"{host}:{port}", "coordinator_address": coordinator})
    again.wait_for(re.compile(r"registered as worker 1 of 2"), 60)
    again.wait_for(re.compile(r"read [\d,]+ training rows .* each checked against the "
                              r"coordinator's digest"), 60)
    cluster.coordinator.wait_for(re.compile(r"worker 1 rejoined at round (\d+)"), 60)
    train_on_then_stop(cluster)  # the budget is only a bound
    assert cluster.coordinator.wait(120) == 0, cluster.output()
    assert addresses[0][0].wait(60) == 0 and again.wait(60) == 0
    metrics = read_metrics(out)
    states = {s["worker_id"]: s for s in metrics["worker_states"]}
    assert sorted(states) == [0, 1] and 1 not in metrics["dropped_workers"]
    assert states[1]["rounds"] > 0 and states[0]["applied_from"]["1"] > 0
    assert metrics["stop_reason"] == "SIGTERM"
    assert metrics["shipped_bytes"] == 0 and metrics["test_accuracy"] >= 0.97


def test_a_plan_from_a_sample_holds_out_its_windows_and_the_workers_count_the_rest(
        cluster: Cluster, tmp_path: Path) -> None:
    """local_plan sample: the coordinator reads only its held-out windows and the text around
    each cut; the workers read the rest whole and count it; every row of the file is trained
    on or held out exactly once, and the run trains as the scanned plan does."""
    path = _plain_copy(tmp_path)
    rows_in_file = sum(1 for line in path.read_bytes().split(b"\n")
                       if line.strip() and not line.lstrip().startswith(b"#"))
    metrics = _run(cluster, 2, reuters(tmp_path / "out", path, shipping="local",
                                       local_plan="sample", n_features=WIDE))
    assert cluster.coordinator is not None
    said = cluster.coordinator.output()
    assert re.search(r"the workers counted [\d,]+ training rows", said), said
    plan = metrics["local_ranges"]
    assert plan["plan"] == "sample" and plan["windows"] and metrics["shipped_bytes"] == 0
    # the windows and the workers' ranges tile the text
    spans = sorted([(s, e) for w in plan["workers"] for _, _, s, e in w["ranges"]]
                   + [tuple(w) for w in plan["windows"]])
    assert spans[0][0] == 0 and spans[-1][1] == plan["text_bytes"]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    counted = sum(w["train_rows"] for w in plan["workers"])
    assert counted == metrics["train_rows"] > 0
    assert counted + plan["val_rows"] + plan["test_rows"] == rows_in_file
    assert plan["val_rows"] == plan["sample_rows"] > 0
    assert metrics["test_accuracy"] >= 0.97


def test_workers_released_by_engage_leave_no_range_unread(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    """engage auto with shipping local: the ranges planned for the 4 workers started are
    dealt to the 2 engaged, so every training row of the file is still read, once."""
    path = _plain_copy(tmp_path)
    metrics = _run(cluster, 4, reuters(tmp_path / "out", path, shipping="local",
                                       engage="auto"))
    assert cluster.coordinator is not None
    assert "engaging 2 of 4 workers" in cluster.coordinator.output()
    assert metrics["workers"] == 2 and metrics["workers_started"] == 4
    assert [w["worker_id"] for w in metrics["local_ranges"]["workers"]] == [0, 1]
    _check_ranges(metrics)
    assert metrics["test_accuracy"] >= 0.97
