"""Start-up: the command and the launcher import no heavy library before they need it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("numba", "grpc", "matplotlib")


def loaded_after(code: str) -> list[str]:
    """The heavy modules present in sys.modules after running ``code`` in a fresh Python."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["hogwild.cli", "hogwild.launcher", "hogwild.plotter",
                                    "hogwild.config", "hogwild.announce"])
def test_light_modules_import_nothing_heavy(module: str) -> None:
    assert loaded_after(f"import {module}") == []


def test_version_imports_nothing_heavy() -> None:
    code = ("import contextlib, io\nfrom hogwild.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n        main(['--version'])\n    except SystemExit:\n        pass\n"
            "assert out.getvalue().startswith('hogwild '), out.getvalue()")
    assert loaded_after(code) == []


def test_data_layer_never_imports_grpc_or_matplotlib() -> None:
    assert loaded_after("import hogwild.data, hogwild.data.stream, hogwild.local") == ["numba"]
