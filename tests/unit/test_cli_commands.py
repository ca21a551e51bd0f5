"""Per-command settings: --help shows only what a command uses; ignored settings are named."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from hogwild import config
from hogwild.cli import build_parser, ignored_flags, main
from hogwild.cluster.localrun.launcher import setting_flags


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    raise AssertionError("no subcommands")


@pytest.mark.parametrize("command", config.COMMANDS)
def test_help_lists_exactly_the_settings_the_command_uses(command: str) -> None:
    text = _subparser(command).format_help()
    for key in config.KEYS:
        flag = f"--{key.replace('_', '-')} "
        assert (flag in text) == config.used_by(key, command), (command, key)


def test_help_sizes_differ_per_command() -> None:
    shown = {c: sum(config.used_by(k, c) for k in config.KEYS) for c in config.COMMANDS}
    assert shown["worker"] < shown["train"] < len(config.KEYS)
    assert config.used_by("trainer", "train") and not config.used_by("trainer", "run")
    assert not config.used_by("staleness", "train")


def test_a_field_without_commands_is_used_everywhere() -> None:
    assert config.commands("log_level") == config.COMMANDS


def test_hidden_settings_are_still_parsed_and_named_as_ignored() -> None:
    args = build_parser().parse_args(["run", "--trainer", "locked", "--epochs", "2"])
    warnings = ignored_flags(args)
    assert len(warnings) == 1
    assert "'trainer'" in warnings[0] and "hogwild run" in warnings[0] and "train" in warnings[0]
    assert ignored_flags(build_parser().parse_args(["train", "--trainer", "locked"])) == []


def test_run_warns_about_trainer_and_sync_staleness(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # out_dir is a file: the coordinator child refuses it (exit 2, naming the key) and `run`
    # passes that code through; the warnings about the ignored settings come first.
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger="hogwild"):
        code = main(["run", "--trainer", "serial", "--mode", "sync", "--staleness", "3",
                     "--out", str(blocker)], environ={})
    assert code == 2
    # Called inside a larger program (here pytest), `run` starts its children with exec,
    # never by forking this process.
    assert "forked" not in capsys.readouterr().out
    text = caplog.text
    assert "'trainer' is not used by `hogwild run`" in text
    assert "'staleness' (3) applies to async mode only" in text


def test_train_out_dir_that_is_a_file_is_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code = main(["train", "--out", str(blocker), "--epochs", "1"], environ={})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "'out_dir'" in err[0] and str(blocker) in err[0], err
    assert blocker.read_text() == "x"


def test_launcher_passes_each_role_only_its_settings() -> None:
    settings = config.load(environ={})
    worker = " ".join(setting_flags(settings, "worker"))
    coordinator = " ".join(setting_flags(settings, "coordinator"))
    assert "--coordinator-address=" in worker and "--loss=" not in worker
    assert "--loss=" in coordinator and "--trainer=" not in coordinator
    assert len(setting_flags(settings)) == len(config.KEYS)
