"""`hogwild train` gives a right result or a clear error: labels, classes, divergence, widths."""

from __future__ import annotations

import errno
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.sources import load_source
from hogwild.model.evaluation import predict, scores
from hogwild.model.files import MODEL_FILE, MODEL_META_FILE
from hogwild.outputs import artifacts


def _relabel(tmp_path: Path, negative: float, positive: float) -> tuple[Path, Path]:
    """The bundled SpamAssassin train and test files with their -1/+1 labels renamed."""
    paths = []
    for part in ("train", "test"):
        data = load_source(f"bundled:spamassassin/{part}")
        labels = np.where(data.labels > 0, positive, negative).astype(np.float32)
        path = tmp_path / f"spam_{negative:g}_{positive:g}.{part}.svm"
        write_svmlight(replace(data, labels=labels), path)
        paths.append(path)
    return paths[0], paths[1]


def _train(out: Path, train: Path | str, test: Path | str, *extra: str) -> int:
    return main(["train", "--data", str(train), "--test", str(test), "--out", str(out),
                 "--threads", "1", "--epochs", "4", "--data-cache", "false", *extra], environ={})


def _file_accuracy(out: Path, test: Path) -> float:
    """Accuracy of the saved model on the test file, in the file's own labels."""
    w, meta = artifacts.load_model(out)
    data = load_source(str(test), n_features=meta["n_features"])
    low, high = meta["classes"]
    predicted = np.where(predict(data, w) >= 0.0, high, low)
    return float(np.mean(predicted == data.labels))


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
@pytest.mark.parametrize("labels", [(0.0, 1.0), (1.0, 2.0)])
def test_two_label_values_train_like_minus_one_plus_one(tmp_path: Path, loss: str,
                                                        labels: tuple[float, float]) -> None:
    assert _train(tmp_path / "ref", "bundled:spamassassin", "bundled:spamassassin/test",
                  "--loss", loss) == 0
    reference = artifacts.published(tmp_path / "ref")
    train, test = _relabel(tmp_path, *labels)
    assert _train(tmp_path / "out", train, test, "--loss", loss) == 0
    out = artifacts.published(tmp_path / "out")
    metrics = json.loads((out / artifacts.METRICS_FILE).read_text())
    ref_metrics = json.loads((reference / artifacts.METRICS_FILE).read_text())
    # One thread is deterministic: renaming the labels changes nothing in the model.
    assert np.array_equal(artifacts.load_model(out)[0], artifacts.load_model(reference)[0])
    assert metrics["test_accuracy"] == ref_metrics["test_accuracy"] >= 0.97
    meta = json.loads((out / MODEL_META_FILE).read_text())
    assert meta["task"] == "binary" and meta["classes"] == [int(v) for v in labels]
    assert meta["format_version"] == 2
    assert _file_accuracy(out, test) == pytest.approx(metrics["test_accuracy"], abs=1e-12)


def _three_classes(rows: int, seed: int) -> CSRData:
    """Three classes, each with its own 20 indicative features, 10 shared noise features per
    row and 10 % of the labels drawn at random: learnable, not trivially."""
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, 3, rows)
    own = cls[:, None] * 20 + np.sort(rng.choice(20, (rows, 4)), axis=1)
    noise = 60 + rng.integers(0, 140, (rows, 10))
    idx = np.concatenate([own, noise], axis=1)
    idx.sort(axis=1)
    keep = np.concatenate([np.ones((rows, 1), bool), idx[:, 1:] != idx[:, :-1]], axis=1)
    counts = keep.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = idx[keep].astype(np.int32)
    flip = rng.random(rows) < 0.1
    labels = np.where(flip, rng.integers(0, 3, rows), cls) + 1  # labels 1, 2, 3
    return CSRData(indptr, indices, np.ones(indices.shape[0], np.float32),
                   labels.astype(np.float32), 200)


def test_three_classes_train_one_vs_rest(tmp_path: Path) -> None:
    train, test = tmp_path / "mc.train.svm", tmp_path / "mc.test.svm"
    write_svmlight(_three_classes(3000, 0), train)
    write_svmlight(_three_classes(1000, 1), test)
    assert _train(tmp_path / "out", train, test, "--threads", "2") == 0
    out = artifacts.published(tmp_path / "out")
    metrics = json.loads((out / artifacts.METRICS_FILE).read_text())
    w, meta = artifacts.load_model(out)
    assert meta["task"] == "multiclass" and meta["classes"] == [1, 2, 3]
    assert meta["multiclass"] == "ovr" and w.shape == (3, meta["n_features"] + 1)
    # 10 % random labels: about 93 % is reachable; one class for all would be about 33 %.
    assert 0.85 <= metrics["test_accuracy"] <= 0.97
    assert 0.85 <= metrics["val_accuracy"]
    data = load_source(str(test), n_features=meta["n_features"])
    predicted = np.asarray(meta["classes"])[np.argmax(scores(data, w), axis=1)]
    assert float(np.mean(predicted == data.labels)) == pytest.approx(metrics["test_accuracy"],
                                                                     abs=1e-12)


def test_one_class_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = tmp_path / "one.svm"
    one.write_text("".join(f"1 {i % 7 + 1}:1\n" for i in range(60)))
    assert _train(tmp_path / "out", one, one) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{one}: every training label is 1" in err[0], err
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_divergence_is_an_error_and_saves_nothing(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["train", "--loss", "squared", "--learning-rate", "50", "--out", str(out),
                 "--data-cache", "false", "--epochs", "3"], environ={})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and "diverged" in err[0] and "smaller learning_rate" in err[0], err
    # Nothing published; the diverged run's history stays, in a directory marked incomplete.
    assert not artifacts.published(out).exists()
    (run,) = out.iterdir()
    assert run.name.endswith(artifacts.INCOMPLETE) and str(run) in err[0]
    assert not (run / MODEL_FILE).exists()
    assert not (run / artifacts.METRICS_FILE).exists()


def test_a_wider_test_file_is_warned_about(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    train = tmp_path / "narrow.svm"
    test = tmp_path / "wide.svm"
    rows = "".join(f"{1 if i % 2 else -1} {i % 5 + 1}:1 {6 + i % 2}:1\n" for i in range(200))
    train.write_text(rows)
    test.write_text(rows + "1 3:1 900:1\n")
    with caplog.at_level(logging.WARNING, logger="hogwild"):
        assert _train(tmp_path / "out", train, test) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("900 features" in m and "7" in m and str(test) in m for m in warnings), warnings


def test_outputs_that_cannot_be_written_are_one_line_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    # The disk fills up between the start (where out_dir is checked) and the end of training.
    def full(out_dir: str | Path, metrics: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(out_dir) / "metrics.json"))

    monkeypatch.setattr(artifacts, "write_metrics", full)
    out = tmp_path / "out"
    code = _train(out, "bundled:spamassassin/train", "bundled:spamassassin/test")
    err = capsys.readouterr().err
    assert code == 1
    (run,) = out.iterdir()  # this run's directory, never published
    assert (f"hogwild train: error: cannot write the outputs to {run} (No space left on device: "
            f"{run / 'metrics.json'}); this run's files are in {run}, left incomplete") in err
    assert run.name.endswith(artifacts.INCOMPLETE) and "Traceback" not in err


def test_epoch_rows_are_written_as_they_come_and_the_last_run_keeps_its_own(
        tmp_path: Path) -> None:
    from hogwild.config import Settings
    from hogwild.inprocess.local import train_job

    out = tmp_path / "out"
    earlier = artifacts.RunDir.create(out)
    before = '{"epoch": 1, "from": "the run before"}\n'
    (earlier.path / artifacts.HISTORY_FILE).write_text(before, encoding="utf-8")
    earlier.publish()
    latest = artifacts.published(out)
    seen: list[tuple[str, int]] = []

    class Console:
        """The job's progress output: at every epoch row, what the out_dir holds."""

        def write(self, text: str) -> int:
            if text.lstrip()[:1].isdigit():
                (part,) = out.glob(f"*{artifacts.INCOMPLETE}")  # this run's, being written
                seen.append(((latest / artifacts.HISTORY_FILE).read_text(encoding="utf-8"),
                             len((part / artifacts.HISTORY_FILE).read_text(
                                 encoding="utf-8").splitlines())))
            return len(text)

        def flush(self) -> None:
            pass

    settings = Settings(data="bundled:spamassassin/train", test_data="bundled:spamassassin/test",
                        threads=1, epochs=6, patience=0, data_cache=False, out_dir=str(out))
    from hogwild.outputs.console import VERBOSE, Verbosity
    from hogwild.outputs.console import Console as Printing

    # -v: every epoch's row is printed (by default they are thinned out).
    printing = Printing(Console(), Verbosity(VERBOSE))  # type: ignore[arg-type]
    metrics = train_job(settings, console=printing)
    # While it trained: the last run's metrics.jsonl untouched, this run's rows one per epoch.
    assert seen == [(before, k + 1) for k in range(1, 7)]  # after epoch 0's row
    rows = [json.loads(line) for line in
            (latest / artifacts.HISTORY_FILE).read_text(encoding="utf-8").splitlines()]
    assert [r["epoch"] for r in rows] == list(range(7)) == list(range(metrics["epochs"] + 1))
    assert (latest / "loss.png").is_file() and not list(out.glob(f"*{artifacts.INCOMPLETE}"))
    assert (earlier.final / artifacts.HISTORY_FILE).read_text(encoding="utf-8") == before
