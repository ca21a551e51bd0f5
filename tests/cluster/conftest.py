"""Cluster fixtures: a process group per test that is always reaped, even on failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import Cluster


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    group = Cluster(tmp_path)
    try:
        yield group
    finally:
        group.reap()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(group.output())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
