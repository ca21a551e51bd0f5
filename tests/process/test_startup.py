"""Start-up: the command and the launcher import no heavy library before they need it."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("numba", "grpc", "matplotlib")


def _env() -> dict[str, str]:
    """This environment, with the source tree first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def loaded_after(code: str) -> list[str]:
    """The heavy modules present in sys.modules after running ``code`` in a fresh Python."""
    env = _env()
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["hogwild.cli", "hogwild.cluster.localrun.launcher", "hogwild.outputs.plotter",
                                    "hogwild.config", "hogwild.runtime.announce", "hogwild.base.startup"])
def test_light_modules_import_nothing_heavy(module: str) -> None:
    assert loaded_after(f"import {module}") == []


def test_version_imports_nothing_heavy() -> None:
    code = ("import contextlib, io\nfrom hogwild.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n        main(['--version'])\n    except SystemExit:\n        pass\n"
            "assert out.getvalue().startswith('hogwild '), out.getvalue()")
    assert loaded_after(code) == []


def test_data_layer_never_imports_grpc_or_matplotlib() -> None:
    assert loaded_after("import hogwild.data, hogwild.data.formats.stream, hogwild.inprocess.local") == ["numba"]


@pytest.mark.parametrize("enabled", [True, False])
def test_long_lived_freezes_what_it_made_and_restores_the_collector(enabled: bool) -> None:
    from hogwild.base.startup import long_lived

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        before = gc.get_freeze_count()
        with long_lived():
            assert not gc.isenabled()
            made = [[i] for i in range(1000)]
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() >= before + len(made)
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()


def test_main_called_with_argv_leaves_the_collector_alone(tmp_path: Path) -> None:
    from hogwild.cli import main

    frozen = gc.get_freeze_count()
    assert main(["gen-data", "rcv1", "--rows", "20", "--out", str(tmp_path / "x.svm")]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_the_whole_process_freezes_before_exit(tmp_path: Path) -> None:
    """python -m hogwild.cli (argv None): the objects are frozen when main returns."""
    code = ("import gc, sys\nfrom hogwild.cli import main\n"
            f"sys.argv = ['hogwild', 'gen-data', 'rcv1', '--rows', '20', '--out', "
            f"{str(tmp_path / 'x.svm')!r}]\n"
            "assert main() == 0\nassert gc.isenabled()\nprint(gc.get_freeze_count())")
    env = _env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    assert int(out.strip().splitlines()[-1]) > 10_000


def _run(code: str) -> str:
    env = _env()
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, check=True).stdout


def test_kernels_run_without_importing_scipy_linalg_which_still_imports_after() -> None:
    code = ("import sys, numpy as np\n"
            "from hogwild.model import kernels\n"
            "from hogwild.model.warmup import warmup\n"
            "warmup()\n"
            "print('after kernels:', 'scipy.linalg' in sys.modules)\n"
            "import scipy.linalg\n"
            "print('linalg works:', float(scipy.linalg.norm(np.array([3.0, 4.0]))))\n")
    out = _run(code)
    assert "after kernels: False" in out
    assert "linalg works: 5.0" in out


def test_blas_probe_is_left_alone_once_scipy_linalg_is_loaded() -> None:
    # scikit-learn first (it imports scipy.linalg), then the kernels: numba sees BLAS as usual.
    code = ("import sklearn.linear_model, sys\n"
            "from hogwild.model.warmup import warmup\n"
            "warmup()\n"
            "import numba.np.arraymath as am\n"
            "print('blas:', am._HAVE_BLAS, sys.modules['scipy.linalg.cython_blas'] is not None)\n")
    assert "blas: True True" in _run(code)


def test_command_kernels_run_without_importing_cffi_which_still_imports_after() -> None:
    # The command's own import path (import_long_lived), then the first kernel calls.
    code = ("import sys\n"
            "from hogwild.base.startup import import_long_lived\n"
            "import_long_lived('hogwild.inprocess.local')\n"
            "from hogwild.model.warmup import warmup\n"
            "warmup()\n"
            "print('after kernels:', 'cffi' in sys.modules, 'pycparser' in sys.modules)\n"
            "import cffi\n"
            "print('cffi works:', cffi.FFI().sizeof('int'))\n")
    out = _run(code)
    assert "after kernels: False False" in out
    assert "cffi works: 4" in out


def test_a_library_user_keeps_numba_cffi_support() -> None:
    # Importing hogwild as a library (no import_long_lived) leaves numba as it is.
    code = ("import cffi\n"
            "from hogwild.model.warmup import warmup\n"
            "from hogwild.base.startup import import_long_lived\n"
            "warmup()\n"
            "import_long_lived('hogwild.inprocess.local')\n"
            "from numba.core.typing import cffi_utils\n"
            "print('supported:', cffi_utils.SUPPORTED)\n")
    assert "supported: True" in _run(code)


def _blas_run(code: str, **env_extra: str) -> str:
    env = _env()
    env.pop("OPENBLAS_NUM_THREADS", None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=True).stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("user", "expected"), [(None, "1"), ("3", "3")])
def test_command_process_asks_for_one_blas_thread_unless_the_user_chose(
        user: str | None, expected: str) -> None:
    code = ("import contextlib, io, os\nfrom hogwild.cli import main_process\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main_process(['--version'])\n    except SystemExit:\n        pass\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))")
    extra = {} if user is None else {"OPENBLAS_NUM_THREADS": user}
    assert _blas_run(code, **extra) == expected


def test_numpy_imported_after_the_setting_runs_one_blas_thread() -> None:
    code = ("from hogwild.base.startup import single_blas_thread\nsingle_blas_thread()\n"
            "import numpy\nfrom threadpoolctl import threadpool_info\n"
            "print(sorted({p['num_threads'] for p in threadpool_info() "
            "if p['internal_api'] == 'openblas'}))")
    assert _blas_run(code) == "[1]"


_KERNELS_LOADED = """
import json, sys
import numba
from hogwild import config
from hogwild.inprocess.local import train_job, warm_kernels
from hogwild.model import kernels, mlp_kernels

def loaded():
    return {f"{m.__name__}.{name}": sorted(str(sig) for sig in obj.overloads)
            for m in (kernels, mlp_kernels) for name, obj in vars(m).items()
            if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.overloads}

settings = config.load(flags=json.loads(sys.argv[1]))
warm_kernels(settings)
warmed = loaded()
train_job(settings, out=open("/dev/null", "w"))
print(json.dumps({"warmed": warmed, "job": loaded()}))
"""


@pytest.mark.parametrize("flags", [{}, {"model": "mlp", "hidden": [8]}, {"batch_size": 8},
                                   {"loss": "logistic", "threads": 1}])
def test_a_train_job_preloads_its_own_kernels_and_no_others(tmp_path: Path,
                                                          flags: dict[str, object]) -> None:
    """`hogwild train` loads, on a thread while it parses, the model kernels it will call
    (found by running its own trainer on four rows), and only those."""
    env = _env()
    args = {"threads": 2, "epochs": 2, "out_dir": str(tmp_path / "out"), "data_cache": False,
            **flags}
    # Twice, the first to fill numba's cache: from a cold cache the batch trainer's warm-up
    # compiled apply_gradient twice (its count typed as the literal 0 and as int64), where
    # the kernels loaded from the cache are the one variant a process keeps.
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _KERNELS_LOADED, json.dumps(args)],
                             check=False, capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # The job called no model kernel, and no variant of one, that the warm-up left out...
    assert seen["job"] == seen["warmed"]
    # ...and the warm-up loaded one training kernel: the job's own.
    mlp = flags.get("model") == "mlp"
    trainers = {"hogwild.model.mlp_kernels.mlp_sgd_range"} if mlp else {
        "hogwild.model.kernels.sgd_batch_range" if "batch_size" in flags
        else "hogwild.model.kernels.sgd_range"}
    assert {k for k in seen["warmed"] if "sgd" in k} == trainers
    assert all(len(sigs) == 1 for sigs in seen["warmed"].values()), seen["warmed"]
    assert not {"hogwild.model.kernels.build_delta", "hogwild.model.kernels.apply_delta"} \
        & set(seen["warmed"])


def test_a_training_command_outlives_its_stdout_reader(tmp_path: Path) -> None:
    """`hogwild train ... | head`: the reader is gone before the first progress line; the run
    still ends with exit 0 and its outputs, with one line on stderr saying so (it used to
    end on BrokenPipeError with a traceback and nothing written)."""
    data = tmp_path / "d.svm"
    data.write_text("".join(f"{1 if i % 2 else -1} {1 + i % 5}:1 {7 + i % 3}:0.5\n"
                            for i in range(200)))
    env = _env()
    read, write = os.pipe()
    os.close(read)  # nobody will ever read what the command prints
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hogwild.cli", "train", "--data", str(data), "--epochs", "3",
             "--out", str(tmp_path / "out"), "--data-cache", "false"],
            stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=300,
            check=False)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("standard output was closed (broken pipe)") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert (tmp_path / "out" / "latest" / "model.npz").is_file()
    assert json.loads((tmp_path / "out" / "latest" / "metrics.json").read_text())["epochs"] == 3


def test_a_printing_command_stops_quietly_when_its_reader_goes_away(tmp_path: Path) -> None:
    """`hogwild certs ... | head`: the reader is gone; the command stops as one killed by
    SIGPIPE would (exit 141), with no traceback (it used to end on BrokenPipeError's)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hogwild.cli", "certs", "--out", str(tmp_path / "certs"),
             "--hosts", "127.0.0.1"],
            stdout=write, stderr=subprocess.PIPE, text=True, env=_env(), timeout=120,
            check=False)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert (tmp_path / "certs" / "ca.crt").is_file()  # written before anything was printed
