"""The wheel built from the repository holds every module, the generated gRPC stubs and the version."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "hogwild"
# What a fresh clone has (the stubs under protocol/generated are not in git), so the build
# must make the stubs itself rather than pick up the ones this checkout generated.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "protos", "src")
NOT_IN_GIT = shutil.ignore_patterns("generated", "__pycache__", "*.pyc", "*.egg-info")


def _clean_copy(dest: Path) -> Path:
    dest.mkdir()
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=NOT_IN_GIT)
        else:
            shutil.copy2(source, dest / name)
    return dest


def _build_wheel(source: Path, out: Path) -> Path:
    # No build isolation: the test environment has setuptools and grpcio-tools, and the
    # test must not need the network.
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    wheels = list(out.glob("hogwild-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_from_a_clean_checkout_has_the_stubs_modules_and_version(tmp_path: Path) -> None:
    source = _clean_copy(tmp_path / "src")
    assert not (source / "src/hogwild/cluster/wire/generated").exists()
    wheel = _build_wheel(source, tmp_path / "dist")
    names = set(zipfile.ZipFile(wheel).namelist())

    for stub in ("hogwild_pb2.py", "hogwild_pb2_grpc.py"):
        assert f"hogwild/cluster/wire/generated/{stub}" in names, sorted(names)
    modules = {path.relative_to(PACKAGE.parent).as_posix() for path in PACKAGE.rglob("*.py")
               if "generated" not in path.parts and "__pycache__" not in path.parts}
    assert len(modules) > 50
    assert sorted(modules - names) == []
    assert "hogwild/py.typed" in names
    assert any(name.startswith("hogwild/data/bundled/") and name.endswith(".gz")
               for name in names)

    found = re.search(r'^version = "([^"]+)"$',
                      (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    assert found is not None
    version = found.group(1)
    assert wheel.name.startswith(f"hogwild-{version}-")
    metadata = zipfile.ZipFile(wheel).read(f"hogwild-{version}.dist-info/METADATA").decode()
    assert "Name: hogwild\n" in metadata and f"Version: {version}\n" in metadata
    entry_points = zipfile.ZipFile(wheel).read(
        f"hogwild-{version}.dist-info/entry_points.txt").decode()
    assert "hogwild = hogwild.cli:main" in entry_points
