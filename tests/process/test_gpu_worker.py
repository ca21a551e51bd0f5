"""A cluster worker on a GPU (device cuda): its rounds on numba's CUDA simulator, its settings, a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hogwild import config
from hogwild.cluster.localrun.launcher import setting_flags
from hogwild.errors import ConfigError

from .test_gpu import _LOCKED_SHARED, _env, simulate

# T = 2 threads of 25 rows a round on the CPU are one GPU round of 50 rows; 90 rows make
# round 2 wrap at the block's end (rows 50..89, then 0..9: a new pass) and round 4 too.
_SETUP = """
import json
import numpy as np
from hogwild.data.synthetic import make_rcv1_like
from hogwild.engine.gpu_rounds import GPURounds
from hogwild.engine.threads import KernelPlan
from hogwild.engine.threads import Calls, ThreadRounds, make_cursors, train_round
from hogwild.model.arrays import csr_arrays
from hogwild.model.spec import ModelSpec

def rows(n, n_features=50, avg_nnz=40, seed=3):
    return csr_arrays(make_rcv1_like(n, n_features=n_features, avg_nnz=avg_nnz, seed=seed),
                      n_features)

def compare(arrays, spec, case, dtype, rounds=4, start=0.0):
    case = {"learning_rate": 0.5, **case}
    gpu_plan = KernelPlan(spec=spec, threads=2, round_size=25, **case)
    cpu_plan = KernelPlan(spec=spec, threads=1, round_size=50, **case)  # the same rows
    runner = GPURounds(arrays, spec, 0, weight_dtype=dtype, max_warps=1)
    w0 = spec.initial_weights(7)
    gpu_w, cpu_w = w0.copy(), w0.copy()
    gpu_c = make_cursors(arrays.n_rows, 1, start)
    cpu_c = make_cursors(arrays.n_rows, 1, start)
    losses = []
    for _ in range(rounds):
        g = train_round(arrays, gpu_w, gpu_plan, gpu_c[0], calls=Calls(device=runner))
        c = train_round(arrays, cpu_w, cpu_plan, cpu_c[0], calls=Calls(flush_rows=1))
        losses.append([g, c])
    cursor = lambda c: [c.pos, c.passes, c.t, c.examples]
    return {"diff": float(np.max(np.abs(gpu_w - cpu_w))),
            "moved": float(np.max(np.abs(cpu_w - w0))),
            "cursors": [cursor(gpu_c[0]), cursor(cpu_c[0])], "losses": losses,
            "launches": runner.launches}
"""


def test_one_warp_computes_the_cpu_threads_rounds_across_the_wrap() -> None:
    # Each round: the GPU runner's one launch (two at a wrap) over T x round_size rows gives
    # what one CPU thread computes over the same rows: weights, losses, step counter, passes.
    cases = [
        {"loss": "hinge", "lr_schedule": "inverse", "l2": 0.05, "fit_bias": True},
        {"loss": "logistic", "lr_schedule": "constant", "lr_decay": 0.5, "l2": 0.0,
         "fit_bias": False, "learning_rate": 0.2},
    ]
    got = simulate(_SETUP + f"""
arrays = rows(90)
out = [compare(arrays, ModelSpec.linear(50), case, "float64") for case in {cases!r}]
out.append(compare(arrays, ModelSpec.linear(50), {cases[0]!r}, "float32"))
print(json.dumps(out))
""")
    for r in got[:2]:
        assert r["moved"] > 0.01, r  # the model moved: the comparison means something
        assert r["diff"] <= 1e-12 * max(1.0, r["moved"]), r
        # 4 rounds of 50 rows over 90: two wraps, at rows 100 and 180 of the stream.
        assert r["cursors"] == [[20, 2, 201.0, 200]] * 2, r
        for (g_loss, g_rows), (c_loss, c_rows) in r["losses"]:
            assert g_rows == c_rows == 50
            assert g_loss == pytest.approx(c_loss, rel=1e-9)
        assert r["launches"] == 6  # one a round, two in each round that wraps
    f32 = got[2]
    assert 0 < f32["diff"] <= 1e-6 * max(1.0, f32["moved"]), f32  # weights rounded on device


def test_one_warp_computes_the_cpu_mlp_threads_rounds() -> None:
    # The MLP's kernel the same way (its dense layers written at once: flush_rows 1), from
    # half-way into the shard (a replicated shard's start), across a wrap.
    mlp = simulate(_SETUP + """
print(json.dumps(compare(rows(70, avg_nnz=6), ModelSpec("mlp", 50, (8, 4), False),
                         {"loss": "logistic", "l2": 0.01, "learning_rate": 0.1}, "float64",
                         rounds=2, start=0.5)))
""")
    assert mlp["moved"] > 1e-3, mlp
    assert mlp["diff"] <= 1e-12 * max(1.0, mlp["moved"]), mlp
    assert mlp["cursors"][0] == mlp["cursors"][1], mlp  # started half-way in: 35 + 100 rows
    assert mlp["cursors"][0][:2] == [65, 1], mlp


def test_a_delta_applied_during_a_launch_survives_it() -> None:
    # The exchange adds peers' deltas to w while a round runs (async mode): here one lands
    # in the middle of the round's launch, on weights the rows train and on others. The
    # round's own change is added around it, not copied over it.
    got = simulate(_SETUP + """
class Exchanged(GPURounds):
    target = None
    def _launch(self, *args, **kwargs):
        super()._launch(*args, **kwargs)
        if self.target is not None:  # the kernel has run; its result is not back yet
            self.target += delta     # what the exchange's apply does to the shared w

arrays = rows(90)
spec = ModelSpec.linear(50)
plan = KernelPlan(spec=spec, threads=2, round_size=25, loss="hinge",
                  learning_rate=0.5, l2=0.01)
delta = np.linspace(-1.0, 1.0, 51)
out = {}
for name in ("quiet", "exchanged"):
    runner = Exchanged(arrays, spec, 0, weight_dtype="float64", max_warps=1)
    w = np.full(51, 0.25)
    runner.target = w if name == "exchanged" else None
    train_round(arrays, w, plan, make_cursors(arrays.n_rows, 1)[0], calls=Calls(device=runner))
    out[name] = w.tolist()
    out["launches"] = runner.launches
print(json.dumps(out))
""")
    quiet, exchanged = np.array(got["quiet"]), np.array(got["exchanged"])
    assert got["launches"] == 1
    assert np.abs(quiet - 0.25).max() > 0.01  # the round trained
    # The launch saw the weights taken before the delta landed: the two runs differ by the
    # delta and by nothing else.
    expected = quiet + np.linspace(-1.0, 1.0, 51)
    np.testing.assert_allclose(exchanged, expected, rtol=0, atol=1e-12)


def test_settings_give_the_device_to_workers_and_not_to_the_coordinator() -> None:
    assert config.used_by("device", "worker") and config.used_by("device", "run")
    assert not config.used_by("device", "coordinator")
    settings = config.load(flags={"device": "cuda:1"})
    assert "--device=cuda:1" in setting_flags(settings, "worker")
    assert not any(f.startswith("--device") for f in setting_flags(settings, "coordinator"))
    for key, value in (("out_of_core", True), ("trainer", "locked"), ("batch_size", 8)):
        with pytest.raises(ConfigError, match=f"'device'.*got {key}"):
            config.load(flags={"device": "cuda", key: value})
    with pytest.raises(ConfigError, match="'hidden'.*256 units"):
        config.load(flags={"device": "cuda", "model": "mlp", "hidden": (200, 100)})


def _hogwild(args: list[str], tmp_path: Path, simulator: bool,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # Under the simulator its shared arrays are handed out under a lock (test_gpu); a forked
    # worker inherits the patch.
    code = ("import sys\nsys.setswitchinterval(1e-5)\n" + (_LOCKED_SHARED if simulator else "")
            + "from hogwild.cli import main\nsys.exit(main())")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, env=_env(simulator), timeout=timeout, cwd=tmp_path,
                          check=False)


def test_a_worker_without_cuda_refuses_in_one_line_before_registering(tmp_path: Path) -> None:
    probe = "from numba import cuda; print(cuda.is_available())"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env=_env(simulator=False), timeout=120, check=False)
    if found.stdout.strip() == "True":
        pytest.skip("this machine has a CUDA device")
    # No coordinator listens there: a worker that got as far as registering would hang.
    done = _hogwild(["worker", "--device", "cuda", "--coordinator-address", "127.0.0.1:9",
                     "--register-timeout", "5", "--insecure"], tmp_path, simulator=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "device cuda asked for, but no CUDA device is available: " in lines[0]


def test_run_with_gpu_workers_on_the_simulator(tmp_path: Path) -> None:
    # Seen on this data: test accuracy 0.85 with CPU workers, 0.81 with simulated GPU ones.
    data = "synthetic:rcv1?rows=400&n_features=60&avg_nnz=6"
    done = _hogwild(["run", "--workers", "2", "--threads", "2", "--device", "cuda",
                     "--data", data, "--epochs", "3", "--patience", "0",
                     "--out-dir", str(tmp_path / "runs"), "-v"], tmp_path, simulator=True,
                    timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    # Each worker trained on the device: threads x round_size rows a round.
    assert done.stdout.count("hogwild.worker: training on cuda: ") == 2, done.stdout[-3000:]
    metrics = json.loads((tmp_path / "runs" / "latest" / "metrics.json").read_text())
    assert metrics["epochs"] == pytest.approx(3, abs=0.5)
    assert metrics["test_accuracy"] > 0.75, metrics
