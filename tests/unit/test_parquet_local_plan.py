"""A Parquet plan for ``shipping: local`` (data/parts/rowgroups.py): row groups from the footers, the
held-out rows and the column mapping from a bounded sample, and the workers' pieces read back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.parquetdata import QUERY, write_parquet

from hogwild.cluster.wire.localstream import local_chunks, local_source, receive_local
from hogwild.data.csr import CSRData, concat_rows
from hogwild.data.parts.ranges import LocalSpec, split_u
from hogwild.data.parts.rowgroups import plan_groups, read_pieces, split_root
from hogwild.data.sources import load_source, load_source_hashed
from hogwild.errors import DataError, InvalidMessage

pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def rows() -> CSRData:
    return load_source("synthetic:rcv1?rows=3000&seed=3")


def _spec(path: Path | str) -> str:
    return f"parquet:{path}?{QUERY}"


def _rebuilt(planned: object, workers: int, seed: int, test_share: float) -> CSRData:
    """Every row of the data set back in file order: the workers' pieces where they lie,
    the held-out rows where their windows lie."""
    plan = planned.plan  # type: ignore[attr-defined]
    slots: list[CSRData | None] = [None] * plan.total_rows
    for w in range(workers):
        mine = plan.worker_ranges(w)
        for piece, part in zip(sorted(mine, key=lambda r: r.first_row),
                               read_pieces(planned.root, mine, planned.params)):  # type: ignore[attr-defined]
            assert part.n_rows == piece.rows
            for k in range(piece.rows):
                slots[piece.first_row + k] = part.slice(k, k + 1)
    held = [r for a, b in plan.windows for r in range(a, b)]
    is_test = split_u(seed, np.arange(len(held))) < test_share
    val_rows = [r for r, t in zip(held, is_test) if not t]
    test_rows = [r for r, t in zip(held, is_test) if t]
    for rows_at, data in ((val_rows, plan.val), (test_rows, plan.test)):
        assert data.n_rows == len(rows_at)
        for k, r in enumerate(rows_at):
            slots[r] = data.slice(k, k + 1)
    assert all(s is not None for s in slots)  # every row once: pieces and windows tile it
    return concat_rows([s for s in slots if s is not None], plan.df.shape[0])


@pytest.mark.parametrize(("per_group", "workers"), [(100, 3), (700, 4), (3000, 2)])
def test_pieces_and_windows_hold_every_row_once_encoded_as_the_whole_file(
        rows: CSRData, tmp_path: Path, per_group: int, workers: int) -> None:
    """30 groups for 3 workers (whole groups), 5 for 4 and 1 for 2 (groups cut)."""
    path = write_parquet(rows, tmp_path / "d.parquet", per_group)
    planned = plan_groups(_spec(path), workers=workers, seed=7, val_fraction=0.1,
                          test_fraction=0.1)
    plan = planned.plan
    assert plan.total_rows == rows.n_rows and plan.sampled
    held = plan.val.n_rows + plan.test.n_rows
    assert held == sum(b - a for a, b in plan.windows) == round(0.2 * rows.n_rows)
    assert plan.train_rows == rows.n_rows - held
    per_worker = [sum(r.rows for r in plan.worker_ranges(w)) for w in range(workers)]
    assert max(per_worker) - min(per_worker) <= per_group  # within one group
    if per_group * 4 * workers > rows.n_rows:  # cut: stretches of equal rows
        assert max(per_worker) - min(per_worker) <= 2
    whole, _ = load_source_hashed(_spec(path), hashing=planned.params)
    back = _rebuilt(planned, workers, 7, 0.5)
    assert back.n_rows == whole.n_rows
    assert np.array_equal(back.indptr, whole.indptr)
    assert np.array_equal(back.indices, whole.indices)
    assert np.array_equal(back.values, whole.values)
    assert np.array_equal(back.labels, whole.labels)


def test_widths_and_scales_come_from_the_footers_not_the_sample(tmp_path: Path) -> None:
    """The largest index and the largest numeric value lie in rows the sample does not read;
    the footers' statistics still size the pair and scale the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 2000
    idx = [[i % 50] for i in range(n)]
    x = np.ones(n)
    idx[1550], x[1551] = [99_999], 8.0
    table = pa.table({"label": pa.array(np.tile([1.0, -1.0], n // 2)),
                      "indices": pa.array(idx, pa.list_(pa.int64())),
                      "values": pa.array([[1.0]] * n, pa.list_(pa.float32())),
                      "x": pa.array(x)})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=100)
    planned = plan_groups(f"parquet:{path}?{QUERY}&numeric=x", workers=2, seed=0,
                          val_fraction=0.05, test_fraction=0.0, holdout_bytes=1 << 20)
    held = [r for a, b in planned.plan.windows for r in range(a, b)]
    assert 1550 not in held and 1551 not in held
    by_name = {c["name"]: c for c in planned.params["columns"]}
    assert by_name["indices"]["width"] == 100_000
    assert by_name["x"]["scale"] == pytest.approx(1 / 8)
    assert by_name["x"]["offset"] == 100_000 and planned.params["n_features"] == 100_001
    got = concat_rows([p for w in range(2) for p in read_pieces(
        planned.root, planned.plan.worker_ranges(w), planned.params)], 100_001)
    assert got.nnz + planned.plan.val.nnz == 2 * n  # nothing dropped
    assert 99_999 in got.indices and float(got.values.max()) == 1.0


def test_a_sparse_pair_without_statistics_is_refused(rows: CSRData, tmp_path: Path) -> None:
    path = write_parquet(rows, tmp_path / "d.parquet", 500, statistics=False)
    with pytest.raises(DataError, match="footers keep no statistics for column 'indices'"):
        plan_groups(_spec(path), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)


def test_a_directory_of_files_and_a_worker_mount_elsewhere(rows: CSRData,
                                                           tmp_path: Path) -> None:
    """Files under one directory are named relative to it; a worker reading the same files
    under another directory (its ``local_data``) reads the same rows, and a file changed
    there is refused."""
    here = tmp_path / "here" / "part"
    here.mkdir(parents=True)
    for k in range(3):
        write_parquet(rows, here / f"f{k}.parquet", 250, first=k * 1000, stop=(k + 1) * 1000)
    planned = plan_groups(_spec(tmp_path / "here"), workers=2, seed=0, val_fraction=0.1,
                          test_fraction=0.0)
    assert planned.root == f"{tmp_path / 'here'}/"  # what `data` names
    assert {r.file for r in planned.plan.ranges} == {f"part/f{k}.parquet" for k in range(3)}
    there = tmp_path / "there"
    shutil.copytree(tmp_path / "here", there)
    mine = planned.plan.worker_ranges(1)
    a = list(read_pieces(planned.root, mine, planned.params))
    b = list(read_pieces(str(there), mine, planned.params))
    assert a and [np.array_equal(x.indices, y.indices) for x, y in zip(a, b)] == [True] * len(a)
    write_parquet(rows, there / "part" / "f1.parquet", 200, first=1000, stop=2000)
    with pytest.raises(DataError, match="differs from the file the coordinator planned with: "
                                        "row group"):
        for r in planned.plan.ranges:
            list(read_pieces(str(there), [r], planned.params))


def test_split_root() -> None:
    assert split_root(["/d/a/x.pq", "/d/a/y.pq", "/d/b/z.pq"]) == ("/d/", ["a/x.pq", "a/y.pq",
                                                                          "b/z.pq"])
    assert split_root(["/d/ab1.pq", "/d/ab2.pq"]) == ("/d/", ["ab1.pq", "ab2.pq"])
    assert split_root(["s3://b/k/x.pq"]) == ("s3://b/k/", ["x.pq"])


def test_the_plan_travels_and_a_piece_outside_the_root_is_refused(rows: CSRData,
                                                                  tmp_path: Path) -> None:
    path = write_parquet(rows, tmp_path / "d.parquet", 300)
    planned = plan_groups(_spec(path), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)
    from hogwild.data.parts.rowgroups import params_json

    spec = LocalSpec(source=planned.root, file_size=0, n_features=planned.params["n_features"],
                     zero_based=False, split_seed=0, holdout=0.0, sampled=True,
                     format="parquet", columns=params_json(planned.params))
    order = np.arange(spec.n_features, dtype=np.int32)
    mine = planned.plan.worker_ranges(0)

    def sent(ranges: list) -> object:  # type: ignore[type-arg]
        source = local_source(spec, ranges, classes=(-1.0, 1.0), total_rows=rows.n_rows,
                              gzip=False, shuffle_seed=1)
        return receive_local(local_chunks(source, order, "r", 0, 1 << 20), "r", 0)

    got = sent(mine)
    assert got.spec == spec and got.ranges == mine  # type: ignore[attr-defined]
    for bad in ("../d.parquet", "/etc/passwd", "s3://x/y.pq"):
        with pytest.raises(InvalidMessage, match="inconsistent"):
            sent([mine[0].__class__(**{**mine[0].__dict__, "file": bad})])


def _received(planned: object, worker: int, total_rows: int) -> object:
    """The LocalPlan worker ``worker`` receives for ``planned``."""
    from hogwild.data.parts.rowgroups import params_json

    p = planned  # type: ignore[assignment]
    spec = LocalSpec(source=p.root, file_size=0, n_features=p.params["n_features"],  # type: ignore[attr-defined]
                     zero_based=False, split_seed=0, holdout=0.0, sampled=True,
                     format="parquet", columns=params_json(p.params))  # type: ignore[attr-defined]
    order = np.random.default_rng(0).permutation(spec.n_features).astype(np.int32)
    source = local_source(spec, p.plan.worker_ranges(worker), classes=(-1.0, 1.0),  # type: ignore[attr-defined]
                          total_rows=total_rows, gzip=False, shuffle_seed=7)
    return receive_local(local_chunks(source, order, "run", worker, chunk_bytes=1 << 16))


def test_a_worker_holds_its_groups_in_memory_or_out_of_core_alike(rows: CSRData,
                                                                  tmp_path: Path) -> None:
    from hogwild.cluster.worker.localdata import load_local_shard

    path = write_parquet(rows, tmp_path / "d.parquet", 200)
    planned = plan_groups(_spec(path), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)
    plan = _received(planned, 1, rows.n_rows)
    in_memory = load_local_shard(plan)  # type: ignore[arg-type]
    on_disk = load_local_shard(plan, spill_to=tmp_path / "cache")  # type: ignore[arg-type]
    on_disk.validate()
    in_memory.validate()
    mine = planned.plan.worker_ranges(1)
    assert in_memory.n_rows == on_disk.n_rows == sum(r.rows for r in mine)
    assert in_memory.nnz == on_disk.nnz

    def as_rows(d: CSRData) -> list[tuple[float, bytes, bytes]]:
        return sorted((float(d.labels[r]), d.indices[d.indptr[r]:d.indptr[r + 1]].tobytes(),
                       d.values[d.indptr[r]:d.indptr[r + 1]].tobytes()) for r in range(d.n_rows))

    assert as_rows(in_memory) == as_rows(on_disk)
    assert set(np.unique(in_memory.labels)) == {-1.0, 1.0}
    # Shuffled once: not in the file's order.
    direct = concat_rows(list(read_pieces(planned.root, mine, planned.params)), 1)
    assert not np.array_equal(np.sign(direct.labels), in_memory.labels)


def test_a_file_without_a_column_the_mapping_reads_is_refused(rows: CSRData,
                                                               tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    write_parquet(rows, tmp_path / "f0.parquet", 500, stop=1500)
    other = write_parquet(rows, tmp_path / "f1.parquet", 500, first=1500)
    pq.write_table(pq.read_table(other).drop(["label"]), other, row_group_size=500)
    with pytest.raises(DataError, match=r"f1.parquet: no column\(s\) label \(columns: "
                                        r"indices, values\)"):
        plan_groups(_spec(tmp_path), workers=2, seed=0, val_fraction=0.1, test_fraction=0.0)


def test_a_data_set_at_a_url(rows: CSRData, tmp_path: Path) -> None:
    """An fsspec URL plans and reads as a local path does: the files named under the URL's
    directory, read back through fsspec."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for k in range(2):
        written = write_parquet(rows, tmp_path / f"f{k}.parquet", 400, first=k * 1500,
                                stop=(k + 1) * 1500)
        fs.pipe(f"/pq-plan/f{k}.parquet", written.read_bytes())
    try:
        planned = plan_groups(_spec("memory://pq-plan/"), workers=2, seed=0, val_fraction=0.1,
                              test_fraction=0.0)
        assert planned.root in ("memory://pq-plan/", "memory:///pq-plan/")  # (as fsspec names)
        assert {r.file for r in planned.plan.ranges} == {"f0.parquet", "f1.parquet"}
        read = sum(p.n_rows for w in range(2) for p in read_pieces(
            planned.root, planned.plan.worker_ranges(w), planned.params))
        assert read == planned.plan.train_rows == rows.n_rows - planned.plan.val.n_rows
    finally:
        fs.rm("/pq-plan", recursive=True)
