"""The GPU trainer (device: cuda), run on numba's CUDA simulator in child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hogwild import config
from hogwild.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")
# `hogwild` itself, with the short GIL switch interval of simulate() (see there).
HOGWILD = [sys.executable, "-c", ("import sys; sys.setswitchinterval(1e-5); "
                                  "from hogwild.cli import main; sys.exit(main())")]


def _env(simulator: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOGWILD_", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_DRIVER"))}
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if simulator:
        # The simulator is chosen when numba is first imported: hence a process of its own.
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


# numba's CUDA simulator hands out a block's shared array with an unlocked check-then-create
# (FakeCUDAShared.array: dict get, np.empty, dict set): two simulated threads of one block that
# reach it at once can each get an array of their own, and then the lanes of a warp add up
# different partial sums. A short switch interval on a loaded machine makes that happen (seen
# once, as one warp's model 0.39 away from the CPU's). The same allocation under a lock:
_LOCKED_SHARED = """
import sys, threading, traceback
import numpy as np
from numba.core import types
from numba.np import numpy_support
from numba.cuda.simulator import kernelapi
_shared_lock = threading.Lock()
_unlocked_array = kernelapi.FakeCUDAShared.array
def _locked_array(self, shape, dtype):
    if shape == 0:
        return _unlocked_array(self, shape, dtype)
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    caller = tuple(traceback.extract_stack(sys._getframe(1), limit=1)[-1])[0:2]
    with _shared_lock:
        res = self._allocations.get(caller)
        if res is None:
            res = self._allocations[caller] = np.empty(shape, dtype)
    return res
kernelapi.FakeCUDAShared.array = _locked_array
"""


def simulate(code: str) -> Any:
    """Run ``code`` under the CUDA simulator in a fresh Python; it prints one JSON value last.

    The simulator runs each GPU thread as a Python thread that meets the others at every
    barrier: a short GIL switch interval makes those meetings quick (seconds, not minutes)."""
    probe = ("import sys\nsys.setswitchinterval(1e-5)\n" + _LOCKED_SHARED
             + textwrap.dedent(code))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=_env(simulator=True), timeout=300, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# Small rows (the simulator runs Python per GPU thread): RCV1-shaped, 120-300 of them.
_SETUP = """
import json
import numpy as np
from hogwild.data.synthetic import make_rcv1_like
from hogwild.engine.gpu import GPUTrainer
from hogwild.engine.gpu_device import cuda_device
from hogwild.engine.trainer import Trainer, TrainParams
"""


def test_one_warp_computes_the_cpu_kernels_serial_pass() -> None:
    # Each loss, each schedule (inverse, constant decayed per epoch, invscaling with and
    # without power 1), lazy L2 on and off, the bias on and off: one warp at a time must
    # give the CPU kernel's model, step counter and training losses.
    cases = [
        {"loss": "hinge", "lr_schedule": "inverse", "l2": 0.05, "fit_bias": True},
        {"loss": "logistic", "lr_schedule": "constant", "lr_decay": 0.5, "l2": 0.0,
         "fit_bias": True, "learning_rate": 0.2},
        {"loss": "squared", "lr_schedule": "invscaling", "power_t": 0.5, "l2": 0.01,
         "fit_bias": False, "learning_rate": 0.1},
        {"loss": "hinge", "lr_schedule": "invscaling", "power_t": 1.0, "l2": 0.0,
         "fit_bias": False},
    ]
    got = simulate(_SETUP + f"""
data = make_rcv1_like(60, n_features=50, avg_nnz=40, seed=3)  # rows wider than a warp
out = []
for case in {cases!r}:
    p = TrainParams(mode="serial", threads=1, **case)
    cpu = Trainer(data.n_features, p)
    cpu_hist = cpu.fit(data, 2)
    gpu = GPUTrainer(data.n_features, p, device=cuda_device("cuda"), weight_dtype="float64")
    gpu_hist = gpu.fit(data, 2)
    out.append({{"diff": float(np.max(np.abs(gpu.w - cpu.w))),
                 "scale": float(np.max(np.abs(cpu.w))),
                 "bias": float(gpu.w[-1]), "t": [gpu.t, cpu.t],
                 "loss": [[h.train_loss for h in gpu_hist], [h.train_loss for h in cpu_hist]],
                 "examples": [h.examples for h in gpu_hist]}})
print(json.dumps(out))
""")
    for case, r in zip(cases, got, strict=True):
        assert r["scale"] > 0.01, case  # the model moved: the comparison means something
        assert r["diff"] <= 1e-9 * max(1.0, r["scale"]), (case, r)
        assert r["t"] == [121.0, 121.0], case  # 1 + 2 epochs of 60 examples
        assert r["loss"][0] == pytest.approx(r["loss"][1], rel=1e-9), case
        assert r["examples"] == [60, 60]
        if not case["fit_bias"]:
            assert r["bias"] == 0.0, case


def test_float32_weights_come_back_as_float64_close_to_the_cpu_model() -> None:
    got = simulate(_SETUP + """
data = make_rcv1_like(80, n_features=50, avg_nnz=10, seed=4)
p = TrainParams(mode="serial", threads=1, l2=1e-3)
cpu = Trainer(data.n_features, p)
cpu.fit(data, 1)
gpu = GPUTrainer(data.n_features, p, device=cuda_device("cuda"))
w = gpu.w
gpu.fit(data, 1)
print(json.dumps({"same_array": gpu.w is w, "dtype": str(gpu.w.dtype),
                  "serial_warps": gpu.warps(100_000),
                  "exact_f32": bool(np.all(gpu.w.astype(np.float32).astype(np.float64) == gpu.w)),
                  "diff": float(np.max(np.abs(gpu.w - cpu.w))),
                  "scale": float(np.max(np.abs(cpu.w)))}))
""")
    assert got["same_array"] and got["dtype"] == "float64"
    assert got["serial_warps"] == 1  # trainer serial: one example at a time, any data size
    assert got["exact_f32"]  # float32 values, held exactly in the float64 model
    assert got["diff"] <= 1e-5 * got["scale"]


def test_many_warps_at_once_train_about_as_well_as_the_cpu() -> None:
    got = simulate(_SETUP + """
from hogwild.model.kernels import evaluate
from hogwild.model.arrays import csr_arrays
data = make_rcv1_like(260, n_features=60, avg_nnz=6, noise=0.0, seed=5)
a = csr_arrays(data, data.n_features)
p = TrainParams(threads=2)
cpu = Trainer(data.n_features, p)
cpu.fit(data, 3)
gpu = GPUTrainer(data.n_features, p, device=cuda_device("cuda"))
hist = gpu.fit(data, 3)
acc = lambda w: evaluate(a.indptr, a.indices, a.values, a.labels, w, data.n_features, 0)[1] / 260
print(json.dumps({"warps": gpu.warps(260), "gpu": acc(gpu.w), "cpu": acc(cpu.w),
                  "loss": [h.train_loss for h in hist]}))
""")
    assert got["warps"] == 4  # 260 rows // 64 rows per warp: several examples in flight
    assert got["gpu"] >= got["cpu"] - 0.05, got
    assert got["gpu"] > 0.8, got
    assert got["loss"][-1] < got["loss"][0], got


def test_settings_choose_the_device_and_refuse_what_a_gpu_does_not_train() -> None:
    assert config.load().device == "cpu"
    assert config.load(flags={"device": "cuda:1"}).device == "cuda:1"
    for bad in ("gpu", "cuda:", "cuda:01", "CUDA", "cuda:-1"):
        with pytest.raises(ConfigError, match="'device'.*cpu, cuda or cuda:N"):
            config.load(flags={"device": bad})
    for key, value in (("out_of_core", True), ("trainer", "locked"),
                       ("trainer", "syncsgd"), ("batch_size", 8)):
        with pytest.raises(ConfigError, match=f"'device'.*got {key}"):
            config.load(flags={"device": "cuda", key: value})
    assert config.load(flags={"device": "cuda", "trainer": "serial"}).trainer == "serial"


def _train(args: list[str], tmp_path: Path, simulator: bool) -> subprocess.CompletedProcess[str]:
    # Under the simulator, with its shared arrays handed out under a lock (see above).
    command = ([sys.executable, "-c", "import sys\nsys.setswitchinterval(1e-5)\n"
                + _LOCKED_SHARED + "from hogwild.cli import main\nsys.exit(main())"]
               if simulator else HOGWILD)
    return subprocess.run([*command, "train", "--out-dir", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, env=_env(simulator), timeout=300,
                          cwd=tmp_path, check=False)


def test_without_cuda_train_refuses_in_one_line_before_reading_data(tmp_path: Path) -> None:
    probe = "from numba import cuda; print(cuda.is_available())"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env=_env(simulator=False), timeout=120, check=False)
    if found.stdout.strip() == "True":
        pytest.skip("this machine has a CUDA device")
    done = _train(["--device", "cuda", "--data", str(tmp_path / "absent.svm")], tmp_path,
                  simulator=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "device cuda asked for, but no CUDA device is available: " in lines[0]
    assert done.stdout == ""  # nothing loaded (the data file does not even exist)


def test_train_on_the_simulated_gpu_writes_a_model_and_refuses_a_missing_index(
        tmp_path: Path) -> None:
    data = "synthetic:rcv1?rows=100&n_features=100&avg_nnz=8"
    done = _train(["--device", "cuda:1", "--data", data], tmp_path, simulator=True)
    assert done.returncode == 2, done.stderr
    assert "device cuda:1 asked for, but this machine has 1 CUDA device(s)" in done.stderr
    done = _train(["--device", "cuda", "--data", data, "--epochs", "2"], tmp_path,
                  simulator=True)
    assert done.returncode == 0, done.stderr
    model = json.loads((tmp_path / "runs" / "latest" / "model.json").read_text())
    assert model["settings"]["device"] == "cuda"
    metrics = json.loads((tmp_path / "runs" / "latest" / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["test_accuracy"] is not None


def test_multiclass_data_is_refused_on_a_gpu(tmp_path: Path) -> None:
    rows = "".join(f"{k % 3} 1:{k % 5 + 1} 2:1\n" for k in range(30))
    (tmp_path / "three.svm").write_text(rows)
    done = _train(["--device", "cuda", "--data", str(tmp_path / "three.svm"),
                   "--no-data-cache"], tmp_path, simulator=True)
    assert done.returncode == 1, done.stderr
    assert "3 label values; device cuda trains binary and regression only" in done.stderr


def test_cpu_runs_and_version_never_import_numba_cuda() -> None:
    code = textwrap.dedent("""
        import contextlib, io, sys
        from hogwild import config
        from hogwild.cli import main
        from hogwild.engine.runstart import model_spec
        from hogwild.inprocess.local import make_trainer
        from hogwild.data.synthetic import make_rcv1_like
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["--version"])
            except SystemExit:
                pass
        data = make_rcv1_like(20, n_features=10, avg_nnz=3)
        settings = config.load()
        make_trainer(settings, model_spec(settings, 10)).fit(data, 1)
        print(sorted(m for m in sys.modules if m.startswith("numba.cuda")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(simulator=False), timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


_PTX = """
import json, types
from numba import cuda, float32, float64, int32, int64, boolean, void
import numba.cuda.dispatcher as dispatcher
# Device functions ask the current GPU for its compute capability even when compiling PTX
# only: answer for an H100 (sm_90), the code is not run.
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
from hogwild.model import cuda_kernels
out = {}
for name, wt in (("float32", float32), ("float64", float64)):
    sig = void(int64[::1], int32[::1], float32[::1], float32[::1], wt[::1], int64, int64,
               float64, int64, float64, float64, float64, boolean, float64[::1])
    ptx, _ = cuda.compile_ptx(cuda_kernels.sgd_epoch.py_func, sig, cc=(9, 0))
    out[name] = sorted({line.split()[0] for line in ptx.splitlines() if "atom." in line})
print(json.dumps(out))
"""


def _nvvm_home() -> str | None:
    """A CUDA toolkit with NVVM (CUDA_HOME), for compiling to PTX without a GPU."""
    home = os.environ.get("CUDA_HOME")
    return home if home and list(Path(home).glob("nvvm/lib64/libnvvm.so*")) else None


@pytest.mark.skipif(_nvvm_home() is None, reason="no CUDA toolkit with NVVM (CUDA_HOME)")
def test_the_kernel_compiles_for_a_real_gpu_with_hardware_atomics() -> None:
    # The simulator runs the kernel as Python: what numba cannot compile for a GPU (a
    # builtin without a CUDA lowering, a type it cannot unify) passes there unseen.
    done = subprocess.run([sys.executable, "-c", _PTX], capture_output=True, text=True,
                          env=_env(simulator=False), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "atom.global.add.f32" in got["float32"]
    assert "atom.global.add.f64" in got["float64"]  # float64 weights, and the loss sum
