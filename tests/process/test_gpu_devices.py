"""Several GPUs on one machine: `hogwild run --device cuda:0,1` gives its workers one each, in turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from hogwild import config
from hogwild.config import worker_devices
from hogwild.errors import ConfigError

from .test_gpu_worker import _hogwild


def test_a_list_of_gpus_goes_round_the_workers() -> None:
    assert worker_devices("cuda:0,1", 5) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert worker_devices("cuda:3,1,2", 2) == ["cuda:3", "cuda:1"]
    assert worker_devices("cuda", 3) == ["cuda"] * 3
    assert worker_devices("cpu", 2) == ["cpu", "cpu"]
    assert config.load(flags={"device": "cuda:0,1"}).device == "cuda:0,1"
    for bad in ("cuda:0,", "cuda:,1", "cuda:01,2", "gpu:0,1", "cuda:0;1"):
        with pytest.raises(ConfigError, match="'device'"):
            config.load(flags={"device": bad})


def test_a_list_of_gpus_is_for_run_only() -> None:
    from hogwild.engine.gpu_device import cuda_device

    with pytest.raises(ConfigError, match=r"device cuda:0,1 names several GPUs: that is for "
                                          r"`hogwild run`"):
        cuda_device("cuda:0,1")


def test_each_worker_of_run_gets_its_own_gpu_on_the_simulator(tmp_path: Path) -> None:
    # The simulator stands in for one GPU: the worker given cuda:0 trains, the one given
    # cuda:1 says, in one line, that this machine has no such GPU, and the run stops.
    data = "synthetic:rcv1?rows=200&n_features=40&avg_nnz=5"
    done = _hogwild(["run", "--workers", "2", "--threads", "1", "--device", "cuda:0,1",
                     "--data", data, "--epochs", "2", "--out-dir", str(tmp_path / "runs"),
                     "-v"], tmp_path, simulator=True, timeout=240)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    assert said.count("device cuda:1 asked for, but this machine has 1 CUDA device(s)") == 1, \
        said[-3000:]
    assert "device cuda:0 asked for" not in said, said[-3000:]
