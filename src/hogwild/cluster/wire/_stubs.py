"""Stub generation from protos/ into hogwild/cluster/wire/generated (stdlib + grpc_tools only).

Called by ``python -m hogwild.cluster.wire.build``, by ``setup.py``'s build_py hook and by the
import-time freshness check in ``hogwild.cluster.wire``. This module must stay importable on its
own: setup.py loads it by path, before hogwild is installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PROTO_REL = Path("hogwild") / "v1" / "hogwild.proto"
GENERATED_PACKAGE = "hogwild.cluster.wire.generated"
HASH_FILE = "PROTO_SHA256.txt"
PROTO_COPY = "hogwild.proto.txt"
MODULES = ("hogwild_pb2.py", "hogwild_pb2.pyi", "hogwild_pb2_grpc.py")

_HERE = Path(__file__).resolve().parent
DEFAULT_OUT = _HERE / "generated"
# src/hogwild/cluster/wire/build.py -> repository root is three levels above src/hogwild/protocol.
_REPO_PROTOS = _HERE.parents[3] / "protos"


class BuildError(RuntimeError):
    """The stubs could not be generated (grpc_tools missing, protoc failed, dir not writable)."""


def proto_source(protos_root: Path | None = None) -> Path | None:
    """The .proto file in the source tree, or None when running from an installed wheel."""
    root = protos_root if protos_root is not None else _REPO_PROTOS
    path = root / PROTO_REL
    return path if path.is_file() else None


def proto_hash(path: Path) -> str:
    """sha256 of the .proto text plus the generator version: what the stubs were built from."""
    digest = hashlib.sha256(path.read_bytes())
    digest.update(_generator_version().encode())
    return digest.hexdigest()


def _generator_version() -> str:
    try:
        from grpc_tools import grpc_version

        return str(grpc_version.VERSION)
    except ImportError:
        return "unknown"


def stored_hash(out_dir: Path = DEFAULT_OUT) -> str | None:
    """The hash recorded by the last generation into ``out_dir`` (None if never generated)."""
    try:
        return (out_dir / HASH_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def is_fresh(out_dir: Path = DEFAULT_OUT, protos_root: Path | None = None) -> bool:
    """True if every stub exists and was generated from the current .proto (if we have it)."""
    if not all((out_dir / name).is_file() for name in MODULES + ("__init__.py",)):
        return False
    source = proto_source(protos_root)
    if source is None:  # installed package: the shipped stubs are all there is
        return stored_hash(out_dir) is not None
    return stored_hash(out_dir) == proto_hash(source)


# protoc writes `from hogwild.v1 import hogwild_pb2 as ...` (the -I layout); inside the package
# the module lives at hogwild.cluster.wire.generated.hogwild_pb2.
_IMPORT_RE = re.compile(r"^from hogwild\.v1 import hogwild_pb2 as (\w+)$", re.MULTILINE)


def _fix_imports(text: str) -> str:
    fixed, count = _IMPORT_RE.subn(rf"from {GENERATED_PACKAGE} import hogwild_pb2 as \1", text)
    if count != 1:
        raise BuildError("unexpected import layout in the generated gRPC module")
    return fixed


def _fix_module_name(text: str) -> str:
    """Messages record the module they live in (their __module__); name the real one."""
    old = "'hogwild.v1.hogwild_pb2'"
    if text.count(old) != 1:
        raise BuildError("unexpected module name in the generated message module")
    return text.replace(old, f"'{GENERATED_PACKAGE}.hogwild_pb2'")


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """An exclusive lock so that processes starting together do not generate at once."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def generate(out_dir: Path = DEFAULT_OUT, protos_root: Path | None = None,
             force: bool = False) -> Path:
    """Run protoc on hogwild.proto and install the stubs in ``out_dir``; returns ``out_dir``.

    Files are written to a temp dir and renamed into place, the hash file last, so a reader
    never sees a half-generated package.
    """
    root = (protos_root if protos_root is not None else _REPO_PROTOS).resolve()
    out_dir = out_dir.resolve()  # protoc runs from another working directory
    source = proto_source(root)
    if source is None:
        raise BuildError(f"cannot find {PROTO_REL} under {root}")
    try:
        from grpc_tools import protoc
    except ImportError as exc:
        raise BuildError(f"grpcio-tools is needed to generate the stubs: {exc}") from None
    try:
        with _locked(out_dir):
            if not force and is_fresh(out_dir, root):
                return out_dir
            with tempfile.TemporaryDirectory(dir=out_dir, prefix=".gen-") as tmp:
                tmp_path = Path(tmp)
                include = str(Path(protoc.__file__).resolve().parent / "_proto")
                args = ["grpc_tools.protoc", f"-I{root}", f"-I{include}",
                        f"--python_out={tmp}", f"--pyi_out={tmp}",
                        f"--grpc_python_out={tmp}", str(PROTO_REL)]
                cwd = os.getcwd()
                try:
                    # protoc resolves the input path against -I; run from the root so the
                    # descriptor records the file as hogwild/v1/hogwild.proto.
                    os.chdir(root)
                    code = protoc.main(args)
                finally:
                    os.chdir(cwd)
                if code != 0:
                    raise BuildError(f"protoc failed with exit code {code} on {source}")
                produced = tmp_path / "hogwild" / "v1"
                grpc_module = produced / "hogwild_pb2_grpc.py"
                grpc_module.write_text(_fix_imports(grpc_module.read_text(encoding="utf-8")),
                                       encoding="utf-8")
                pb_module = produced / "hogwild_pb2.py"
                pb_module.write_text(_fix_module_name(pb_module.read_text(encoding="utf-8")),
                                     encoding="utf-8")
                (tmp_path / "__init__.py").write_text(
                    '"""Stubs generated from protos/hogwild/v1/hogwild.proto; never edit."""\n',
                    encoding="utf-8")
                shutil.copyfile(source, tmp_path / PROTO_COPY)
                for name in MODULES:
                    os.replace(produced / name, out_dir / name)
                for name in ("__init__.py", PROTO_COPY):
                    os.replace(tmp_path / name, out_dir / name)
                (tmp_path / HASH_FILE).write_text(proto_hash(source) + "\n", encoding="utf-8")
                os.replace(tmp_path / HASH_FILE, out_dir / HASH_FILE)
    except OSError as exc:
        raise BuildError(f"cannot write the generated stubs to {out_dir}: {exc}") from None
    return out_dir
