"""parquet: and arrow: sources: every column kind, directories, globs, fsspec URLs, Arrow IPC,
the same rows as CSV giving the same CSR, bad input in one line, and a model that keeps its
column mapping for predict/eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.hashing.tables import apply_hashing
from hogwild.data.sources import load_source_hashed
from hogwild.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
feather = pytest.importorskip("pyarrow.feather")

# Every column kind; the token list is lower-case so that the CSV text column says the same.
QUERY = ("label=y&weight=w&categorical=color,shop&text=desc,tags&sparse=idx:val"
         "&cross=color*shop&onehot_max=3&hash_bits=12")


def _rows(n: int, seed: int = 0) -> dict[str, list[Any]]:
    rng = np.random.default_rng(seed)
    words = ["red", "fast", "car", "blue", "slow", "boat"]
    cols: dict[str, list[Any]] = {k: [] for k in
                                  ("y", "w", "x", "color", "shop", "desc", "tags", "idx", "val")}
    for _ in range(n):
        color = ["red", "blue", "green"][int(rng.integers(0, 3))]
        k = int(rng.integers(0, 4))
        idx = sorted(rng.choice(50, size=k, replace=False).tolist())
        cols["y"].append(float(color == "red"))
        cols["w"].append(float(rng.integers(1, 4)) / 2)
        cols["x"].append(float(np.round(rng.normal(), 3)))
        cols["color"].append(color)
        cols["shop"].append(f"s{int(rng.integers(0, 9))}")
        cols["desc"].append(" ".join(rng.choice(words, size=int(rng.integers(1, 4)))).title())
        cols["tags"].append(list(rng.choice(words, size=int(rng.integers(0, 3)))))
        cols["idx"].append(idx)
        cols["val"].append([float(np.round(v, 3)) for v in rng.random(k) + 0.1])
    return cols


def _table(cols: dict[str, list[Any]]) -> Any:
    return pa.table({**cols, "idx": pa.array(cols["idx"], pa.list_(pa.int64()))})


def _csv(cols: dict[str, list[Any]], path: Path) -> Path:
    lines = [",".join(cols)]
    for i in range(len(cols["y"])):
        cells = [" ".join(map(str, v[i])) if isinstance(v[i], list) else str(v[i])
                 for v in cols.values()]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def _same(a: CSRData, b: CSRData) -> None:
    assert a.n_features == b.n_features and a.n_rows == b.n_rows
    assert (a.to_scipy() != b.to_scipy()).nnz == 0
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.weights is not None and b.weights is not None
    np.testing.assert_array_equal(a.weights, b.weights)


def _fitted(params: dict[str, Any] | None) -> dict[str, Any]:
    assert params is not None
    return {k: v for k, v in params.items() if k not in ("fit_seconds", "sep")}


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Path, Path]:
    """A directory of three Parquet files (row groups of 7 rows) and the same rows as CSV."""
    cols = _rows(60)
    folder = tmp_path / "pq"
    folder.mkdir()
    table = _table(cols)
    for i, start in enumerate((0, 25, 40)):
        stop = {0: 25, 25: 40, 40: 60}[start]
        pq.write_table(table.slice(start, stop - start), folder / f"part-{i}.parquet",
                       row_group_size=7)
    (folder / "_SUCCESS").write_text("")
    return folder, _csv(cols, tmp_path / "same.csv")


def test_directory_of_parquet_files_equals_the_same_rows_as_csv(parts: tuple[Path, Path]) -> None:
    folder, csv = parts
    from_pq, fitted_pq = load_source_hashed(f"parquet:{folder}?{QUERY}")
    from_csv, fitted_csv = load_source_hashed(f"csv:{csv}?{QUERY}")
    _same(from_pq, from_csv)
    assert _fitted(fitted_pq) == _fitted(fitted_csv)
    kinds = {c["name"]: c["kind"] for c in _fitted(fitted_pq)["columns"]}
    assert kinds == {"x": "numeric", "color": "onehot", "shop": "hashed", "desc": "text",
                     "tags": "text", "idx": "sparse", "color*shop": "cross"}
    # Every kind gave entries: the sparse block holds exactly the pairs' values.
    spec = next(c for c in _fitted(fitted_pq)["columns"] if c["kind"] == "sparse")
    block = from_pq.to_scipy()[:, spec["offset"]:spec["offset"] + spec["width"]]
    values = pq.read_table(folder).column("val").to_pylist()
    assert block.nnz == sum(map(len, values)) > 0
    assert float(block.sum()) == pytest.approx(sum(map(sum, values)), rel=1e-6)


def test_glob_memory_url_and_arrow_ipc_read_the_same_rows(parts: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    folder, _ = parts
    whole, _ = load_source_hashed(f"parquet:{folder}?{QUERY}")
    globbed, _ = load_source_hashed(f"parquet:{folder}/part-*.parquet?{QUERY}")
    _same(globbed, whole)
    first, _ = load_source_hashed(f"parquet:{folder}/part-0.parquet?{QUERY}")
    assert first.n_rows == 25

    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for path in sorted(folder.glob("*.parquet")):
        memory.pipe(f"/hogwild-test/{path.name}", path.read_bytes())
    try:
        remote, _ = load_source_hashed(f"parquet:memory://hogwild-test?{QUERY}")
        _same(remote, whole)
    finally:
        memory.rm("/hogwild-test", recursive=True)

    table = pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("*.parquet"))])
    feather.write_feather(table, tmp_path / "all.arrow", chunksize=11)
    ipc, _ = load_source_hashed(f"arrow:{tmp_path / 'all.arrow'}?{QUERY}")
    _same(ipc, whole)
    with pa.OSFile(str(tmp_path / "stream.arrows"), "wb") as sink, \
            pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=13)
    stream, _ = load_source_hashed(f"arrow:{tmp_path / 'stream.arrows'}?{QUERY}")
    _same(stream, whole)


def _bad(tmp_path: Path, **changes: Any) -> str:
    cols = _rows(10)
    table = _table(cols)
    for name, array in changes.items():
        table = table.set_column(table.schema.get_field_index(name), name, array)
    pq.write_table(table, tmp_path / "bad.parquet", row_group_size=4)
    with pytest.raises(DataError) as err:
        load_source_hashed(f"parquet:{tmp_path / 'bad.parquet'}?{QUERY}")
    message = str(err.value)
    assert "\n" not in message and "bad.parquet" in message
    return message


def test_bad_input_is_one_line_naming_file_and_column(tmp_path: Path) -> None:
    labels = [1.0] * 10
    labels[5] = float("nan")
    assert "row 6: column 'y': value nan is not finite" in _bad(tmp_path, y=pa.array(labels))
    labels[5] = None  # type: ignore[call-overload]
    assert "row 6: column 'y' is empty (null)" in _bad(tmp_path, y=pa.array(labels))
    message = _bad(tmp_path, x=pa.array(["a"] * 10))
    assert "column 'x' has type string, not numbers (list it in categorical= or text=)" \
        in message
    message = _bad(tmp_path, color=pa.array([["a"]] * 10))
    assert "column 'color' has type list<element: string>: a categorical column" in message
    message = _bad(tmp_path, idx=pa.array([[1, 2]] * 10), val=pa.array([[1.0]] * 10))
    assert "row 1: columns 'idx' and 'val' hold 2 indices but 1 values" in message
    message = _bad(tmp_path, w=pa.array([-1.0] * 10))
    assert "row 1: column 'w': weight -1 is negative" in message
    pq.write_table(pa.table({"y": [1.0], "color": ["red"]}), tmp_path / "bad.parquet")
    missing = r"bad.parquet: no column\(s\) shop, desc, tags, idx, val, w \(columns: y, color\)"
    with pytest.raises(DataError, match=missing):
        load_source_hashed(f"parquet:{tmp_path / 'bad.parquet'}?{QUERY}")
    with pytest.raises(DataError, match="data not found"):
        load_source_hashed(f"parquet:{tmp_path / 'nothing-*.parquet'}?{QUERY}")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(DataError, match=r"text.parquet: cannot read as Parquet"):
        load_source_hashed(f"parquet:{tmp_path / 'text.parquet'}?label=y")
    with pytest.raises(DataError, match="unknown parameter"):
        load_source_hashed(f"parquet:{tmp_path / 'bad.parquet'}?label=y&sep=tab")


def test_a_later_file_missing_a_column_is_named(parts: tuple[Path, Path]) -> None:
    folder, _ = parts
    pq.write_table(pq.read_table(folder / "part-2.parquet").drop_columns(["shop"]),
                   folder / "part-2.parquet")
    with pytest.raises(DataError, match=r"part-2.parquet: no column\(s\) shop"):
        load_source_hashed(f"parquet:{folder}?{QUERY}")


def test_train_on_parquet_then_predict_and_eval_apply_the_saved_mapping(
        parts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = parts
    out = tmp_path / "runs"
    assert main(["train", "--data", f"parquet:{folder}?{QUERY}", "--out", str(out),
                 "--epochs", "3", "--data-cache", "false", "--loss", "logistic", "-q"],
                environ={}) == 0
    run = out / "latest"
    saved = json.loads((run / "model.json").read_text())["hashing"]
    assert saved["weight"] == "w" and saved["label"] == "y"
    # New rows in a Parquet file: encoded with the model's mapping, not one fitted anew.
    new = _rows(30, seed=5)
    pq.write_table(_table(new), tmp_path / "new.parquet")
    applied = apply_hashing(saved, f"parquet:{tmp_path / 'new.parquet'}")
    refit, _ = load_source_hashed(f"parquet:{tmp_path / 'new.parquet'}?{QUERY}")
    assert applied.n_features == saved["n_features"]
    assert refit.n_features != applied.n_features or (
        refit.to_scipy() != applied.to_scipy()).nnz
    capsys.readouterr()
    assert main(["eval", "--model", str(run), "--data", f"parquet:{tmp_path / 'new.parquet'}",
                 "--json"], environ={}) == 0
    from_parquet = json.loads(capsys.readouterr().out)
    _csv(new, tmp_path / "new.csv")
    assert main(["eval", "--model", str(run), "--data", str(tmp_path / "new.csv"), "--json"],
                environ={}) == 0
    from_csv = json.loads(capsys.readouterr().out)
    assert from_parquet["accuracy"] == from_csv["accuracy"] > 0.9
    assert from_parquet["loss"] == pytest.approx(from_csv["loss"], rel=1e-12)
    preds = tmp_path / "preds.txt"
    assert main(["predict", "--model", str(run), "--data",
                 f"arrow:{_feather(tmp_path, new)}", "--out", str(preds)], environ={}) == 0
    assert len(preds.read_text().split()) == 30


def _feather(tmp_path: Path, cols: dict[str, list[Any]]) -> Path:
    path = tmp_path / "new.feather"
    feather.write_feather(_table(cols), path)
    return path


def test_rows_are_placed_in_the_shuffled_order_as_they_are_assembled(
        parts: tuple[Path, Path]) -> None:
    from hogwild.data.transform.split import shuffle_order

    folder, _ = parts
    plain, _ = load_source_hashed(f"parquet:{folder}?{QUERY}")
    shuffled, _ = load_source_hashed(f"parquet:{folder}?{QUERY}", shuffle_seed=7)
    _same(shuffled, plain.take(shuffle_order(plain.n_rows, 7)))
    shuffled.validate()


def test_weights_reach_the_training_split(parts: tuple[Path, Path]) -> None:
    from hogwild import config
    from hogwild.engine.runstart import load_splits

    folder, _ = parts
    splits = load_splits(config.load(None, {}, {"data": f"parquet:{folder}?{QUERY}",
                                                "test_fraction": 0.2, "val_fraction": 0.1,
                                                "data_cache": False}))
    table = pq.read_table(folder)
    by_row = {(float(y), float(w)) for y, w in zip(table.column("y").to_pylist(),
                                                  table.column("w").to_pylist())}
    for part in (splits.train, splits.val, splits.test):
        assert part.weights is not None and part.weights.shape == (part.n_rows,)
        # Each row keeps its own weight (labels are encoded -1/+1 from 0/1).
        pairs = {((float(y) + 1) / 2, float(w)) for y, w in zip(part.labels, part.weights)}
        assert pairs <= by_row
    assert splits.train.n_rows + splits.val.n_rows + splits.test.n_rows == 60


class _PairsPart:
    """A part holding one sparse pair (as a row group would), for gather()."""

    def __init__(self, counts: list[int], index: np.ndarray, values: np.ndarray) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        self.index, self.values = index, values
        self.n_rows = len(counts)
        self.path, self.names = "part", ["i", "v"]

    def pairs(self, indices: str, values: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.counts, self.index, self.values

    def locator(self) -> Any:
        return lambda row: f"part, row {row + 1}"


def test_pairs_go_into_one_buffer_sized_by_the_count_and_fall_back_when_it_is_wrong() -> None:
    """Pairs read into arrays sized from the format's count give the same entries as the
    parts joined; a count too small, or a later part of a wider dtype, falls back to joining
    parts without losing or changing an entry."""
    from hogwild.data.formats.columns import Needs, gather

    rng = np.random.default_rng(3)
    parts = []
    for n in (5, 0, 7, 3):
        counts = rng.integers(0, 4, size=n).tolist()
        k = int(sum(counts))
        parts.append(_PairsPart(counts, rng.integers(0, 50, size=k).astype(np.int32),
                                rng.random(k).astype(np.float32)))
    needs = Needs(pairs=frozenset({("i", "v")}))
    total = sum(p.index.size for p in parts)

    def joined(capacity: dict[tuple[str, str], int] | None, pieces: list[_PairsPart]) -> Any:
        return gather(pieces, needs, "data", ["i", "v"], capacity).pairs("i", "v")

    plain = joined(None, parts)
    for capacity in (total, total + 9, total - 1, 4, 0):
        got = joined({("i", "v"): capacity}, parts)
        for a, b in zip(got, plain, strict=True):
            np.testing.assert_array_equal(a, b)
    # Exactly sized: the entries are views of one buffer of that size, in their read dtype.
    exact = joined({("i", "v"): total + 2}, parts)
    assert exact[1].dtype == np.int32 and exact[2].dtype == np.float32
    assert exact[1].base is not None and exact[1].base.shape == (total + 2,)
    # A later part with int64 indices and float64 values: joined, widened as numpy joins.
    wide = _PairsPart([2, 1], np.array([1, 2, 3], dtype=np.int64), np.array([.5, .25, 1.]))
    mixed = joined({("i", "v"): total + 3}, [*parts, wide])
    assert mixed[1].dtype == np.int64 and mixed[2].dtype == np.float64
    np.testing.assert_array_equal(mixed[1], np.concatenate([plain[1], wide.index]))
    np.testing.assert_array_equal(mixed[2], np.concatenate([plain[2], wide.values]))
    np.testing.assert_array_equal(mixed[0], np.concatenate([plain[0], wide.counts]))


@pytest.mark.parametrize("readers", [2, 3])
def test_row_groups_read_side_by_side_come_in_order_and_close_their_files(
        parts: tuple[Path, Path], readers: int) -> None:
    import dataclasses

    from hogwild.data.formats import columnar
    from hogwild.data.formats.csvquery import parse_csv_spec

    folder, _ = parts
    read_options = parse_csv_spec(f"{folder}?{QUERY}", "parquet")[1]
    read = columnar.table_read("parquet", str(folder), options=read_options)
    opened: list[Any] = []

    def opener(name: str) -> Any:
        handle = read.files.opener(name)
        opened.append(handle)
        return handle

    watched = dataclasses.replace(read, files=columnar.Files(read.files.names, opener))

    def as_rows(parts_: Any) -> list[tuple[str, int, int, dict[str, list[Any]]]]:
        return [(p.path, p.first_row, p.n_rows,
                 {c: a.to_pylist() for c, a in p.arrays.items()}) for p in parts_]

    one = as_rows(read.parts(readers=1))
    side = as_rows(watched.parts(readers=readers))
    assert side == one and len(one) == 4 + 3 + 3  # every file's row groups of 7, in order
    assert opened and all(h.closed for h in opened)
    # A pass left early (the caller found what it needed) still closes what it opened.
    opened.clear()
    it = watched.parts(readers=readers)
    next(it)
    it.close()
    assert opened and all(h.closed for h in opened)
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for path in sorted(folder.glob("*.parquet")):
        memory.pipe(f"/hogwild-side/{path.name}", path.read_bytes())
    try:
        remote = columnar.table_read("parquet", "memory://hogwild-side", options=read_options)
        assert [row[1:] for row in as_rows(remote.parts(readers=readers))] == \
            [row[1:] for row in one]
    finally:
        memory.rm("/hogwild-side", recursive=True)


def test_the_read_ahead_closed_from_its_own_helper_thread_does_not_join_itself() -> None:
    """A reader abandoned after an error is closed wherever its last reference goes, which can
    be the helper thread (a cycle collected there): closing must not try to join that thread
    (it raised "cannot join current thread", printed as an unraisable exception)."""
    import threading

    from hogwild.data.formats.columnar import _ahead

    seen: dict[str, Any] = {}
    closed = threading.Event()

    def items() -> Any:
        yield "first"
        try:
            seen["ahead"].close()  # runs in the helper thread, the consumer holding "first"
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever it was
            seen["error"] = exc
        finally:
            closed.set()
        yield "second"

    ahead = _ahead(items())
    seen["ahead"] = ahead
    assert next(ahead) == "first"
    assert closed.wait(10), "the helper never read ahead"
    assert "error" not in seen, repr(seen.get("error"))
    with pytest.raises(StopIteration):
        next(ahead)  # closed: nothing more comes
