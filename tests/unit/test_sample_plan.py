"""A plan of byte ranges from a bounded sample (shipping local, local_plan sample): the ranges
and held-out windows tile the text at line starts, every row is trained on or held out
exactly once, the counts are estimated and then read, and a different file is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hogwild import config
from hogwild.cluster.coordinator.data.localplan import load_local
from hogwild.cluster.wire.localstream import local_chunks, local_source, receive_local
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import parse_file
from hogwild.data.parts.ranges import FilePlan, LocalSpec, read_ranges
from hogwild.data.parts.sampleplan import deal_by_bytes, plan_sampled
from hogwild.errors import ConfigError, DataError, DataFormatError

from .svmtext import svmlight_text

N_FEATURES = 301


def _text(rows: int = 3000, seed: int = 1) -> bytes:
    return svmlight_text(rows, seed)


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.svm"
    path.write_bytes(_text())
    return path


def _plan(path: Path, workers: int = 3, val: float = 0.1, test: float = 0.1,
          **kw: int) -> FilePlan:
    return plan_sampled(str(path), workers=workers, seed=5, val_fraction=val,
                        test_fraction=test, n_features=N_FEATURES, **kw)


def _spec(path: Path, plan: FilePlan) -> LocalSpec:
    return LocalSpec(source=str(path), file_size=plan.file_size, n_features=N_FEATURES,
                     zero_based=False, split_seed=5, holdout=0.0,
                     text_bytes=plan.text_bytes, sampled=True)


def _rows(data: CSRData) -> list[tuple[float, tuple[int, ...], tuple[float, ...]]]:
    """Each row as (label, ids, values), sorted: compares row sets whatever their order."""
    out = []
    for r in range(data.n_rows):
        a, b = int(data.indptr[r]), int(data.indptr[r + 1])
        out.append((float(data.labels[r]), tuple(int(i) for i in data.indices[a:b]),
                    tuple(float(v) for v in data.values[a:b])))
    return sorted(out)


def test_ranges_and_windows_tile_the_text_at_line_starts(text_file: Path) -> None:
    text = text_file.read_bytes()
    plan = _plan(text_file, holdout_bytes=12_000)
    spans = sorted([(r.byte_start, r.byte_end) for r in plan.ranges] + plan.windows)
    at = 0
    for a, b in spans:
        assert a == at and b > a
        assert a == 0 or text[a - 1] == ord("\n")
        at = b
    assert at == len(text)
    held = sum(b - a for a, b in plan.windows)
    # the windows hold val + test of the bytes, within the cap (each end moved to a line
    # start: a line's slack at most)
    longest = max(len(line) + 1 for line in text.split(b"\n"))
    assert 12_000 - longest * len(plan.windows) <= held <= 12_000 + longest * len(plan.windows)
    assert plan.sampled and all(plan.worker_ranges(w) for w in range(3))


def test_every_row_is_trained_on_or_held_out_exactly_once(text_file: Path) -> None:
    plan = _plan(text_file)
    whole = parse_file(text_file, n_features=N_FEATURES)
    parts = [read_ranges(_spec(text_file, plan), plan.worker_ranges(w)) for w in range(3)]
    read = sum(p.n_rows for p in parts)
    held = plan.val.n_rows + plan.test.n_rows
    assert read + held == whole.n_rows == 3000
    assert held == plan.sample_rows
    every = [row for p in (*parts, plan.val, plan.test) for row in _rows(p)]
    assert sorted(every) == _rows(whole)
    # 20 % asked, split half and half between validation and test by the rows' hash
    assert 0.1 < held / whole.n_rows < 0.3
    assert plan.val.n_rows > 0 and plan.test.n_rows > 0
    # the estimates are the sample's rate times each range's bytes
    assert abs(plan.train_rows - read) / read < 0.1
    assert abs(plan.train_nnz - sum(p.nnz for p in parts)) / sum(p.nnz for p in parts) < 0.1


def test_nothing_held_out_still_samples_and_trains_on_every_row(text_file: Path) -> None:
    plan = _plan(text_file, val=0.0, test=0.0, sample_bytes=20_000)
    assert plan.windows == [] and plan.val.n_rows == plan.test.n_rows == 0
    assert plan.sample_rows > 0 and plan.df.sum() > 0
    read = sum(read_ranges(_spec(text_file, plan), plan.worker_ranges(w)).n_rows
               for w in range(3))
    assert read == 3000


def test_the_same_file_and_seed_plan_the_same(text_file: Path) -> None:
    one, two = _plan(text_file), _plan(text_file)
    assert one.ranges == two.ranges and one.assignment == two.assignment
    assert one.windows == two.windows
    assert np.array_equal(one.val.indices, two.val.indices)


def test_a_file_changed_around_a_range_end_is_refused(text_file: Path) -> None:
    plan = _plan(text_file)
    r = plan.worker_ranges(0)[0]
    text = bytearray(text_file.read_bytes())
    at = r.byte_end - 3  # a digit of the last row's last value
    text[at] = ord("7") if text[at] != ord("7") else ord("8")
    text_file.write_bytes(bytes(text))
    with pytest.raises(DataError, match="differs from the file the coordinator planned"):
        read_ranges(_spec(text_file, plan), plan.worker_ranges(0))


def test_a_file_of_another_size_is_refused(text_file: Path) -> None:
    plan = _plan(text_file)
    text_file.write_bytes(text_file.read_bytes() + b"\n1 3:1")
    with pytest.raises(DataError, match="bytes here"):
        read_ranges(_spec(text_file, plan), plan.worker_ranges(1))


def test_a_bad_line_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    text = _text().split(b"\n")
    bad = 2500
    text[bad] = b"1 5:0.5 oops"
    path = tmp_path / "bad.svm"
    path.write_bytes(b"\n".join(text))
    plan = _plan(path, val=0.0, test=0.0, sample_bytes=2000)
    spec = _spec(path, plan)
    with pytest.raises(DataFormatError) as info:
        for w in range(3):
            read_ranges(spec, plan.worker_ranges(w))
    assert info.value.line == bad + 1


def test_an_id_beyond_the_width_is_refused_by_the_worker(tmp_path: Path) -> None:
    text = _text().split(b"\n")
    text[2000] = b"1 5:0.5 400:1"
    path = tmp_path / "wide.svm"
    path.write_bytes(b"\n".join(text))
    plan = _plan(path, val=0.0, test=0.0, sample_bytes=2000)
    with pytest.raises(DataFormatError, match="400"):
        for w in range(3):
            read_ranges(_spec(path, plan), plan.worker_ranges(w))


def test_gzip_text_cannot_be_sampled(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "train.svm.gz"
    path.write_bytes(gzip.compress(_text()))
    with pytest.raises(ValueError, match="gzip"):
        _plan(path)


def test_ranges_dealt_by_bytes_are_within_one_range_of_each_other(text_file: Path) -> None:
    plan = _plan(text_file, workers=4)
    for workers in (1, 2, 3, 4):
        dealt = deal_by_bytes(plan.ranges, workers, seed=9)
        assert sorted(i for w in dealt for i in w) == list(range(len(plan.ranges)))
        held = [sum(plan.ranges[i].byte_end - plan.ranges[i].byte_start for i in w)
                for w in dealt]
        biggest = max(r.byte_end - r.byte_start for r in plan.ranges)
        assert max(held) - min(held) <= biggest


def test_the_sampled_flag_travels_with_the_plan(text_file: Path) -> None:
    plan = _plan(text_file)
    spec = _spec(text_file, plan)
    source = local_source(spec, plan.worker_ranges(0), classes=(-1.0, 1.0),
                          total_rows=plan.total_rows, gzip=False, shuffle_seed=3)
    got = receive_local(local_chunks(source, np.arange(N_FEATURES, dtype=np.int32), "r", 0,
                                     1 << 16))
    assert got.spec.sampled and got.ranges == plan.worker_ranges(0)


def test_the_coordinator_picks_the_plan_by_local_plan(text_file: Path) -> None:
    base = {"data": str(text_file), "shipping": "local", "workers": 2, "seed": 5}
    _, scanned = load_local(config.load(None, {}, {**base, "n_features": N_FEATURES}))
    assert not scanned.plan.sampled  # auto: a small file is scanned (exact)
    splits, sampled = load_local(config.load(None, {}, {**base, "n_features": N_FEATURES,
                                                        "local_plan": "sample"}))
    assert sampled.plan.sampled and sampled.spec.sampled and sampled.spec.holdout == 0.0
    assert splits.val.n_rows + splits.test.n_rows == sampled.plan.sample_rows
    assert sampled.ranges_report(2)["plan"] == "sample"
    with pytest.raises(ConfigError, match="local_plan"):
        load_local(config.load(None, {}, {**base, "local_plan": "sample"}))


def test_auto_samples_a_large_plain_file_with_a_known_width(
        text_file: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from hogwild.cluster.coordinator.data import localplan

    monkeypatch.setattr(localplan, "AUTO_SAMPLE_BYTES", 100_000)  # the file: 461 kB
    base = {"data": str(text_file), "shipping": "local", "workers": 2, "seed": 5}
    _, sampled = load_local(config.load(None, {}, {**base, "n_features": N_FEATURES}))
    assert sampled.plan.sampled
    with caplog.at_level("WARNING"):
        _, scanned = load_local(config.load(None, {}, base))
    assert not scanned.plan.sampled
    assert "set n_features" in caplog.text and "local_plan" in caplog.text


def test_estimates_too_low_or_too_high_still_read_every_row(text_file: Path) -> None:
    """The rows go into arrays of the estimated size, grown in place when the ranges hold
    more and trimmed when they hold fewer."""
    import dataclasses

    plan = _plan(text_file)
    exact = read_ranges(_spec(text_file, plan), plan.worker_ranges(0))
    for rows, nnz in ((1, 1), (10 * exact.n_rows, 10 * exact.nnz)):
        ranges = [dataclasses.replace(r, train_rows=rows, train_nnz=nnz)
                  for r in plan.worker_ranges(0)]
        got = read_ranges(_spec(text_file, plan), ranges)
        assert got.n_rows == exact.n_rows and got.nnz == exact.nnz
        assert got.indices.shape[0] == exact.nnz and got.labels.shape[0] == exact.n_rows
        assert np.array_equal(got.indptr, exact.indptr)
        assert np.array_equal(got.indices, exact.indices)
        assert np.array_equal(got.values, exact.values)
        assert np.array_equal(got.labels, exact.labels)
