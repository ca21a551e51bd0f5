"""`python -m hogwild.cluster.wire.build` (run by bootstrap-env.sh every time): the stubs are
written only when missing or older than the .proto, or when --force asks."""

from __future__ import annotations

from pathlib import Path

import pytest

from hogwild.cluster.wire import build
from hogwild.cluster.wire._stubs import MODULES


def _stamps(out: Path) -> dict[str, int]:
    return {name: (out / name).stat().st_mtime_ns for name in MODULES}


def test_build_skips_stubs_that_are_up_to_date(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "generated"
    assert build.main([str(out)]) == 0
    assert capsys.readouterr().out.startswith("generated gRPC stubs")
    first = _stamps(out)
    assert build.main([str(out)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert _stamps(out) == first  # nothing written again
    assert build.main(["--force", str(out)]) == 0
    assert capsys.readouterr().out.startswith("generated gRPC stubs")
    (out / MODULES[0]).unlink()  # a stub missing: generated again
    assert build.main([str(out)]) == 0
    assert capsys.readouterr().out.startswith("generated gRPC stubs")
    assert (out / MODULES[0]).is_file()
