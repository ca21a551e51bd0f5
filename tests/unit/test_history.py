"""A run's evaluation history: every row in metrics.jsonl, a bounded copy in memory,
rows that wait while the disk is full, and a resumed run's file cut after the checkpoint."""

from __future__ import annotations

import errno
import itertools
import json
from pathlib import Path
from typing import Any, Self

import pytest

from hogwild.outputs import artifacts
from hogwild.outputs.history import EvalHistory, ReadBack, Thinned, read_back


def _row(i: int) -> dict[str, Any]:
    return {"elapsed": 0.25 * i, "round": i, "val_loss": 1.0 / (i + 1)}


def _file_rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in
            (out / artifacts.HISTORY_FILE).read_text(encoding="utf-8").splitlines()]


def test_the_copy_in_memory_is_bounded_evenly_spaced_and_ends_with_the_newest_row() -> None:
    thinned = Thinned(cap=64)
    for i in range(10_000):
        thinned.add(_row(i))
    kept = [r["round"] for r in thinned.rows()]
    assert thinned.count == 10_000
    assert len(kept) <= 65 and len(kept) > 32
    assert kept[0] == 0 and kept[-1] == 9_999
    gaps = {b - a for a, b in itertools.pairwise(kept[:-1])}
    assert gaps == {thinned.stride}  # evenly spaced up to the newest row
    assert thinned.best_val_loss == pytest.approx(1.0 / 10_000)


def test_a_short_history_is_kept_whole() -> None:
    thinned = Thinned(cap=64)
    for i in range(50):
        thinned.add(_row(i))
    assert thinned.rows() == [_row(i) for i in range(50)]


def test_not_finite_or_missing_losses_are_not_the_best() -> None:
    thinned = Thinned()
    for loss in (None, float("nan"), 0.7, float("inf"), 0.9):
        thinned.add({"elapsed": 0.0, "val_loss": loss})
    assert thinned.best_val_loss == 0.7


def test_every_row_goes_to_the_file_while_memory_keeps_few(tmp_path: Path) -> None:
    history = EvalHistory(tmp_path, cap=16)
    history.begin()
    for i in range(1_000):
        history.add(_row(i))
    assert _file_rows(tmp_path) == [_row(i) for i in range(1_000)]
    assert history.count == history.written == 1_000 and not history.waiting
    assert len(history.rows.rows()) <= 17


class FullDisk:
    """While ``on``, every append to a file writes the first 5 bytes asked, then fails as a
    full disk does (ENOSPC)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = True
        real_open = open

        def fake_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            handle = real_open(path, mode, *args, **kwargs)
            return _HalfWriter(handle) if self.on and "a" in mode else handle

        monkeypatch.setattr("builtins.open", fake_open)


class _HalfWriter:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def write(self, data: bytes) -> int:
        self.handle.write(data[:5])
        self.handle.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def test_rows_wait_while_the_disk_is_full_and_a_cut_line_is_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    history = EvalHistory(tmp_path)
    history.begin()
    history.add(_row(0))
    disk = FullDisk(monkeypatch)
    with caplog.at_level("INFO", logger="hogwild.outputs.history"):
        for i in range(1, 4):
            history.add(_row(i))
        assert history.waiting and history.written == 1 and history.error is not None
        assert history.waiting == 3
        assert not history.catch_up()
        disk.on = False
        assert history.catch_up()
    assert _file_rows(tmp_path) == [_row(i) for i in range(4)]  # no half row left behind
    assert history.written == 4 and history.error is None and not history.waiting
    assert caplog.text.count("cannot add to") == 1  # said once, not per row
    assert "metrics.jsonl is whole again (4 rows)" in caplog.text


def test_rows_waiting_past_the_bound_are_dropped_oldest_first_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    history = EvalHistory(tmp_path, pending_limit=3)
    history.begin()
    disk = FullDisk(monkeypatch)
    with caplog.at_level("INFO", logger="hogwild.outputs.history"):
        for i in range(5):
            history.add(_row(i))
        assert history.lost == 2 and history.waiting
        assert "more than 3 evaluations wait to be written" in caplog.text
        disk.on = False
        assert history.catch_up()
    assert _file_rows(tmp_path) == [_row(i) for i in range(2, 5)]
    assert history.count == 5 and history.written == 3
    assert "2 evaluations dropped meanwhile" in caplog.text


def test_a_resumed_run_cuts_the_file_after_the_checkpoints_rows_and_goes_on(
        tmp_path: Path) -> None:
    rows = [_row(i) for i in range(5)]
    artifacts.write_history(tmp_path, rows)
    back, problem = read_back(tmp_path / artifacts.HISTORY_FILE, 3, lambda row: True)
    assert problem == "" and back.count == 3
    history = EvalHistory(tmp_path)
    history.begin(back)  # rows 3 and 4 were evaluated after the checkpoint: they go
    history.add(_row(9))
    assert _file_rows(tmp_path) == [*rows[:3], _row(9)]
    assert history.count == 4 and history.written == 4
    assert [r["round"] for r in history.rows.rows()] == [0, 1, 2, 9]


def test_a_version_1_resume_writes_its_inline_rows(tmp_path: Path) -> None:
    (tmp_path / artifacts.HISTORY_FILE).write_text("whatever was there\n", encoding="utf-8")
    history = EvalHistory(tmp_path)
    history.begin(ReadBack.of_rows([_row(0), _row(1)]))
    history.add(_row(2))
    assert _file_rows(tmp_path) == [_row(0), _row(1), _row(2)]


def test_reading_back_stops_at_a_row_without_its_line_end(tmp_path: Path) -> None:
    # A whole row whose newline was lost: taken, the next append would join its line.
    path = tmp_path / artifacts.HISTORY_FILE
    path.write_text(json.dumps(_row(0)) + "\n" + json.dumps(_row(1)), encoding="utf-8")
    back, problem = read_back(path, 2, lambda row: True)
    assert back.count == 1 and problem == "line 2 is cut short"
    assert back.end == len(json.dumps(_row(0))) + 1


def test_reading_back_stops_at_a_line_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / artifacts.HISTORY_FILE
    path.write_text(json.dumps(_row(0)) + "\n{half a row\n" + json.dumps(_row(2)) + "\n",
                    encoding="utf-8")
    back, problem = read_back(path, 3, lambda row: True)
    assert back.count == 1 and problem == "line 2 is not JSON"


def test_a_file_removed_while_the_disk_was_full_is_started_again_not_padded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    history = EvalHistory(tmp_path)
    history.begin()
    history.add(_row(0))
    disk = FullDisk(monkeypatch)
    history.add(_row(1))
    (tmp_path / artifacts.HISTORY_FILE).unlink()  # an operator freeing room
    disk.on = False
    assert history.catch_up()
    assert _file_rows(tmp_path) == [_row(1)]  # no NUL bytes where row 0 was
