"""Class labels as the user wrote them: parsed labels are float32, yet a model's classes, its
predictions and its metrics speak of 0.1, not of the float32 nearest to it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.formats.stream import load_text
from hogwild.data.formats.svmlight import parse_svmlight_buffer, read_svmlight
from hogwild.data.parts.ranges import plan_file
from hogwild.data.sources import load_source
from hogwild.data.transform.labelcheck import LabelWatch
from hogwild.data.transform.labels import LabelMap, as_written
from hogwild.model.saved import label_value


def test_float32_labels_give_the_classes_as_written() -> None:
    parsed = np.array([0.1, 0.2, 0.1, 0.25], dtype=np.float32)
    labels = LabelMap.fit(parsed, classifier=True, source="t")
    assert labels.classes == (0.1, 0.2, 0.25)
    assert labels.json_classes() == [0.1, 0.2, 0.25]
    assert labels.class_index(parsed, "t").tolist() == [0, 1, 0, 2]
    assert labels.decode(np.array([2.0, 0.0])).tolist() == [0.25, 0.1]
    # float64 labels (the estimators' own arrays) are compared as they are
    wide = LabelMap.fit(np.array([0.1, 0.3]), classifier=True, source="t")
    assert wide.class_index(np.array([0.3, 0.1]), "t").tolist() == [1, 0]
    assert as_written(parsed).tolist() == [0.1, 0.2, 0.1, 0.25]


def test_a_saved_float32_class_reads_back_as_written() -> None:
    # what models saved before this held for a label 0.1
    assert label_value(0.10000000149011612) == 0.1
    assert label_value(0.123456789) == 0.123456789  # not a float32 value: kept
    assert label_value(2.0) == 2 and isinstance(label_value(2.0), int)


def _train(data: Path, out: Path, *extra: str) -> int:
    """`hogwild train` on ``data`` (also its test set), 1 thread, no data cache."""
    return main(["train", "--data", str(data), "--test", str(data), "--threads", "1",
                 "--data-cache", "false", "--out", str(out), *extra], environ={})


def test_train_and_predict_with_decimal_labels(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.svm"
    data.write_text("0.1 1:1\n0.2 2:1\n0.1 1:1 3:0.5\n0.2 2:1 3:0.5\n" * 5)
    out = tmp_path / "out"
    assert _train(data, out, "--epochs", "3") == 0
    out = out / "latest"
    assert json.loads((out / "model.json").read_text())["classes"] == [0.1, 0.2]
    capsys.readouterr()
    predictions = tmp_path / "p.txt"
    assert main(["predict", "--model", str(out), "--data", str(data), "--out",
                 str(predictions), "--metrics"], environ={}) == 0
    assert "accuracy 1.0000" in capsys.readouterr().out
    assert predictions.read_text().split()[:4] == ["0.1", "0.2", "0.1", "0.2"]


# ----------------------------------------------------------------- labels float32 cannot keep

def test_the_watch_names_the_first_label_float32_changes() -> None:
    watch = LabelWatch()
    watch.add(np.array([1.0, -1.0, 0.5, 0.1, 0.1234567, 16_777_216.0]), 0)
    assert watch.note("f") is None  # small integers, up to 6-7 digits: kept as written
    # 100000010 is stored as 100000008, whose shortest decimal is 1.0000001e8: still the
    # value written; 100000001 becomes 1e8, which it is not.
    watch.add(np.array([3.0, 100_000_010.0, 100_000_001.0]), 6)
    assert watch.note("f") == ("f: data row 9: label 100000001 is stored as 100000000 "
                               "(32-bit float)")
    # real-valued targets: thousands of inexact values are looked at once, then no more
    targets = LabelWatch()
    rng = np.random.default_rng(0)
    for block in range(4):
        targets.add(rng.normal(size=5000), 5000 * block)
    assert targets.row is None or targets.row < 5000


def test_parsers_and_the_cache_carry_the_note(tmp_path: Path) -> None:
    path = tmp_path / "ids.svm"
    path.write_text("# product ids as classes\n5 1:1\n" * 300 + "100000001 2:1\n")
    for data in (read_svmlight(path, cache=False),
                 read_svmlight(path, cache=True, cache_dir=tmp_path / "c"),
                 read_svmlight(path, cache=True, cache_dir=tmp_path / "c"),  # from the cache
                 load_text(path, block_bytes=4096),  # several blocks
                 parse_svmlight_buffer(np.frombuffer(path.read_bytes(), dtype=np.uint8),
                                       source=str(path))):
        assert data.label_note == f"{path}: data row 301: label 100000001 is stored as " \
                                  "100000000 (32-bit float)"
    plan = plan_file(str(path), workers=1, seed=0, val_fraction=0.1, test_fraction=0.0,
                     zero_based=False, n_features=None, classifier=True)
    assert plan.label_note is not None and "label 100000001" in plan.label_note


def test_classes_float32_cannot_keep_are_refused_and_targets_are_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.svm"
    # Three classes that float32 would merge into two (100000000 and 100000008).
    data.write_text("100000001 1:1\n100000002 2:1\n100000010 3:1\n" * 10)
    assert _train(data, tmp_path / "out", "--epochs", "1") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{data}: data row 1: label 100000001 is stored as 100000000" \
        in err[0] and "renumber the classes" in err[0], err
    assert not (tmp_path / "out" / "latest").exists()
    assert _train(data, tmp_path / "out", "--epochs", "1", "--loss", "squared") == 0  # targets
    # A classifier trained elsewhere scores such rows, but measures nothing against them.
    good = tmp_path / "good.svm"
    good.write_text("1 1:1\n2 2:1\n" * 10)
    model = tmp_path / "m"
    assert _train(good, model, "--epochs", "1") == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(model / "latest"), "--data", str(data), "--metrics"],
                environ={}) == 0
    assert "cannot be told apart as written: no metrics" in capsys.readouterr().err


def test_csv_labels_float32_changes_are_refused_as_classes_and_noted_by_hash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "ids.csv"
    table.write_text("y,colour\n" + "100000001,red\n100000002,blue\n3,red\n" * 10)
    source = f"csv:{table}?label=y&categorical=colour"
    data = load_source(source, shuffle_seed=7)  # shuffled rows keep the note
    assert data.label_note == f"{table}: data row 1: label 100000001 is stored as 100000000 " \
                              "(32-bit float)"
    assert data.slice(0, 5).label_note == data.label_note
    assert _train_source(source, tmp_path / "out", "--epochs", "1") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "label 100000001 is stored as 100000000" in err[0] \
        and "renumber the classes" in err[0], err
    assert not (tmp_path / "out" / "latest").exists()
    assert _train_source(source, tmp_path / "out", "--epochs", "1", "--loss", "squared") == 0
    # `hash` writes the rows as held and says so; exact labels pass without a word.
    assert main(["hash", str(table), "--label", "y", "--categorical", "colour", "--out",
                 str(tmp_path / "h.svm")], environ={}) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "label 100000001 is stored as 100000000" in err, err
    small = tmp_path / "small.csv"
    small.write_text("y,colour\n" + "0,red\n1,blue\n" * 10)
    assert main(["hash", str(small), "--label", "y", "--categorical", "colour", "--out",
                 str(tmp_path / "s.svm")], environ={}) == 0
    assert "warning" not in capsys.readouterr().err


def _train_source(source: str, out: Path, *extra: str) -> int:
    return main(["train", "--data", source, "--threads", "1", "--data-cache", "false",
                 "--out", str(out), *extra], environ={})


def test_the_data_lines_name_two_classes_by_the_users_labels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.svm"
    data.write_text("0 1:1\n" * 30 + "5 2:1\n" * 10)
    test = tmp_path / "t.svm"
    test.write_text("0 1:1\n" * 4)
    assert main(["train", "--data", str(data), "--test", str(test), "--threads", "1",
                 "--epochs", "1", "--data-cache", "false", "--out", str(tmp_path / "out")],
                environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    # the labels are encoded -1/+1 for training; the data lines speak of 0 and 5
    assert any(line.strip().startswith("test 4 rows") and line.endswith("every label 0")
               for line in lines), lines


# ----------------------------------------------------------- feature ids too large for memory

def test_train_names_a_feature_id_whose_weights_cannot_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.engine.job
    import hogwild.engine.runstart

    data = tmp_path / "wide.svm"
    data.write_text("1 1:0.5\n-1 2:1\n" * 5 + "1 3000000:1\n")
    # A machine of 64 MiB: 3e6 ids x (8 bytes of weight + 16 of counts and renumbering).
    monkeypatch.setattr(hogwild.engine.job, "physical_memory", lambda: 64 << 20)
    argv = ["train", "--data", str(data), "--epochs", "1", "--threads", "1",
            "--data-cache", "false", "--out", str(tmp_path / "out")]
    assert main(argv, environ={}) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"hogwild train: error: {data}: the largest feature id is 3,000,000: the "
                   "weights and counts kept per feature id need 68.7 MiB, more than the 64.0 "
                   "MiB this machine allows; renumber the ids, or hash the columns into fewer "
                   "features (`hogwild hash`, `hash_bits`)")], err
    # Out of core the rows stream, but the per-id arrays do not.
    assert main([*argv, "--out-of-core", "true"], environ={}) == 1
    assert "the largest feature id is 3,000,000" in capsys.readouterr().err
    # Under a limit below the RAM (ulimit -v): the MemoryError is blamed on the ids.
    monkeypatch.setattr(hogwild.engine.job, "physical_memory", lambda: None)

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(hogwild.engine.runstart, "frequency_order", no_memory)
    assert main(argv, environ={}) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"hogwild train: error: {data}: the largest feature id is "
                              "3,000,000: the weights and counts kept per feature id need "
                              "68.7 MiB; renumber the ids"), err
