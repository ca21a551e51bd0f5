"""Row ranges of a training file (shipping: local): planning, the split, reading a worker's ranges."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest
import xxhash

from hogwild.cluster.wire.localstream import local_chunks, local_source, receive_local
from hogwild.data.formats.svmlight import parse_file
from hogwild.data.formats.textsource import TextFile, canonical, is_url, local_source_error
from hogwild.data.parts.ranges import (
    FilePlan,
    LocalSpec,
    deal,
    held_out,
    plan_file,
    range_bounds,
    read_ranges,
    split_u,
)
from hogwild.data.parts.textspans import DIGEST_CHUNK
from hogwild.errors import DataError, DataFormatError, InvalidMessage

from .svmtext import svmlight_text


def _text(rows: int = 600, seed: int = 1) -> bytes:
    return svmlight_text(rows, seed)


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.svm"
    path.write_bytes(_text())
    return path


def _spec(path: str, plan: FilePlan, seed: int, holdout: float) -> LocalSpec:
    return LocalSpec(source=path, file_size=plan.file_size, n_features=plan.max_index + 1,
                     zero_based=False, split_seed=seed, holdout=holdout,
                     text_bytes=plan.text_bytes)


def _xxh(data: bytes) -> bytes:
    return xxhash.xxh3_128_digest(data)


# ----------------------------------------------------------------------------- planning

def test_range_bounds_cover_every_row_in_equal_parts() -> None:
    for n, w in [(10, 3), (1000, 2), (5, 5), (7, 1), (100_003, 4)]:
        b = range_bounds(n, w)
        assert b[0] == 0 and b[-1] == n
        sizes = np.diff(b)
        assert (len(b) - 1) % w == 0
        assert sizes.min() >= 1 and sizes.max() - sizes.min() <= 1
    with pytest.raises(DataError, match="cannot be divided among 3 workers"):
        range_bounds(2, 3)


def test_deal_gives_each_range_to_one_worker_and_depends_on_the_seed() -> None:
    a = deal(16, 2, seed=0)
    assert sorted(a[0] + a[1]) == list(range(16))
    assert len(a[0]) == len(a[1]) == 8 and a[0] == sorted(a[0])
    assert deal(16, 2, seed=0) == a
    assert deal(16, 2, seed=1) != a


def test_split_u_is_a_deterministic_uniform_hash_of_seed_and_row() -> None:
    rows = np.arange(200_000)
    u = split_u(3, rows)
    assert np.all((u >= 0) & (u < 1))
    np.testing.assert_array_equal(u, split_u(3, rows))
    assert not np.array_equal(u, split_u(4, rows))
    assert abs(float(np.mean(u < 0.1)) - 0.1) < 0.005
    # any window of rows gets the same values as the whole
    np.testing.assert_array_equal(held_out(3, 0.3, 1000, 500), u[1000:1500] < 0.3)


def test_plan_cuts_ranges_at_row_starts_and_digests_their_bytes(text_file: Path) -> None:
    text = text_file.read_bytes()
    plan = plan_file(str(text_file), workers=3, seed=5, val_fraction=0.1, test_fraction=0.2,
                     block_bytes=4096)  # many blocks: ranges start inside blocks
    full = parse_file(text_file)
    assert plan.total_rows == full.n_rows == 600
    assert plan.text_bytes == len(text) and plan.file_size == len(text) and not plan.gzip
    assert plan.max_index == full.max_index()
    ranges = plan.ranges
    assert len(ranges) == 24
    assert ranges[0].first_row == 0 and ranges[-1].byte_end == len(text)
    lines = text.split(b"\n")
    data_lines = [i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith(b"#")]
    for a, b in itertools.pairwise(ranges):
        assert a.first_row + a.rows == b.first_row and a.byte_end == b.byte_start
    for r in ranges:
        # the range starts at the line of its first data row, whose number it knows
        line_no = data_lines[r.first_row]
        assert r.first_line == line_no + 1
        assert text[r.byte_start:].startswith(lines[line_no])
        assert text[r.byte_start - 1:r.byte_start] == b"\n"
        # the digest of the digests of the 1 MiB chunks the range overlaps
        c0, c1 = r.byte_start // DIGEST_CHUNK, -(-r.byte_end // DIGEST_CHUNK)
        inner = b"".join(_xxh(text[c * DIGEST_CHUNK:(c + 1) * DIGEST_CHUNK]) for c in range(c0, c1))
        assert r.digest == _xxh(inner)
    # every row is training, validation or test, as the hash says
    u = split_u(5, np.arange(600))
    train = u >= 0.3
    assert plan.train_rows == int(train.sum())
    assert plan.val.n_rows == int(((u >= 0.2) & (u < 0.3)).sum())
    assert plan.test.n_rows == int((u < 0.2).sum())
    np.testing.assert_array_equal(plan.val.labels, full.labels[(u >= 0.2) & (u < 0.3)])
    np.testing.assert_array_equal(plan.test.indices,
                                  full.take(np.flatnonzero(u < 0.2)).indices)
    lengths = np.diff(full.indptr)
    assert plan.train_nnz == int(lengths[train].sum())
    np.testing.assert_array_equal(
        plan.df, np.bincount(full.take(np.flatnonzero(train)).indices, minlength=plan.df.shape[0]))
    assert list(plan.labels) == [-1.0, 1.0]
    assert int(plan.label_counts.sum()) == plan.train_rows


def test_plan_names_file_and_line_of_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.svm"
    lines = _text().split(b"\n")
    lines[300] = b"1 3:0.5 2:0.1"  # unsorted ids
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataFormatError, match=rf"{path}:301: feature indices not strictly"):
        plan_file(str(path), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0,
                  block_bytes=4096)


# ----------------------------------------------------------------------------- reading

@pytest.mark.parametrize(("compressed", "rows", "cap"), [
    (False, 600, None), (True, 600, None),
    # 3 MB of text: ranges start inside 1 MiB digest chunks and span several; the
    # boundaries fall on every 32nd row (a small checkpoint cap)
    (False, 20_000, 1000), (True, 20_000, None)])
def test_workers_read_exactly_the_training_rows_between_them(
        tmp_path: Path, compressed: bool, rows: int, cap: int | None) -> None:
    text = _text(rows)
    path = tmp_path / ("train.svm.gz" if compressed else "train.svm")
    path.write_bytes(gzip.compress(text) if compressed else text)
    plan = plan_file(str(path), workers=3, seed=2, val_fraction=0.15, test_fraction=0.1,
                     block_bytes=4096 if rows < 1000 else 1 << 20, checkpoint_cap=cap)
    if cap is not None:
        stride = 32  # the least power of two with rows / stride <= cap
        assert all(r.first_row % stride == 0 for r in plan.ranges)
        sizes = [r.rows for r in plan.ranges]
        assert max(sizes) - min(sizes) <= stride
    assert sum(r.rows for r in plan.ranges) == rows
    assert plan.gzip == compressed and plan.text_bytes == len(text)
    spec = _spec(str(path), plan, 2, 0.25)
    parts = [read_ranges(spec, plan.worker_ranges(w), block_bytes=2048) for w in range(3)]
    for w, part in enumerate(parts):
        assert part.n_rows == sum(r.train_rows for r in plan.worker_ranges(w))
    # together, in file order of their ranges, they are the training rows of the file
    full = parse_file(path)
    assert full.n_rows == rows
    train = np.flatnonzero(split_u(2, np.arange(full.n_rows)) >= 0.25)
    owner = np.empty(full.n_rows, dtype=np.int64)
    for w in range(3):
        for r in plan.worker_ranges(w):
            owner[r.first_row:r.first_row + r.rows] = w
    for w, part in enumerate(parts):
        mine = full.take(train[owner[train] == w])
        np.testing.assert_array_equal(part.indptr, mine.indptr)
        np.testing.assert_array_equal(part.indices, mine.indices)
        np.testing.assert_array_equal(part.values, mine.values)
        np.testing.assert_array_equal(part.labels, mine.labels)


def test_a_changed_file_is_refused(tmp_path: Path, text_file: Path) -> None:
    plan = plan_file(str(text_file), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)
    spec = _spec(str(text_file), plan, 0, 0.1)
    text = bytearray(text_file.read_bytes())
    # the same size, one digit changed inside worker 1's first range
    r = plan.worker_ranges(1)[0]
    at = text.index(b":", r.byte_start) + 1
    text[at] = ord("7") if text[at] != ord("7") else ord("3")
    other = tmp_path / "other.svm"
    other.write_bytes(bytes(text))
    # Worker 1 reads the changed range; worker 0 too sees the change, which lies in a 1 MiB
    # chunk its own ranges overlap (the whole file, here).
    for w in (1, 0):
        with pytest.raises(DataError, match=r"differs from the file the coordinator planned "
                                            r"with: rows [\d,]+\.\.[\d,]+ \(bytes"):
            read_ranges(LocalSpec(str(other), spec.file_size, spec.n_features, False, 0, 0.1),
                        plan.worker_ranges(w))
    shorter = tmp_path / "shorter.svm"
    shorter.write_bytes(bytes(text[:-10]))
    with pytest.raises(DataError, match=r"bytes here, [\d,]+ there"):
        read_ranges(LocalSpec(str(shorter), spec.file_size, spec.n_features, False, 0, 0.1),
                    plan.worker_ranges(0))
    with pytest.raises(DataError, match="data file not found"):
        read_ranges(LocalSpec(str(tmp_path / "nope.svm"), spec.file_size, spec.n_features,
                              False, 0, 0.1), plan.worker_ranges(0))
    # another split seed reads other rows: the counts disagree with the plan
    with pytest.raises(DataError, match="planned"):
        read_ranges(LocalSpec(str(text_file), spec.file_size, spec.n_features, False, 9, 0.1),
                    plan.worker_ranges(0))


def test_rows_beyond_the_planned_counts_are_refused_as_they_arrive(text_file: Path) -> None:
    """The worker fills arrays of the planned size: a range holding more rows or non-zeros
    than its plan says stops at the block that overflows them, with the plan's words; one
    holding fewer is refused once read."""
    plan = plan_file(str(text_file), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)
    spec = _spec(str(text_file), plan, 0, 0.1)
    ranges = plan.worker_ranges(0)
    whole = read_ranges(spec, ranges, block_bytes=1024)
    assert whole.n_rows == sum(r.train_rows for r in ranges)
    assert whole.indptr[-1] == whole.nnz == sum(r.train_nnz for r in ranges)
    last = ranges[-1]
    fewer_nnz = [*ranges[:-1], dataclasses.replace(last, train_nnz=last.train_nnz - 1)]
    fewer_rows = [*ranges[:-1], dataclasses.replace(last, train_rows=last.train_rows - 1)]
    for short in (fewer_nnz, fewer_rows):
        with pytest.raises(DataError, match=r"differs from the file the coordinator planned "
                                            r"with: more than the planned [\d,]+ training rows"):
            read_ranges(spec, short, block_bytes=1024)
    more_rows = [*ranges[:-1], dataclasses.replace(last, train_rows=last.train_rows + 1)]
    with pytest.raises(DataError, match=r"read [\d,]+ training rows .* planned [\d,]+"):
        read_ranges(spec, more_rows, block_bytes=1024)


def test_a_bad_line_in_a_worker_range_names_file_and_line(tmp_path: Path,
                                                          text_file: Path) -> None:
    plan = plan_file(str(text_file), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)
    r = plan.worker_ranges(1)[-1]
    text = bytearray(text_file.read_bytes())
    # the range's first row is on line r.first_line; break its first pair, same file size
    colon = text.index(b":", r.byte_start)
    text[colon] = ord("x")
    bad = tmp_path / "bad.svm"
    bad.write_bytes(bytes(text))
    spec = LocalSpec(str(bad), len(text), plan.max_index + 1, False, 0, 0.1)
    with pytest.raises(DataFormatError, match=rf"{bad}:{r.first_line}: bad token"):
        read_ranges(spec, [r], block_bytes=1024)
    # a line further into the range, past a block boundary
    text[colon] = ord(":")
    lines = bytes(text).split(b"\n")
    target = next(n for n in range(r.first_line + 15, r.first_line + 30)
                  if b":" in lines[n - 1] and not lines[n - 1].startswith(b"#"))
    assert r.byte_start < len(b"\n".join(lines[:target])) < r.byte_end
    at = len(b"\n".join(lines[:target - 1])) + 1
    colon = text.index(b":", at)
    text[colon] = ord("x")
    bad.write_bytes(bytes(text))
    with pytest.raises(DataFormatError, match=rf"{bad}:{target}: bad token"):
        read_ranges(spec, [r], block_bytes=1024)


def test_urls_through_fsspec(tmp_path: Path, text_file: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    text = text_file.read_bytes()
    with fsspec.open("memory://hogwild-test/train.svm.gz", "wb") as f:
        f.write(gzip.compress(text))
    for url in ("memory://hogwild-test/train.svm.gz", f"file://{text_file}"):
        assert is_url(url) and canonical(url) == url and local_source_error(url) is None
        plan = plan_file(url, workers=2, seed=1, val_fraction=0.1, test_fraction=0.0,
                         block_bytes=4096)
        local = plan_file(str(text_file), workers=2, seed=1, val_fraction=0.1,
                          test_fraction=0.0, block_bytes=4096)
        assert [r.digest for r in plan.ranges] == [r.digest for r in local.ranges]
        spec = _spec(url, plan, 1, 0.1)
        got = read_ranges(spec, plan.worker_ranges(1))
        want = read_ranges(_spec(str(text_file), local, 1, 0.1), local.worker_ranges(1))
        np.testing.assert_array_equal(got.indices, want.indices)
    with pytest.raises(DataError, match="data file not found: memory://hogwild-test/none"):
        TextFile("memory://hogwild-test/none")


def test_sources_that_cannot_be_read_by_ranges() -> None:
    assert "synthetic:" in str(local_source_error("synthetic:rcv1?rows=10"))
    assert local_source_error("bundled:spamassassin") is None
    assert local_source_error("bundled:nope") is not None
    assert local_source_error("/data/train.svm") is None
    assert canonical("bundled:spamassassin") == "bundled:spamassassin"
    assert canonical("train.svm").startswith("/")


# ----------------------------------------------------------------------------- the stream

def test_local_plan_stream_round_trip_and_tampering(text_file: Path) -> None:
    plan = plan_file(str(text_file), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)
    spec = _spec(str(text_file), plan, 0, 0.1)
    order = np.random.default_rng(0).permutation(spec.n_features).astype(np.int32)
    source = local_source(spec, plan.worker_ranges(1), classes=(-1.0, 1.0),
                          total_rows=plan.total_rows, gzip=False, shuffle_seed=7)
    chunks = list(local_chunks(source, order, "run", 1, chunk_bytes=256, shard_index=1,
                               shard_count=2))
    assert len(chunks) > 3  # the order travels in several chunks
    got = receive_local(chunks, run_id="run", worker_id=1)
    assert got.spec == spec and got.ranges == plan.worker_ranges(1)
    np.testing.assert_array_equal(got.order, order)
    assert got.classes == (-1.0, 1.0) and got.shuffle_seed == 7 and got.shard_index == 1
    with pytest.raises(InvalidMessage, match="not this one"):
        receive_local(chunks, run_id="other")
    with pytest.raises(InvalidMessage):
        receive_local(chunks[:1] + chunks[2:])
    broken = [type(c)() for c in chunks]
    for a, b in zip(broken, chunks):
        a.CopyFrom(b)
    broken[0].local.ranges[0].byte_end = 0
    broken[0].local.ranges[0].byte_start = 5
    with pytest.raises(InvalidMessage, match="inconsistent"):
        receive_local(broken)


def test_label_values_are_those_of_the_rows_as_float32(tmp_path: Path) -> None:
    from hogwild.data.transform.labels import LabelMap

    path = tmp_path / "labels.svm"
    rows = [f"{0.1 if i % 3 else 0.7} {i % 50 + 1}:1" for i in range(300)]
    path.write_text("\n".join(rows) + "\n")
    plan = plan_file(str(path), workers=2, seed=0, val_fraction=0.2, test_fraction=0.0)
    assert list(plan.labels) == [float(np.float32(0.1)), float(np.float32(0.7))]
    labels = LabelMap.fit(plan.labels, classifier=True, source=str(path))
    encoded = labels.encode(plan.val.labels, str(path))  # no label is "unknown"
    assert set(encoded.tolist()) == {-1.0, 1.0}
    spec = LocalSpec(str(path), plan.file_size, 50, False, 0, 0.2)
    got = read_ranges(spec, plan.worker_ranges(0))
    assert set(got.labels.tolist()) <= {float(np.float32(0.1)), float(np.float32(0.7))}


def test_the_plans_fingerprint_changes_with_the_file_the_seed_and_the_split(
        tmp_path: Path, text_file: Path) -> None:
    from hogwild.cluster.coordinator.checkpoints import fingerprint

    def printed(path: Path, seed: int = 0, val: float = 0.1) -> str:
        plan = plan_file(str(path), workers=2, seed=seed, val_fraction=val, test_fraction=0.0)
        return fingerprint.of_plan(plan, plan.val)

    text = bytearray(text_file.read_bytes())
    at = text.index(b":", len(text) // 2) + 1  # one digit, the size unchanged
    text[at] = ord("7") if text[at] != ord("7") else ord("3")
    other = tmp_path / "other.svm"
    other.write_bytes(bytes(text))
    first = printed(text_file)
    assert printed(text_file) == first
    assert len({first, printed(other), printed(text_file, seed=1),
                printed(text_file, val=0.2)}) == 4


def test_planning_and_reading_keep_their_parse_threads_for_every_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread_starts: list[str]) -> None:
    import threading

    from hogwild.data.formats import _textparse, blockparse

    path = tmp_path / "train.svm"
    path.write_bytes(_text(3000))
    monkeypatch.setattr(blockparse, "MIN_BYTES_PER_THREAD", 256)  # 3 pieces a block
    parsers: set[int] = set()
    calls: list[int] = []
    parse_piece = _textparse.parse_piece

    def counting_parse(*args: object) -> object:
        parsers.add(threading.get_ident())
        calls.append(1)
        return parse_piece(*args)

    monkeypatch.setattr(_textparse, "parse_piece", counting_parse)
    plan = plan_file(str(path), workers=2, seed=2, val_fraction=0.1, test_fraction=0.1,
                     block_bytes=4096, threads=3)
    assert len(calls) > 3 * 10 and len(parsers) == 3   # many blocks, 3 pieces each
    assert thread_starts == ["parse-1", "parse-2"]      # one set of threads for them all
    thread_starts.clear()
    spec = _spec(str(path), plan, 2, 0.2)
    part = read_ranges(spec, plan.worker_ranges(0), threads=3, block_bytes=4096)
    assert part.n_rows == sum(r.train_rows for r in plan.worker_ranges(0))
    assert thread_starts == ["parse-1", "parse-2"]
