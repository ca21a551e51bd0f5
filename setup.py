"""setuptools hook: generate the gRPC stubs from protos/ into every non-editable build."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _stubs_module():  # type: ignore[no-untyped-def]
    # Loaded by path: hogwild itself (and its dependencies) is not importable at build time.
    path = ROOT / "src" / "hogwild" / "cluster" / "wire" / "_stubs.py"
    spec = importlib.util.spec_from_file_location("_hogwild_stubs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStubs(build_py):
    """build_py that also runs protoc on protos/hogwild/v1/hogwild.proto."""

    def run(self) -> None:
        super().run()
        stubs = _stubs_module()
        out = Path(self.build_lib) / "hogwild" / "cluster" / "wire" / "generated"
        stubs.generate(out, protos_root=ROOT / "protos", force=True)


setup(cmdclass={"build_py": BuildPyWithStubs})
