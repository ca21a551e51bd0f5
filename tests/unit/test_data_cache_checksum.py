"""The parsed-data cache's content checksums: damage that keeps every array's shape and passes
every check of the rows (a label flipped, values scaled) is noticed, said in one warning naming
the file, and the text is parsed again; a cache of the previous layout is parsed again too."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.formats import svmlight
from hogwild.data.formats.cache import CACHE_VERSION, cache_path, find_cached
from hogwild.data.formats.svmlight import read_svmlight


@pytest.fixture(autouse=True)
def _user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Caches of these tests go to a temporary user cache dir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _source(tmp_path: Path, rows: int = 400) -> Path:
    rng = np.random.default_rng(3)
    lines = []
    for i in range(rows):
        ids = np.sort(rng.choice(50, size=5, replace=False)) + 1
        label = 1 if i % 3 else -1
        lines.append(f"{label} " + " ".join(f"{j}:{rng.random():.4f}" for j in ids))
    path = tmp_path / "d.svm"
    path.write_text("\n".join(lines) + "\n")
    return path


def _data_of(where: Path, name: str, dtype: type) -> tuple[np.ndarray, int]:
    """The data of one cached array and where it starts in its file."""
    with open(where / f"{name}.npy", "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        start = f.tell()
    raw = (where / f"{name}.npy").read_bytes()
    return np.frombuffer(raw[start:], dtype=dtype).copy(), start


def _rewrite(where: Path, name: str, data: np.ndarray, start: int) -> None:
    path = where / f"{name}.npy"
    path.write_bytes(path.read_bytes()[:start] + data.tobytes())


def _same(a: CSRData, b: CSRData) -> bool:
    return (np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.values, b.values) and np.array_equal(a.labels, b.labels))


def _parse_count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the parses of the text (the real parser runs)."""
    calls = [0]
    real = svmlight.load_text

    def counted(*args: object, **kwargs: object) -> CSRData:
        calls[0] += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(svmlight, "load_text", counted)
    return calls


@pytest.mark.parametrize("damage", ["flip a label", "scale the values"])
def test_damage_that_looks_valid_is_noticed_and_the_text_parsed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        damage: str) -> None:
    path = _source(tmp_path)
    truth = read_svmlight(path)
    where = cache_path(path)
    if damage == "flip a label":
        name, (array, start) = "labels", _data_of(where, "labels", np.float32)
        array[17] = -array[17]  # still +-1: the rows' checks cannot see it
    else:
        name, (array, start) = "values", _data_of(where, "values", np.float32)
        array *= 1000  # still finite
    _rewrite(where, name, array, start)
    parses = _parse_count(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="hogwild.data.formats.cache"):
        again = read_svmlight(path)
    assert _same(again, truth) and parses[0] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [(f"the data cache {where / f'{name}.npy'} is damaged (its data does "
                         f"not match the checksum in {where / 'meta.json'}): parsing {path} "
                         "again")]
    # The cache was written anew: the next read takes it, without parsing or a warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hogwild.data.formats.cache"):
        third = read_svmlight(path)
    assert _same(third, truth) and parses[0] == 1 and not caplog.records


def test_find_cached_refuses_a_changed_array_and_takes_an_intact_one(tmp_path: Path) -> None:
    path = _source(tmp_path)
    read_svmlight(path)
    where = cache_path(path)
    assert find_cached(path, where, zero_based=False) is not None
    for name, dtype in (("indptr", np.int64), ("indices", np.int32), ("values", np.float32),
                        ("labels", np.float32)):
        array, start = _data_of(where, name, dtype)
        changed = array.copy()
        changed.view(np.uint8)[changed.nbytes // 2] ^= 0x01  # one bit
        _rewrite(where, name, changed, start)
        assert find_cached(path, where, zero_based=False) is None, name
        _rewrite(where, name, array, start)
        assert find_cached(path, where, zero_based=False) is not None, name


def test_a_cache_of_the_previous_layout_is_parsed_again_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    path = _source(tmp_path)
    truth = read_svmlight(path)
    where = cache_path(path)
    meta = json.loads((where / "meta.json").read_text())
    # What the previous version wrote: no checksums, layout 3.
    del meta["checksum"], meta["checksums"]
    meta["key"]["version"] = CACHE_VERSION - 1
    (where / "meta.json").write_text(json.dumps(meta))
    parses = _parse_count(monkeypatch)
    with caplog.at_level(logging.INFO, logger="hogwild.data.formats.cache"):
        again = read_svmlight(path)
    assert _same(again, truth) and parses[0] == 1
    assert f"the data cache {where} is of an older layout (3, without content checksums): " \
           f"parsing {path} again" in caplog.text
    assert json.loads((where / "meta.json").read_text())["key"]["version"] == CACHE_VERSION
    assert find_cached(path, where, zero_based=False) is not None


def test_reading_a_cache_hashes_its_arrays_as_it_loads_them_not_in_a_pass_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The checksums are still checked (the damage tests above), but on the blocks the load
    # reads anyway: no separate pass over the cache files.
    from hogwild.data.formats import cache

    path = _source(tmp_path)
    truth = read_svmlight(path)
    passes = [0]
    real = cache.hash_rest

    def counted(f: object) -> str:
        passes[0] += 1
        return real(f)  # type: ignore[arg-type]

    monkeypatch.setattr(cache, "hash_rest", counted)
    parses = _parse_count(monkeypatch)
    again = read_svmlight(path)
    assert _same(again, truth) and parses[0] == 0 and passes[0] == 0
    assert find_cached(path, cache_path(path), zero_based=False) is not None
    assert passes[0] == 4  # find_cached on its own still checks all four arrays
