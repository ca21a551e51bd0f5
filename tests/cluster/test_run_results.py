"""The cluster gives a right result or a clear error: 0/1 labels, multiclass, divergence."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.sources import load_source

from .helpers import Cluster, flags, read_metrics
from .helpers import _env as child_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hogwild.cli", "run", *argv],
                          capture_output=True, text=True, cwd=tmp_path, env=child_env(),
                          timeout=180, check=False)


def _spam(tmp_path: Path, negative: float, positive: float) -> tuple[Path, Path]:
    paths = []
    for part in ("train", "test"):
        data = load_source(f"bundled:spamassassin/{part}")
        labels = np.where(data.labels > 0, positive, negative).astype(np.float32)
        path = tmp_path / f"spam.{part}.svm"
        write_svmlight(replace(data, labels=labels), path)
        paths.append(path)
    return paths[0], paths[1]


def test_run_with_zero_one_labels(tmp_path: Path) -> None:
    train, test = _spam(tmp_path, 0.0, 1.0)
    out = tmp_path / "out"
    proc = _run(tmp_path, *flags(workers=2, threads=1, epochs=4, data=train, test_data=test,
                                 out_dir=out, data_cache=False))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = read_metrics(out)
    # Before labels were mapped, 0/1 labels trained to 0.31 test accuracy.
    assert metrics["test_accuracy"] >= 0.97
    meta = json.loads((out / "latest" / "model.json").read_text())
    assert meta["task"] == "binary" and meta["classes"] == [0, 1]


def test_run_refuses_multiclass_data_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "three.svm"
    data.write_text("".join(f"{i % 3 + 1} {i % 3 + 1}:1 {4 + i % 5}:0.5\n" for i in range(300)))
    proc = _run(tmp_path, *flags(workers=2, data=data, test_fraction=0.2,
                                 out_dir=tmp_path / "out", data_cache=False))
    assert proc.returncode == 1
    errors = [line for line in (proc.stdout + proc.stderr).splitlines()
              if "hogwild coordinator: error:" in line]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert "labels {1, 2, 3}" in errors[0] and "hogwild train" in errors[0]
    assert not (tmp_path / "out" / "latest").exists()


def test_divergence_stops_the_cluster_with_an_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster = Cluster(tmp_path)
    try:
        # Squared loss at learning rate 50 overflows within the first round.
        cluster.start(2, loss="squared", learning_rate=50.0, epochs=5, out_dir=out,
                      register_timeout=60, data_cache=False)
        assert cluster.coordinator is not None
        code = cluster.coordinator.wait(120)
        text = cluster.output()
        assert code == 1, text
        lines = [line for line in cluster.coordinator.output().splitlines()
                 if "hogwild coordinator: error:" in line]
        assert len(lines) == 1 and "diverged" in lines[0] and "learning_rate" in lines[0], text
        assert "early stopping" not in text
        # At least one worker found its weights non-finite and said so; its line may come
        # after the coordinator's exit, so the workers' ends are waited for (bounded).
        for worker in cluster.workers:
            worker.wait(60)
        text = cluster.output()
        assert "hogwild worker: error: training diverged" in text, text
        # The others were told the run is over: none waits to register with a successor (one
        # used to, for connect_timeout, once the coordinator had gone).
        assert "leaving the run to register again" not in text, text
        assert not (out / "latest").exists()
    finally:
        cluster.reap()
