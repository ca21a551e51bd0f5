"""The sample outputs of the README and the quick start are what the commands print: each
documented command is run (the cheap ones: `hogwild run` and `hogwild train` on the bundled
set) and its lines compared with the documented ones, timings, counts, ids and paths
masked. A printed line the sample leaves out fails, and so does a documented line that is no
longer printed (save the one line printed only when the best validated model is not the
last one)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
QUICKSTART = REPO / "docs" / "guides" / "quickstart.md"

# Printed only when the best validated model is not the last one (threads race: either).
# Lines that depend on the run or the machine: the saved model's, and the note of a run
# whose threads outnumber the machine's cores.
_CONDITIONAL = ("saved the best validated model", "saved the model of epoch",
                "take turns on the cores")
_MASKS = (
    # The done line's "(model of epoch E)": there when the saved model is not the last one.
    (re.compile(r" \(model of epoch [\d.]+\)"), ""),
    (re.compile(r"\d{8}-\d{6}-[0-9a-f]{12}"), "RUN"),  # a run directory's name
    (re.compile(r"\b[0-9a-f]{12}\b"), "ID"),  # a run id (its 12 hex digits may all be digits)
    # The stop reason: which of "workers finished" and "max epochs" a run that ends both
    # ways at once names is not what this test is about.
    (re.compile(r"done \([^)]*\)"), "done (REASON)"),
    # A duration under 0.01 s prints in ms (a fast machine trains the quick start in 8 ms).
    (re.compile(r"(?<=\d)ms\b"), "s"),
    (re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"), "N"),
)


def mask(line: str) -> str:
    for pattern, placeholder in _MASKS:
        line = pattern.sub(placeholder, line)
    return " ".join(line.split())


def sample_after(path: Path, command: str) -> list[str]:
    """The lines of the first fenced block (not a bash one) after the first block that
    runs ``command``."""
    text = path.read_text(encoding="utf-8")
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    for i, (kind, body) in enumerate(blocks):
        if kind == "bash" and command in body:
            output = next(b for k, b in blocks[i + 1:] if k != "bash")
            return [line for line in output.splitlines() if line.strip()]
    raise AssertionError(f"{path.name} shows no `{command}`")


def printed(tmp_path: Path, *argv: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOGWILD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                      env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "hogwild.cli", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def check(sample: list[str], lines: list[str], where: str) -> None:
    documented = {mask(line) for line in sample}
    seen = [mask(line) for line in lines]
    undocumented = [line for line, m in zip(lines, seen) if m not in documented
                    and not any(word in line for word in _CONDITIONAL)]
    assert not undocumented, f"{where} leaves out printed lines: {undocumented}"
    missing = [line for line in sample if mask(line) not in seen
               and not any(word in line for word in _CONDITIONAL)]
    assert not missing, f"{where} shows lines no longer printed: {missing}\nprinted: {lines}"


def test_masking_keeps_the_words_and_hides_the_figures() -> None:
    assert mask("[coordinator]    0.24s     40      43520   10.00") == "[coordinator] Ns N N N"
    assert mask("run 91f9a3b3d539: waiting for 2 worker(s)") == "run ID: waiting for N worker(s)"
    assert (mask("done (max epochs): outputs in runs/20261127-074544-91f9a3b3d539")
            == "done (REASON): outputs in runs/RUN")
    assert mask("run 253597364653: waiting") == "run ID: waiting"
    assert mask("validation 484 rows") != mask("test 484 rows")
    assert (mask("done (max epochs): 10 epochs (model of epoch 8) in 0.05s")
            == mask("done (max epochs): 10 epochs in 0.05s"))


@pytest.mark.timeout(150)
def test_run_prints_what_the_readme_and_the_quick_start_show(tmp_path: Path) -> None:
    lines = printed(tmp_path, "run")
    for page in (README, QUICKSTART):
        check(sample_after(page, ".venv/bin/hogwild run"), lines, page.name)


@pytest.mark.timeout(150)
def test_train_prints_what_the_quick_start_shows(tmp_path: Path) -> None:
    lines = printed(tmp_path, "train")
    check(sample_after(QUICKSTART, ".venv/bin/hogwild train"), lines, QUICKSTART.name)
