"""The sparse-input MLP on a GPU (device cuda, model mlp), run on numba's CUDA simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hogwild import config
from hogwild.engine.gpu_mlp import GPUMLPTrainer
from hogwild.engine.trainer import TrainParams
from hogwild.errors import ConfigError
from hogwild.model.spec import ModelSpec

from .test_gpu import _env, _nvvm_home, _train, simulate

_SETUP = """
import json
import subprocess
import sys
import numpy as np
from hogwild.data.synthetic import make_rcv1_like
from hogwild.engine.gpu_device import cuda_device
from hogwild.engine.gpu_mlp import GPUMLPTrainer
from hogwild.engine.mlp import MLPTrainer
from hogwild.engine.trainer import TrainParams
from hogwild.model.spec import ModelSpec
"""


def test_one_warp_computes_the_cpu_mlp_kernels_serial_pass() -> None:
    # One, two and three hidden layers (one wider than a warp), each loss and schedule, L2
    # and the biases on and off, binary features: one warp at a time must give the CPU
    # kernel's serial model, step counter and training losses (float64 weights on the
    # device: equal to rounding; float32: to float32's precision).
    cases = [
        ({"loss": "hinge", "lr_schedule": "inverse", "l2": 0.01, "fit_bias": True},
         [4], False, "float64"),
        ({"loss": "logistic", "lr_schedule": "constant", "lr_decay": 0.5, "l2": 0.0,
          "fit_bias": False, "learning_rate": 0.3}, [5, 3], True, "float64"),
        ({"loss": "squared", "lr_schedule": "invscaling", "power_t": 0.5, "l2": 0.02,
          "fit_bias": True, "learning_rate": 0.1}, [34, 3, 2], False, "float64"),
        ({"loss": "hinge", "lr_schedule": "inverse", "l2": 1e-3, "fit_bias": True},
         [6, 4], False, "float32"),
    ]
    got = simulate(_SETUP + f"""
data = make_rcv1_like(24, n_features=30, avg_nnz=8, seed=3)
out = []
for case, hidden, binary, dtype in {cases!r}:
    spec = ModelSpec("mlp", data.n_features, tuple(hidden), binary)
    p = TrainParams(mode="serial", threads=1, **case)
    cpu = MLPTrainer(spec, p, seed=2, deep_lr_scale=0.5)
    cpu_hist = cpu.fit(data, 2)
    gpu = GPUMLPTrainer(spec, p, seed=2, deep_lr_scale=0.5, device=cuda_device("cuda"),
                        weight_dtype=dtype)
    gpu_hist = gpu.fit(data, 2)
    start = spec.initial_weights(2)
    d = spec.shared_from
    out.append({{"diff": float(np.max(np.abs(gpu.w - cpu.w))),
                 "scale": float(np.max(np.abs(cpu.w))),
                 "moved_rows": float(np.max(np.abs((cpu.w - start)[:d]))),
                 "moved_tail": float(np.max(np.abs((cpu.w - start)[d:-1]))),
                 "bias": float(gpu.w[-1]), "t": [gpu.t, cpu.t],
                 "loss": [[h.train_loss for h in gpu_hist], [h.train_loss for h in cpu_hist]]}})
print(json.dumps(out))
""")
    for (case, hidden, _, dtype), r in zip(cases, got, strict=True):
        what = (case, hidden, r)
        # The deep part moved, not only the wide weights: the comparison covers it.
        assert r["moved_rows"] > 1e-3 and r["moved_tail"] > 1e-3, what
        tol = 1e-9 if dtype == "float64" else 1e-5
        assert r["diff"] <= tol * max(1.0, r["scale"]), what
        assert r["t"] == [49.0, 49.0], what  # 1 + 2 epochs of 24 examples
        assert r["loss"][0] == pytest.approx(r["loss"][1], rel=100 * tol), what
        if not case["fit_bias"]:
            assert r["bias"] == 0.0, what


def test_many_warps_at_once_train_about_as_well_as_the_cpu_threads() -> None:
    got = simulate(_SETUP + """
from hogwild.model.arrays import csr_arrays
from hogwild.model.mlp_kernels import mlp_evaluate
data = make_rcv1_like(256, n_features=60, avg_nnz=6, noise=0.0, seed=5)
a = csr_arrays(data, data.n_features)
spec = ModelSpec("mlp", data.n_features, (8,))
p = TrainParams(threads=2)
cpu = MLPTrainer(spec, p, deep_lr_scale=0.5)
cpu.fit(data, 2)
gpu = GPUMLPTrainer(spec, p, deep_lr_scale=0.5, device=cuda_device("cuda"))
hist = gpu.fit(data, 2)
acc = lambda w: mlp_evaluate(a.indptr, a.indices, a.values, a.labels, w, data.n_features,
                             spec.hidden_array(), False, 0)[1] / 256
print(json.dumps({"warps": gpu.warps(256), "gpu": acc(gpu.w), "cpu": acc(cpu.w),
                  "loss": [h.train_loss for h in hist]}))
""")
    assert got["warps"] == 4  # 256 rows // 64 rows per warp: several examples in flight
    assert got["gpu"] >= got["cpu"] - 0.05, got
    assert got["gpu"] > 0.8, got
    assert got["loss"][-1] < got["loss"][0], got


def test_settings_accept_the_mlp_on_a_gpu_and_refuse_what_its_kernel_cannot_hold() -> None:
    loaded = config.load(flags={"device": "cuda", "model": "mlp", "hidden": [128, 64, 64]})
    assert loaded.hidden == (128, 64, 64)
    with pytest.raises(ConfigError, match=r"'hidden'.*256 units in all at most; got "
                                          r"\[200, 100\] \(300 units\)"):
        config.load(flags={"device": "cuda", "model": "mlp", "hidden": [200, 100]})
    config.load(flags={"device": "cpu", "model": "mlp", "hidden": [200, 100]})  # CPU: any
    for key, value in (("batch_size", 8), ("trainer", "locked"), ("out_of_core", True)):
        with pytest.raises(ConfigError, match=f"'device'.*got {key}"):
            config.load(flags={"device": "cuda", "model": "mlp", key: value})


def test_the_trainer_refuses_bad_shapes_and_settings_before_loading_cuda() -> None:
    spec = ModelSpec("mlp", 10, (300,))
    with pytest.raises(ConfigError, match="'hidden'.*got \\[300\\]"):
        GPUMLPTrainer(spec, TrainParams())
    small = ModelSpec("mlp", 10, (4,))
    with pytest.raises(ValueError, match="batch_size: a GPU steps once per example"):
        GPUMLPTrainer(small, TrainParams(batch_size=4))
    with pytest.raises(ValueError, match="mode: a GPU trains in mode hogwild or serial"):
        GPUMLPTrainer(small, TrainParams(mode="locked"))
    with pytest.raises(ValueError, match="deep_lr_scale"):
        GPUMLPTrainer(small, TrainParams(), deep_lr_scale=0.0)
    with pytest.raises(ValueError, match="MLP spec"):
        GPUMLPTrainer(ModelSpec.linear(10), TrainParams())


def test_train_mlp_on_the_simulated_gpu_writes_an_mlp_model(tmp_path: Path) -> None:
    data = "synthetic:rcv1?rows=100&n_features=60&avg_nnz=6"
    done = _train(["--device", "cuda", "--model", "mlp", "--hidden", "[300]", "--data", data],
                  tmp_path, simulator=True)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "'hidden'" in done.stderr and "256 units in all at most" in done.stderr
    done = _train(["--device", "cuda", "--model", "mlp", "--hidden", "[4]", "--data", data,
                   "--epochs", "2"], tmp_path, simulator=True)
    assert done.returncode == 0, done.stderr
    model = json.loads((tmp_path / "runs" / "latest" / "model.json").read_text())
    assert model["settings"]["device"] == "cuda"
    assert model["model"] == "mlp", model.keys()
    metrics = json.loads((tmp_path / "runs" / "latest" / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["test_accuracy"] is not None


_PTX = """
import json, types
from numba import cuda, float32, float64, int32, int64, boolean, void
import numba.cuda.dispatcher as dispatcher
# As in test_gpu: device functions ask the current GPU for its compute capability even when
# only compiling PTX; answer for an H100 (sm_90).
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
from hogwild.model import cuda_mlp_kernels
out = {}
for name, wt in (("float32", float32), ("float64", float64)):
    sig = void(int64[::1], int32[::1], float32[::1], float32[::1], wt[::1], int64, int64[::1],
               int64[::1], int64, float64, int64, float64, float64, float64, boolean, boolean,
               float64, float64[::1])
    ptx, _ = cuda.compile_ptx(cuda_mlp_kernels.mlp_sgd_epoch.py_func, sig, cc=(9, 0))
    out[name] = sorted({line.split()[0] for line in ptx.splitlines() if "atom." in line})
print(json.dumps(out))
"""


@pytest.mark.skipif(_nvvm_home() is None, reason="no CUDA toolkit with NVVM (CUDA_HOME)")
def test_the_mlp_kernel_compiles_for_a_real_gpu_with_hardware_atomics() -> None:
    # What the simulator runs as Python may not compile for a GPU: compile it to PTX.
    done = subprocess.run([sys.executable, "-c", _PTX], capture_output=True, text=True,
                          env=_env(simulator=False), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "atom.global.add.f32" in got["float32"]
    assert "atom.global.add.f64" in got["float64"]
