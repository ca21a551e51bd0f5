"""Every run in a directory of its own under the runs root (out_dir), published whole as
``latest`` or not at all: history kept, a failed run changes nothing that was published."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from hogwild.cli import main
from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.config import Settings
from hogwild.errors import ConfigError, OutputError
from hogwild.outputs import artifacts

TRAIN = "bundled:spamassassin/train"
TEST = "bundled:spamassassin/test"
RUN_FILES = {"model.npz", "model.json", "metrics.json", "metrics.jsonl", "loss.png"}


def _train(root: Path, *extra: str) -> int:
    return main(["train", "--data", TRAIN, "--test", TEST, "--out", str(root), "--threads", "1",
                 "--epochs", "2", "--data-cache", "false", *extra], environ={})


def _runs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != artifacts.LATEST)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_two_runs_into_one_root_keep_both_and_latest_names_the_second(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    assert _train(root) == 0
    first = capsys.readouterr().out
    assert _train(root, "--learning-rate", "0.05") == 0
    second = capsys.readouterr().out
    names = _runs(root)
    assert len(names) == 2 and not any(n.endswith(artifacts.INCOMPLETE) for n in names)
    for name in names:
        assert {p.name for p in (root / name).iterdir()} == RUN_FILES
    # Two runs in the same second sort by their random ids: which is which, the done lines say.
    if second.strip().splitlines()[-1].endswith(f"outputs in {root / names[0]}"):
        names.reverse()
    # latest is a relative link (the root may be mounted elsewhere) to the second run.
    assert os.readlink(root / artifacts.LATEST) == names[1]
    settings = json.loads((root / "latest" / "model.json").read_text())["settings"]
    assert settings["learning_rate"] == 0.05 and settings["out_dir"] == str(root)
    # Each done line names the run's own directory.
    assert first.strip().splitlines()[-1].endswith(f"outputs in {root / names[0]}")
    assert second.strip().splitlines()[-1].endswith(f"outputs in {root / names[1]}")


def test_predict_reads_the_model_through_latest(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    assert _train(root) == 0
    reported = json.loads((root / "latest" / "metrics.json").read_text())
    capsys.readouterr()
    preds = tmp_path / "preds.txt"
    assert main(["predict", "--model", str(root / "latest"), "--data", TEST,
                 "--out", str(preds)], environ={}) == 0
    said = capsys.readouterr().out
    assert f"accuracy {reported['test_accuracy']:.4f}" in said and preds.is_file()


def test_outputs_that_fail_leave_latest_and_the_run_before_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    assert _train(root) == 0
    (before,) = _runs(root)
    kept = _snapshot(root / before)
    capsys.readouterr()

    # The disk fills once the model is written: metrics.json finds no room.
    def full(out_dir: str | Path, metrics: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(out_dir) / "metrics.json"))

    monkeypatch.setattr(artifacts, "write_metrics", full)
    assert _train(root) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert os.readlink(root / artifacts.LATEST) == before
    assert _snapshot(root / before) == kept
    (failed,) = [n for n in _runs(root) if n != before]
    # Half a run (its model, no metrics.json) never looks complete: its name says so, and
    # the error's one line says where it is.
    assert failed.endswith(artifacts.INCOMPLETE)
    assert (root / failed / "model.npz").exists() and not (root / failed / "metrics.json").exists()
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert (f"this run's files are in {root / failed}, left incomplete "
            f"({root / 'latest'} still names the last complete run)") in err[0]



def test_a_disk_that_fills_during_training_publishes_nothing(
        small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real full disk (ENOSPC from the kernel), filled once the second run trains."""
    from hogwild.inprocess.local import train_job

    root = small_disk / "runs"
    assert _train(root) == 0
    (before,) = _runs(root)
    kept = _snapshot(root / before)
    filler = small_disk / "filler"

    class Console:
        """The job's progress output: the disk is filled at the first epoch row."""

        def write(self, text: str) -> int:
            if text.lstrip()[:1].isdigit() and not filler.exists():
                with open(filler, "wb", buffering=0) as handle:
                    try:
                        while True:
                            handle.write(b"\0" * 65536)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
            return len(text)

        def flush(self) -> None:
            pass

    settings = Settings(data=TRAIN, test_data=TEST, threads=1, epochs=3, patience=0,
                        data_cache=False, out_dir=str(root))
    with pytest.raises(OutputError, match="No space left on device") as failure:
        train_job(settings, out=Console())  # type: ignore[arg-type]
    assert os.readlink(root / artifacts.LATEST) == before
    assert _snapshot(root / before) == kept
    (failed,) = [n for n in _runs(root) if n != before]
    assert failed.endswith(artifacts.INCOMPLETE) and str(root / failed) in str(failure.value)


def test_a_run_that_fails_before_writing_leaves_no_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = tmp_path / "one.svm"
    one.write_text("".join(f"1 {i % 7 + 1}:1\n" for i in range(60)))
    root = tmp_path / "runs"
    assert main(["train", "--data", str(one), "--test", str(one), "--out", str(root),
                 "--data-cache", "false"], environ={}) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every training label is 1" in err[0] and "incomplete" not in err[0]
    assert list(root.iterdir()) == []


def test_out_dir_naming_the_latest_link_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = artifacts.RunDir.create(root)
    run.publish()
    with pytest.raises(ConfigError, match=r"setting 'out_dir': .*latest' is the link to the last "
                                          r"published run; give the runs directory it is in"):
        artifacts.check_runs_root(root / "latest")


def test_a_directory_of_outputs_of_an_earlier_version_is_kept_as_a_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "latest").mkdir(parents=True)
    (root / "latest" / "metrics.json").write_text("{}")
    run = artifacts.RunDir.create(root)
    (run.path / "metrics.json").write_text('{"new": 1}')
    final = run.publish()
    assert (root / "latest").is_symlink() and (root / "latest").resolve() == final.resolve()
    (earlier,) = [p for p in root.iterdir() if p.name.endswith("-earlier")]
    assert (earlier / "metrics.json").read_text() == "{}"


def _checkpointed(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / checkpoint_file.CHECKPOINT_FILE).write_bytes(b"x")
    return path


def test_resume_of_a_runs_root_finds_its_newest_checkpointed_incomplete_run(
        tmp_path: Path) -> None:
    root = tmp_path / "runs"
    assert checkpoint_file.locate(root) is None  # no root yet: a new run
    _checkpointed(root / f"20250101-000000-aaa{artifacts.INCOMPLETE}")
    newest = _checkpointed(root / f"20250102-000000-bbb{artifacts.INCOMPLETE}")
    (root / f"20250103-000000-ccc{artifacts.INCOMPLETE}").mkdir()  # no checkpoint: skipped
    (root / "20250104-000000-ddd").mkdir()  # published: done
    assert checkpoint_file.locate(root) == newest
    exact = root / f"20250101-000000-aaa{artifacts.INCOMPLETE}"
    assert checkpoint_file.locate(exact) == exact


def test_a_published_run_holds_no_lock_file_and_an_abandoned_empty_one_is_removed(
        tmp_path: Path) -> None:
    root = tmp_path / "runs"
    with artifacts.run_held(artifacts.RunDir.create(root), "train") as run:
        artifacts.write_metrics(run.path, {"a": 1})
        final = run.publish()
    assert sorted(p.name for p in final.iterdir()) == ["metrics.json"]
    with artifacts.run_held(artifacts.RunDir.create(root), "train") as empty:
        pass  # returned without publishing, nothing written
    assert not empty.path.exists() and _runs(root) == [final.name]
