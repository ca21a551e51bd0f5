"""Messages and help texts that send the reader to the documentation name pages that exist."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "src" / "hogwild").rglob("*.py"))
# The README is the short newcomer page: a pointer into it ("see X in the README") finds
# nothing once X moved to a page of the site.
README_POINTER = re.compile(r"\b(see|in) (the )?README\b|\bREADME\)|\(see README", re.IGNORECASE)
DOCS_POINTER = re.compile(r"docs/[\w./-]+\.md")


def test_source_has_no_pointer_into_the_readme() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in SOURCES
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if README_POINTER.search(line)]
    assert found == []


def test_docs_pages_named_in_the_source_exist() -> None:
    named = {(path.relative_to(REPO).as_posix(), page) for path in SOURCES
             for page in DOCS_POINTER.findall(path.read_text(encoding="utf-8"))}
    # The CSV hint of the svmlight reader and the MLP's deep_lr_scale help name their pages.
    assert {page for _, page in named} >= {"docs/guides/hashing.md", "docs/guides/mlp.md"}
    assert sorted((source, page) for source, page in named if not (REPO / page).is_file()) == []
