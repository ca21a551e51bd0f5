"""Command-line spelling: switches, defaults in --help, no abbreviations; errors that name the
real problem; labels that match what is written."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from hogwild import config
from hogwild.cli import build_parser, main, settings_from_args
from hogwild.cluster.transport.certs import host_names
from hogwild.cluster.transport.certs import main as certs_main
from hogwild.commands.hash_csv import hash_command
from hogwild.data.sources import load_source
from hogwild.data.transform.encodings import HashOptions
from hogwild.outputs.console import duration


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_parser_refuses_abbreviations(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = _subparsers(parser)
    assert parser.allow_abbrev is False
    assert {name for name, sub in commands.items() if sub.allow_abbrev} == set()
    for argv in (["train", "--epoch", "3"], ["predict", "--model", "m", "--data", "d", "--thread", "2"],
                 ["hash", "x.csv", "--out", "o", "--lab", "y"], ["analyze", "d", "--thread", "2"]):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(argv)
        assert info.value.code == 2
        assert "unrecognized arguments: " + argv[-2] in capsys.readouterr().err


def test_help_shows_every_default() -> None:
    commands = _subparsers(build_parser())
    train = commands["train"].format_help()
    assert re.search(r"--fit-bias, --no-fit-bias\s+learn an intercept \(default: true\)", train)
    assert re.search(r"--lr-schedule .*\(default: inverse\)", " ".join(train.split()))
    flat = " ".join(train.split())
    for key in ("epochs", "learning_rate", "threads", "zero_based", "data_cache"):
        assert f"(default: {config.default_text(key)})" in flat, key
    analyze = " ".join(commands["analyze"].format_help().split())
    assert "threads per worker (default: 2)" in analyze
    assert "hash seed (default: 0)" in " ".join(commands["hash"].format_help().split())
    for name, sub in commands.items():
        text = sub.format_help()
        assert "default: None" not in text and "(default: )" not in text, name
        assert "FIT_BIAS" not in text and "ZERO_BASED" not in text, name


def test_boolean_settings_are_switches_and_take_the_old_values_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()

    def fit_bias(*argv: str) -> object:
        return parser.parse_args(["train", *argv]).setting_fit_bias

    assert fit_bias() is None  # not given: the file and HOGWILD_* decide
    assert fit_bias("--fit-bias") is True and fit_bias("--no-fit-bias") is False
    assert fit_bias("--fit-bias", "false") is False and fit_bias("--fit-bias=true") is True
    assert fit_bias("--fit-bias", "--epochs", "2") is True
    with pytest.raises(SystemExit):
        fit_bias("--fit-bias=maybe")
    assert "argument --fit-bias: expected true or false, got 'maybe'" in capsys.readouterr().err
    args = parser.parse_args(["train", "--no-fit-bias", "--data-cache", "false"])
    settings = settings_from_args(args, {"HOGWILD_FIT_BIAS": "true"})
    assert settings.fit_bias is False and settings.data_cache is False
    kept = settings_from_args(parser.parse_args(["train"]), {"HOGWILD_FIT_BIAS": "false"})
    assert kept.fit_bias is False


def test_zero_based_is_spelt_one_way_in_every_command() -> None:
    parser = build_parser()
    lines = {"train": (["train"], "setting_zero_based"),
             "analyze": (["analyze", "d.svm"], "zero_based"),
             "predict": (["predict", "--model", "m", "--data", "d"], "zero_based"),
             "eval": (["eval", "--model", "m", "--data", "d"], "zero_based")}
    for name, (argv, dest) in lines.items():
        assert getattr(parser.parse_args([*argv, "--zero-based"]), dest) is True, name
        assert getattr(parser.parse_args([*argv, "--no-zero-based"]), dest) is False, name
    # The earlier spellings still read: a bare switch before analyze's DATA, a value in predict.
    assert parser.parse_args(["analyze", "--zero-based", "d.svm"]).data == "d.svm"
    assert parser.parse_args([*lines["predict"][0], "--zero-based", "false"]).zero_based is False


def test_a_csv_file_read_as_svmlight_says_how_to_read_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "shop.csv"
    csv.write_text("price,colour,label\n3.5,red,1\n2.0,blue,0\n")
    assert main(["train", "--data", str(csv), "--no-data-cache", "--out",
                 str(tmp_path / "out")], environ={}) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{csv}:1: label is not a number" in err
    assert "looks like CSV/TSV" in err and "csv:FILE?label=COLUMN" in err
    # Real svmlight text with tab blanks and a bad token gets no such hint.
    svm = tmp_path / "bad.svm"
    svm.write_text("1\t3:1.0\t5:x\n")
    with pytest.raises(Exception, match="bad.svm:1") as info:
        load_source(str(svm), cache=False)
    assert "CSV" not in str(info.value)


def test_a_non_model_file_is_named_as_such(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"command": "train", "loss": "hinge", "n_features": 3}))
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n")
    for model in (metrics, data):
        assert main(["predict", "--model", str(model), "--data", str(data)], environ={}) == 1
        err = capsys.readouterr().err.strip()
        assert err == (f"hogwild predict: error: {model} is not a model file: a saved model "
                       "is a model.json with its model.npz beside it (give the run directory "
                       "or one of the two)")


def test_hash_prints_the_ids_it_writes(tmp_path: Path) -> None:
    csv = tmp_path / "shop.csv"
    csv.write_text("label,colour,price\n" + "".join(
        f"{i % 2},{('red', 'blue', 'green')[i % 3]},{i}.5\n" for i in range(30)))
    out = tmp_path / "shop.svm"
    printed = tmp_path / "printed.txt"
    with printed.open("w") as stream:
        hash_command(str(csv), str(out), HashOptions(label="label", categorical=("colour",)),
                     stream=stream)
    ranges = [tuple(map(int, m)) for m in
              re.findall(r"features (\d+)\.\.(\d+)", printed.read_text())]
    names = re.findall(r"^  (\w+): ", printed.read_text(), re.MULTILINE)
    assert names == ["colour", "price"]
    written = sorted({int(tok.split(":")[0]) for line in out.read_text().splitlines()
                      for tok in line.split()[1:]})
    assert ranges[0][0] == written[0] == 1
    assert ranges[-1][1] == written[-1]
    assert [i for lo, hi in ranges for i in range(lo, hi + 1)] == written


def test_certs_name_each_host_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert host_names(["localhost", "127.0.0.1"]) == ["localhost", "127.0.0.1"]
    assert host_names(["W0.example", "w0.example", "::1", "[::1]"]) == [
        "W0.example", "::1", "localhost", "127.0.0.1"]
    assert certs_main(str(tmp_path / "c"), "localhost,127.0.0.1,node-1", 1, False) == 0
    assert "names: localhost, 127.0.0.1, node-1)" in capsys.readouterr().out


def test_short_durations_keep_their_digits() -> None:
    assert duration(0.0034) == "3.4ms" and duration(0.00012) == "0.12ms"
    assert duration(0.01) == "0.01s" and duration(12.345) == "12.35s"


def test_the_launchers_command_lines_still_parse() -> None:
    from hogwild.cluster.localrun.launcher import setting_flags

    defaults = config.load()
    # Every switch the other way (metrics_tls on needs the TLS files it serves with: named,
    # never read here).
    flipped = config.load(flags={**{key: not getattr(defaults, key) for key in config.KEYS
                                    if config.is_switch(key)},
                                 "tls_ca": "ca.pem", "tls_cert": "c.pem", "tls_key": "k.pem"})
    parser = build_parser()
    for command in config.COMMANDS:
        args = parser.parse_args([command, *setting_flags(flipped, command)])
        back = settings_from_args(args, {})
        for key in config.KEYS:
            if config.used_by(key, command):
                assert getattr(back, key) == getattr(flipped, key), (command, key)


@pytest.mark.parametrize(("command", "flag"), [("inspect", "--model"), ("analyze", "--data")])
def test_the_path_is_a_positional_or_a_flag(command: str, flag: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`inspect --model X` and `analyze --data X` mean what `inspect X` and `analyze X` do
    (predict and eval spell them as flags); neither or both is a usage error that shows the
    subcommand's own usage."""
    parser = build_parser()
    dest = flag[2:]
    assert getattr(parser.parse_args([command, "runs/latest"]), dest) == "runs/latest"
    assert getattr(parser.parse_args([command, flag, "runs/latest"]), dest) == "runs/latest"
    for argv in ([command], [command, "a", flag, "b"]):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: hogwild {command} ") and flag in err, err


@pytest.mark.parametrize("argv", [["inspect", "m", "--modle", "x"], ["eval", "--bogus"],
                                  ["analyze", "d", "--thread", "2"], ["train", "--epoch", "3"]])
def test_a_subcommands_usage_error_shows_its_usage(argv: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: hogwild {argv[0]} "), err
    assert f"hogwild {argv[0]}: error:" in err
