"""A worker's rows out of core (shipping: local, out_of_core): written to disk, memory-mapped."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from hogwild.cluster.wire.localstream import LocalPlan, local_chunks, local_source, receive_local
from hogwild.cluster.worker.localdata import load_local_shard
from hogwild.data import spill
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.parts.ranges import LocalSpec, plan_file
from hogwild.data.synthetic import make_rcv1_like
from hogwild.errors import DataError


def _write_text(path: Path, rows: int = 3000) -> None:
    data = make_rcv1_like(rows, n_features=400, avg_nnz=10, seed=3)
    lines = []
    for r in range(data.n_rows):
        a, b = int(data.indptr[r]), int(data.indptr[r + 1])
        feats = " ".join(f"{int(i) + 1}:{float(v):.6g}"
                         for i, v in zip(data.indices[a:b], data.values[a:b]))
        lines.append(f"{int(data.labels[r])} {feats}")
    path.write_text("\n".join(lines) + "\n")


def _plan(path: Path, worker: int = 1) -> LocalPlan:
    plan = plan_file(str(path), workers=2, seed=0, val_fraction=0.1, test_fraction=0.05)
    spec = LocalSpec(source=str(path), file_size=plan.file_size,
                     n_features=plan.max_index + 1, zero_based=False, split_seed=0,
                     holdout=0.15, text_bytes=plan.text_bytes)
    order = np.random.default_rng(0).permutation(spec.n_features).astype(np.int32)
    source = local_source(spec, plan.worker_ranges(worker), classes=(-1.0, 1.0),
                          total_rows=plan.total_rows, gzip=False, shuffle_seed=7)
    return receive_local(local_chunks(source, order, "run", worker, chunk_bytes=1 << 16))


def _rows(data: CSRData) -> list[tuple[float, bytes, bytes]]:
    out = []
    for r in range(data.n_rows):
        a, b = int(data.indptr[r]), int(data.indptr[r + 1])
        out.append((float(data.labels[r]), data.indices[a:b].tobytes(),
                    data.values[a:b].tobytes()))
    return out


def _mapped_deleted(where: Path) -> list[str]:
    """This process's mappings of files under ``where`` that are deleted already."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return [line for line in lines if str(where) in line and line.endswith("(deleted)")]


def test_out_of_core_holds_the_same_rows_mapped_from_files_already_deleted(
        tmp_path: Path) -> None:
    text = tmp_path / "train.svm"
    _write_text(text)
    plan = _plan(text)
    in_memory = load_local_shard(plan)
    cache = tmp_path / "cache"
    on_disk = load_local_shard(plan, spill_to=cache)

    on_disk.validate()
    assert on_disk.n_rows == in_memory.n_rows == sum(r.train_rows for r in plan.ranges)
    assert on_disk.nnz == in_memory.nnz
    # The same rows, labels mapped and features renumbered alike.
    assert sorted(_rows(on_disk)) == sorted(_rows(in_memory))
    assert set(np.unique(on_disk.labels)) == {-1.0, 1.0}
    # Mapped from files that are gone: nothing is left on disk, whatever ends the process.
    assert list(cache.iterdir()) == []
    mapped = _mapped_deleted(cache)
    assert any("indices.npy" in line for line in mapped), mapped
    assert any("values.npy" in line for line in mapped), mapped
    # The layout is the shuffle seed's: another load lays the rows out the same way.
    again = load_local_shard(plan, spill_to=cache)
    np.testing.assert_array_equal(again.indptr, on_disk.indptr)
    np.testing.assert_array_equal(again.indices, on_disk.indices)
    np.testing.assert_array_equal(again.labels, on_disk.labels)


def test_rows_out_of_core_land_at_uniformly_random_places(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many buckets (as a large part has): each range's rows end up spread over the whole
    layout, as a permutation in memory spreads them, not kept together."""
    monkeypatch.setattr(spill, "BUCKET_BYTES", 4096)
    text = tmp_path / "train.svm"
    _write_text(text, rows=6000)
    plan = _plan(text, worker=0)
    sink_buckets = []
    real = spill.DiskParts.build

    def build(self: spill.DiskParts, n_features: int) -> CSRData:
        sink_buckets.append(self.buckets)
        return real(self, n_features)

    monkeypatch.setattr(spill.DiskParts, "build", build)
    on_disk = load_local_shard(plan, spill_to=tmp_path / "cache")
    assert sink_buckets[0] > 20
    where = {row: i for i, row in enumerate(_rows(on_disk))}
    n = on_disk.n_rows
    for r in plan.ranges:
        one = load_local_shard(LocalPlan(plan.spec, [r], plan.classes, plan.order,
                                         plan.shuffle_seed, plan.total_rows, plan.digest,
                                         plan.bytes_received, 0, 1))
        places = np.array([where[row] for row in _rows(one)]) / n
        # A uniform sample of ~300 places: mean 0.5 (sd about 0.017), both halves used.
        assert abs(places.mean() - 0.5) < 0.1, places.mean()
        assert places.min() < 0.1 and places.max() > 0.9


def test_a_file_that_is_not_the_planned_one_leaves_nothing_on_disk(tmp_path: Path) -> None:
    text = tmp_path / "train.svm"
    _write_text(text)
    plan = _plan(text)
    changed = bytearray(text.read_bytes())
    at = changed.index(b":", plan.ranges[-1].byte_start) + 1
    changed[at] = ord("7") if changed[at] != ord("7") else ord("3")
    text.write_bytes(bytes(changed))
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="differs from the file the coordinator planned with"):
        load_local_shard(plan, spill_to=cache)
    assert list(cache.iterdir()) == []


def test_a_cache_dir_that_cannot_be_made_names_the_setting(tmp_path: Path) -> None:
    text = tmp_path / "train.svm"
    _write_text(text)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DataError, match="out_of_core: cannot make a directory"):
        load_local_shard(_plan(text), spill_to=blocker / "parts")


def test_a_full_disk_says_so_and_leaves_nothing_on_it(tmp_path: Path, small_disk: Path) -> None:
    """The rows need about 8 MB while they are read (staged, then laid out): a 4 MB disk
    fills, the error names the setting and the place, and what was written is removed."""
    text = tmp_path / "train.svm"
    write_svmlight(make_rcv1_like(60_000, n_features=400, avg_nnz=10, seed=5), text)
    plan = plan_file(str(text), workers=1, seed=0, val_fraction=0.1, test_fraction=0.05)
    spec = LocalSpec(source=str(text), file_size=plan.file_size,
                     n_features=plan.max_index + 1, zero_based=False, split_seed=0,
                     holdout=0.15, text_bytes=plan.text_bytes)
    order = np.arange(spec.n_features, dtype=np.int32)
    source = local_source(spec, plan.worker_ranges(0), classes=(-1.0, 1.0),
                          total_rows=plan.total_rows, gzip=False, shuffle_seed=1)
    local = receive_local(local_chunks(source, order, "run", 0, chunk_bytes=1 << 16))
    assert 2 * 8 * sum(r.train_nnz for r in local.ranges) > 4 << 20  # staged and laid out
    cache = small_disk / "parts"
    with pytest.raises(DataError, match=r"out_of_core: cannot write this worker's rows under "
                                        rf"{cache}: .*MB free there \(the rows need about twice"):
        load_local_shard(local, spill_to=cache)
    assert list(cache.iterdir()) == []


def test_a_directory_left_by_a_killed_worker_is_removed_by_the_next(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = 2 ** 22 + 12345  # above pid_max's default: no such process
    left = cache / f"part-{dead}-abc"
    left.mkdir()
    (left / "stage-indices").write_bytes(b"\0" * 1000)
    alive = cache / f"part-{os.getpid()}-xyz"  # a live process's: kept
    alive.mkdir()
    text = tmp_path / "train.svm"
    _write_text(text)
    load_local_shard(_plan(text), spill_to=cache)
    assert not left.exists()
    assert alive.exists()
