"""The coordinator's out_dir check: created if missing, refused with the key named otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from hogwild.cluster.coordinator.preflight import PROBE_PREFIX, check_out_dir
from hogwild.errors import ConfigError


def test_missing_directory_is_created_and_left_clean(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    assert check_out_dir(out) == out
    assert out.is_dir()
    assert list(out.iterdir()) == []  # the probe file was removed


def test_existing_files_are_untouched(tmp_path: Path) -> None:
    (tmp_path / "model.npz").write_bytes(b"old")
    check_out_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]
    assert not any(p.name.startswith(PROBE_PREFIX) for p in tmp_path.iterdir())


def test_a_file_in_the_way_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a directory")
    with pytest.raises(ConfigError, match=r"out_dir.*taken/out") as info:
        check_out_dir(blocker / "out")
    assert info.value.key == "out_dir"
    assert "\n" not in str(info.value)


def test_an_unwritable_directory_is_a_config_error(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        probe = out / "x"
        try:
            probe.write_text("")
        except PermissionError:
            pass
        else:  # root ignores mode bits: nothing to test here
            probe.unlink()
            pytest.skip("running with privileges that ignore directory permissions")
        with pytest.raises(ConfigError, match="out_dir"):
            check_out_dir(out)
    finally:
        out.chmod(0o700)
