"""The `hogwild` command line: help, single-node training, data generation, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hogwild.cli import build_parser, main
from hogwild.data.sources import load_source
from hogwild.model.evaluation import evaluate
from hogwild.model.losses import get_loss
from hogwild.outputs import artifacts

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hogwild.cli", *args], capture_output=True,
                          text=True, timeout=240, cwd=cwd, check=False)


def test_help_lists_every_command() -> None:
    text = build_parser().format_help()
    for command in ("train", "run", "coordinator", "worker", "gen-data", "health"):
        assert command in text


def test_every_setting_has_a_flag() -> None:
    args = build_parser().parse_args(["worker", "--round-size", "7", "--advertise", "h:1",
                                      "--port", "9"])
    assert (args.setting_round_size, args.setting_advertise_address,
            args.setting_worker_port) == ("7", "h:1", "9")


def test_train_on_bundled_data_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("train", "--threads", "2", "--epochs", "4", "--out", str(out),
                   "--data-cache", "false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = artifacts.published(out)  # the run's own directory
    metrics = json.loads((out / artifacts.METRICS_FILE).read_text())
    assert {"test_accuracy", "test_loss", "epochs", "seconds"} <= set(metrics)
    assert metrics["test_accuracy"] >= 0.97
    assert 1 <= metrics["epochs"] <= 4
    w, meta = artifacts.load_model(out)
    assert w.shape == (meta["n_features"] + 1,)
    # Training renumbers features internally; the saved model speaks the file's feature ids.
    test = load_source("bundled:spamassassin/test", n_features=meta["n_features"])
    assert evaluate(test, w, get_loss("hinge")).accuracy == pytest.approx(
        metrics["test_accuracy"], abs=1e-12)
    history = (out / artifacts.HISTORY_FILE).read_text().splitlines()
    assert len(history) == metrics["epochs"] + 1  # epoch 0: the model before training
    assert (out / artifacts.PLOT_FILE).stat().st_size > 0
    # one progress row per epoch on stdout
    assert sum(1 for line in proc.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])) >= 2


def test_train_with_separate_test_file(tmp_path: Path) -> None:
    train = SHARED / "reuters21578_modapte_earn.train.libsvm.gz"
    test = SHARED / "reuters21578_modapte_earn.test.libsvm.gz"
    if not train.exists():
        pytest.skip(f"shared data set not present: {train}")
    out = tmp_path / "o"
    code = main(["train", "--data", str(train), "--test", str(test), "--epochs", "5",
                 "--threads", "2", "--out", str(out), "--data-cache", "false"], environ={})
    assert code == 0
    metrics = json.loads((artifacts.published(out) / artifacts.METRICS_FILE).read_text())
    assert metrics["test_rows"] == 3299
    assert metrics["test_accuracy"] >= 0.97


def test_malformed_data_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5 3:1\n-1 2:x\n")
    proc = run_cli("train", "--data", str(bad), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"{bad}:2" in lines[0]
    assert not artifacts.published(tmp_path / "o").exists()


def test_bad_setting_exits_2_naming_key(tmp_path: Path) -> None:
    proc = run_cli("train", "--threads", "zero", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'threads'" in proc.stderr
    env_bad = subprocess.run([sys.executable, "-m", "hogwild.cli", "train"], check=False,
                             capture_output=True,
                             text=True, timeout=60, cwd=tmp_path,
                             env={"PATH": "/usr/bin:/bin", "HOGWILD_EPOCS": "3"})
    assert env_bad.returncode == 2
    assert "HOGWILD_EPOCS" in env_bad.stderr


def test_gen_data_writes_train_and_test(tmp_path: Path) -> None:
    out = tmp_path / "syn.svm"
    code = main(["gen-data", "rcv1", "--rows", "300", "--test-rows", "100", "--out", str(out),
                 "--seed", "3"], environ={})
    assert code == 0
    assert len(out.read_text().splitlines()) == 300
    assert len((tmp_path / "syn.test.svm").read_text().splitlines()) == 100
    again = tmp_path / "again.svm"
    main(["gen-data", "rcv1", "--rows", "300", "--test-rows", "100", "--out", str(again),
          "--seed", "3"], environ={})
    assert again.read_bytes() == out.read_bytes()
