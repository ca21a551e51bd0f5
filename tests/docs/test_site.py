"""The docs site builds with `mkdocs build --strict`, its generated pages are current, the README stays short."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hogwild import cli, config

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"

# Pages a reader must find on the site (the output paths of mkdocs' directory URLs).
KEY_PAGES = ("index.html", "concepts/how-a-run-works/index.html", "guides/quickstart/index.html",
             "guides/commands/index.html", "operations/docker/index.html",
             "operations/kubernetes/index.html", "operations/security/index.html",
             "operations/faults/index.html", "reference/settings/index.html",
             "reference/protocol/index.html", "reference/modules/index.html",
             "performance/index.html", "performance/history/index.html",
             "development/index.html")


def _generator() -> ModuleType:
    """docs/gen_pages.py, loaded from its file (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # Not -q: mkdocs counts warnings for --strict only when they are logged, so a quiet
    # build passes with broken links.
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(root / "mkdocs.yml"), "-d", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=120, check=False)


def test_site_builds_strict_with_the_key_pages(tmp_path: Path) -> None:
    done = _build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    missing = [page for page in KEY_PAGES if not (tmp_path / "site" / page).is_file()]
    assert not missing, missing
    settings = (tmp_path / "site" / "reference/settings/index.html").read_text(encoding="utf-8")
    assert [key for key in config.KEYS if f"<code>{key}</code>" not in settings] == []


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    # What makes the build above worth passing: a link to a page or an anchor that does not
    # exist is an error, not a warning lost in the output.
    for broken in ("[gone](concepts/no-such-page.md)", "[gone](development.md#no-such-anchor)"):
        root = tmp_path / broken[-12:].strip(")#.")
        shutil.copytree(DOCS, root / "docs")
        shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
        index = root / "docs" / "index.md"
        index.write_text(index.read_text(encoding="utf-8") + f"\n{broken}\n", encoding="utf-8")
        done = _build(root, root / "site")
        assert done.returncode != 0, broken
        assert "index.md" in done.stdout + done.stderr


def test_generated_pages_equal_the_generators_output() -> None:
    gen = _generator()
    stale = [page.relative_to(REPO).as_posix() for page, render in gen.PAGES.items()
             if not page.is_file() or page.read_text(encoding="utf-8") != render()]
    assert not stale, f"{stale}: run `.venv/bin/python docs/gen_pages.py`"


def test_settings_reference_documents_every_key_with_its_default() -> None:
    text = _generator().settings_markdown()
    for key in config.KEYS:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{key}`<br>")),
                   None)
        assert row is not None, key
        meaning = config.help_text(key).replace("|", "\\|")  # escaped in a table cell
        assert f"`HOGWILD_{key.upper()}`" in row and meaning[:40] in row, row
        assert f"| `{config.default_text(key)}` |" in row, row


def test_bench_history_carries_the_notes() -> None:
    notes = (REPO / "bench" / "NOTES.md").read_text(encoding="utf-8")
    history = _generator().history_markdown()
    assert notes.split("\n", 1)[1] in history


def test_check_mode_names_a_stale_page_and_writing_fixes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = _generator()
    page = tmp_path / "page.md"
    page.write_text("old\n")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "PAGES", {page: lambda: "new\n"})
    assert gen.main(["--check"]) == 1
    assert capsys.readouterr().err == "page.md: out of date; run `python docs/gen_pages.py`\n"
    assert page.read_text() == "old\n"
    assert gen.main([]) == 0 and page.read_text() == "new\n"
    assert gen.main(["--check"]) == 0


def _subcommands() -> list[str]:
    for action in cli.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    raise AssertionError("hogwild has no subcommands")


def test_readme_is_short_and_has_what_a_newcomer_needs() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    # .ci/run runs this command; the README says it.
    assert "./bootstrap-env.sh && .venv/bin/python -m pytest" in text
    assert "mkdocs serve" in text
    table = [line for line in text.splitlines() if line.startswith("| `hogwild ")]
    documented = {line.split()[2].rstrip("`") for line in table}
    assert sorted(set(_subcommands()) - documented) == []


def test_readme_links_to_docs_pages_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    assert len(links) > 20
    assert [link for link in links if not (REPO / link).is_file()] == []
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert [link for link in links if link.removeprefix("docs/") not in nav] == []
