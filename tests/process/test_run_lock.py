"""The out dir's lock across processes: a holder killed with -9 leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hogwild.errors import ConfigError
from hogwild.outputs import artifacts


def test_a_killed_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    code = ("import sys, time; from hogwild.outputs import artifacts\n"
            "with artifacts.out_dir_held(sys.argv[1], 'coordinator'):\n"
            "    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with (pytest.raises(ConfigError, match=rf"pid {holder.pid} on "),
              artifacts.out_dir_held(tmp_path, "train")):
            pass
    finally:
        holder.kill()
        holder.wait(10)
    with artifacts.out_dir_held(tmp_path, "train"):
        pass
