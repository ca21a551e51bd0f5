"""predict, eval, hash, gen-data and analyze on bad output paths and unusable data: one line
on stderr, the usual exit codes, nothing on stdout that reads as success, nothing half-written."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.commands import predict
from hogwild.model.saved import SavedModel


def _one_line(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return captured.out, lines[0]


def _leftovers(*dirs: Path) -> list[str]:
    """Temp or probe files left in ``dirs``."""
    return [p.name for d in dirs for p in d.iterdir() if p.name.startswith(".")]


@pytest.fixture
def model_and_data(tmp_path: Path) -> tuple[Path, Path]:
    SavedModel(w=np.array([1.0, -1.0, 0.0]), loss="hinge").save(tmp_path / "m")
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n-1 2:1\n")
    return tmp_path / "m", data


def _not_called(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the work was done before the output path was checked")


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_predict_out_that_cannot_be_a_file_is_refused_before_scoring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        model_and_data: tuple[Path, Path], where: str) -> None:
    model, data = model_and_data
    if where == "a directory":
        out = tmp_path / "preds"
        out.mkdir()
        reason = "Is a directory"
    else:
        out = data / "preds.txt"
        reason = f"{str(data)!r} is not a directory"
    monkeypatch.setattr(predict, "score_file", _not_called)
    code = main(["predict", "--model", str(model), "--data", str(data), "--out", str(out)])
    stdout, err = _one_line(capsys)
    assert code == 2
    assert err == (f"hogwild predict: error: setting 'out': cannot create or write "
                   f"{str(out)!r}: {reason}")
    assert stdout == ""
    assert data.read_text() == "1 1:1\n-1 2:1\n"
    assert _leftovers(tmp_path) == []


def test_predict_out_in_missing_directories_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        model_and_data: tuple[Path, Path]) -> None:
    model, data = model_and_data
    out = tmp_path / "new" / "dir" / "preds.txt"
    assert main(["predict", "--model", str(model), "--data", str(data), "--out", str(out)]) == 0
    assert out.read_text().split() == ["1", "-1"]


def test_predict_failing_to_write_is_one_line_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        model_and_data: tuple[Path, Path]) -> None:
    model, data = model_and_data
    out = tmp_path / "preds.txt"

    def disk_full(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        yield b"1\n"
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(predict, "prediction_chunks", disk_full)
    code = main(["predict", "--model", str(model), "--data", str(data), "--out", str(out)])
    stdout, err = _one_line(capsys)
    assert code == 1
    assert err == f"hogwild predict: error: cannot write {out}: No space left on device"
    assert "scored" not in stdout
    assert not out.exists() and _leftovers(tmp_path) == []


def test_eval_that_fails_prints_nothing_on_stdout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        model_and_data: tuple[Path, Path]) -> None:
    model, _ = model_and_data
    unknown = tmp_path / "u.svm"
    unknown.write_text("3 1:1\n-1 2:1\n")
    empty = tmp_path / "empty.svm"
    empty.write_text("")
    for data, why in ((unknown, "not among the model's classes"), (empty, "no rows")):
        for extra in ([], ["--json"]):
            code = main(["eval", "--model", str(model), "--data", str(data), *extra])
            stdout, err = _one_line(capsys)
            assert code == 1
            assert err.startswith(f"hogwild eval: error: {data}: ") and why in err, err
            assert stdout == ""


def _csv(tmp_path: Path) -> Path:
    table = tmp_path / "t.csv"
    table.write_text("y,c\n1,a\n-1,b\n")
    return table


def test_hash_out_that_is_a_directory_is_refused_before_hashing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.commands.hash_csv

    table = _csv(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(hogwild.commands.hash_csv, "fit_hashing", _not_called)
    code = main(["hash", str(table), "--out", str(out), "--label", "y", "--categorical", "c"])
    stdout, err = _one_line(capsys)
    assert code == 2 and stdout == ""
    assert err == (f"hogwild hash: error: setting 'out': cannot create or write {str(out)!r}: "
                   "Is a directory")
    # The parameters file beside the rows is checked too, before either is written.
    params = tmp_path / "rows.svm.hashing.json"
    params.mkdir()
    code = main(["hash", str(table), "--out", str(tmp_path / "rows.svm"), "--label", "y",
                 "--categorical", "c"])
    stdout, err = _one_line(capsys)
    assert code == 2 and str(params) in err
    assert not (tmp_path / "rows.svm").exists() and _leftovers(tmp_path) == []


def test_hash_keeps_no_rows_whose_parameters_could_not_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from hogwild.base import atomic

    table = _csv(tmp_path)
    out = tmp_path / "rows.svm"

    def disk_full(path: str | Path, text: str) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "atomic_write_text", disk_full)
    code = main(["hash", str(table), "--out", str(out), "--label", "y", "--categorical", "c"])
    stdout, err = _one_line(capsys)
    assert code == 1 and stdout == ""
    assert err == (f"hogwild hash: error: cannot write {out}.hashing.json: No space left on "
                   "device")
    assert not out.exists() and _leftovers(tmp_path) == []


def test_hash_failing_to_write_the_rows_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.commands.hash_csv

    def disk_full(data: Any, path: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hogwild.commands.hash_csv, "write_svmlight", disk_full)
    out = tmp_path / "rows.svm"
    code = main(["hash", str(_csv(tmp_path)), "--out", str(out), "--label", "y",
                 "--categorical", "c"])
    stdout, err = _one_line(capsys)
    assert code == 1 and stdout == ""
    assert err == f"hogwild hash: error: cannot write {out}: No space left on device"
    assert not Path(f"{out}.hashing.json").exists()


def test_gen_data_out_that_cannot_be_written_is_refused_before_generating(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    code = main(["gen-data", "rcv1", "--rows", "10", "--out", str(out)])
    stdout, err = _one_line(capsys)
    assert code == 2 and stdout == ""
    assert err == (f"hogwild gen-data: error: setting 'out': cannot create or write "
                   f"{str(out)!r}: Is a directory")
    # The test twin is checked before the training file is written.
    twin = tmp_path / "d.test.svm"
    twin.mkdir()
    code = main(["gen-data", "rcv1", "--rows", "10", "--test-rows", "5",
                 "--out", str(tmp_path / "d.svm")])
    stdout, err = _one_line(capsys)
    assert code == 2 and str(twin) in err and stdout == ""
    assert not (tmp_path / "d.svm").exists() and _leftovers(tmp_path) == []


def test_gen_data_failing_to_write_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.data.formats.svmlight

    def disk_full(data: Any, path: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hogwild.data.formats.svmlight, "write_svmlight", disk_full)
    out = tmp_path / "d.svm"
    code = main(["gen-data", "seed000", "--rows", "10", "--features", "100", "--out", str(out)])
    stdout, err = _one_line(capsys)
    assert code == 1 and stdout == ""
    assert err == f"hogwild gen-data: error: cannot write {out}: No space left on device"


def test_gen_data_flags_that_do_not_fit_together_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d.svm"
    # 50 features cannot hold the default 60 non-zeros per row.
    code = main(["gen-data", "seed000", "--rows", "10", "--features", "50", "--out", str(out)])
    stdout, err = _one_line(capsys)
    assert code == 2 and stdout == ""
    assert err == ("hogwild gen-data: error: setting 'gen-data': need 1 <= min_nnz <= max_nnz "
                   "<= n_features, got 10, 60, 50")
    assert not out.exists()


def test_analyze_refuses_data_without_rows(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.svm"
    empty.write_text("# only a comment\n\n")
    code = main(["analyze", str(empty)])
    stdout, err = _one_line(capsys)
    assert code == 1 and stdout == ""
    assert err == f"hogwild analyze: error: {empty}: no rows, so no conflicts to analyse"


def test_analyze_names_a_feature_id_too_large_for_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.commands.analyze

    data = tmp_path / "wide.svm"
    data.write_text("1 1:0.5\n-1 2000000:1\n")
    # A machine of 16 MiB: the 2e6 ids need 24 bytes each, 45.8 MiB.
    monkeypatch.setattr(hogwild.commands.analyze, "physical_memory", lambda: 16 << 20)
    assert main(["analyze", str(data)]) == 1
    stdout, err = _one_line(capsys)
    assert stdout == ""
    assert err == (f"hogwild analyze: error: {data}: the largest feature id is 2,000,000: the "
                   "counts the analysis keeps per feature id need 45.8 MiB, more than the "
                   "16.0 MiB this machine allows; renumber the ids, or hash the columns into fewer "
                   "features (`hogwild hash`, `hash_bits`)")


def test_analyze_out_of_memory_under_a_limit_names_the_feature_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.commands.analyze

    def limit(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(hogwild.commands.analyze, "analyze_conflicts", limit)
    data = tmp_path / "wide.svm"
    data.write_text("1 1:0.5\n-1 2000000:1\n")
    assert main(["analyze", str(data)]) == 1
    _, err = _one_line(capsys)
    assert err.startswith(f"hogwild analyze: error: {data}: the largest feature id is "
                          "2,000,000: the counts the analysis keeps per feature id need 45.8 MiB;")
    # Ids no wider than the rows: the rows are what does not fit, said as before.
    data.write_text("1 1:0.5 2:1\n-1 1:1 2:1\n")
    assert main(["analyze", str(data)]) == 1
    _, err = _one_line(capsys)
    assert err.startswith("hogwild analyze: error: out of memory")
