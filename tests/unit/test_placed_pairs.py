"""A Parquet table of one sparse pair loads into its shuffled places directly, giving exactly
the rows, labels, weights and column mapping of the general gather-then-shuffle path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.formats import csvquery
from hogwild.data.formats.columnar import read_columns
from hogwild.data.formats.csvquery import load_columnar_source, parse_csv_spec
from hogwild.data.hashing.tables import apply_columns, fit_columns
from hogwild.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _write(path: Path, rows: list[list[tuple[int, float]]], *, labels: Any = None,
           weights: Any = None, index_type: Any = None, group: int = 7) -> Path:
    n = len(rows)
    cols: dict[str, Any] = {
        "y": pa.array(np.tile([1.0, -1.0, 0.25], n)[:n] if labels is None else labels),
        "idx": pa.array([[i for i, _ in r] for r in rows], pa.list_(index_type or pa.int64())),
        "val": pa.array([[v for _, v in r] for r in rows], pa.list_(pa.float32()))}
    if weights is not None:
        cols["w"] = pa.array(weights)
    pq.write_table(pa.table(cols), path, row_group_size=group)
    return path


def _rows(n: int, seed: int = 0, zeros: bool = False) -> list[list[tuple[int, float]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx = sorted(rng.choice(300, size=int(rng.integers(0, 6)), replace=False).tolist())
        vals = [0.0 if zeros and rng.random() < 0.2 else float(np.round(rng.random() + 0.1, 3))
                for _ in idx]
        out.append(list(zip(idx, vals)))
    return out


def _general(rest: str, seed: int | None, hashing: Any = None) -> tuple[CSRData, dict[str, Any]]:
    path, options = parse_csv_spec(rest, "parquet")
    if hashing is not None:
        return apply_columns(hashing, read_columns("parquet", path, params=hashing), seed), \
            dict(hashing)
    return fit_columns(read_columns("parquet", path, options=options), options, seed)


def _same(a: CSRData, b: CSRData) -> None:
    for name in ("indptr", "indices", "values", "labels"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.n_features == b.n_features
    assert (a.weights is None) == (b.weights is None)
    if a.weights is not None:
        np.testing.assert_array_equal(a.weights, b.weights)
    assert a.label_note == b.label_note


@pytest.mark.parametrize("index_type", ["int64", "int32"])
@pytest.mark.parametrize("zeros", [False, True])
def test_placed_rows_are_the_general_paths(tmp_path: Path, index_type: str,
                                           zeros: bool) -> None:
    path = _write(tmp_path / "d.parquet", _rows(100, zeros=zeros),
                  weights=np.linspace(0.5, 2.0, 100), index_type=getattr(pa, index_type)())
    rest = f"{path}?label=y&sparse=idx:val&weight=w"
    placed, params = load_columnar_source("parquet", rest, shuffle_seed=5)
    general, expected = _general(rest, 5)
    assert csvquery.placed_table(*parse_csv_spec(rest, "parquet"), None, 5) is not None
    _same(placed, general)
    params.pop("fit_seconds")
    assert params == expected
    # Applied to another file of the same columns: the fitted width holds (an index beyond
    # it stores nothing), as on the general path.
    other = _write(tmp_path / "o.parquet", [[(5, 1.0), (400, 2.0)], [(299, 0.5)]] * 3,
                   weights=np.ones(6), index_type=getattr(pa, index_type)())
    applied, _ = load_columnar_source("parquet", f"{other}?", hashing=params, shuffle_seed=1)
    _same(applied, _general(f"{other}?", 1, params)[0])
    assert applied.nnz == 6
    # Unshuffled (a test set): placed in file order, the general path's rows exactly.
    assert csvquery.placed_table(other.as_posix(), parse_csv_spec(f"{other}?", "parquet")[1],
                                 params, None) is not None
    in_order, _ = load_columnar_source("parquet", f"{other}?", hashing=params)
    _same(in_order, _general(f"{other}?", None, params)[0])
    assert in_order.indices.tolist() == [5, 299] * 3


def test_rows_out_of_order_and_a_missing_label_take_the_general_path(tmp_path: Path) -> None:
    unsorted = _write(tmp_path / "u.parquet", [[(9, 1.0), (3, 2.0)], [(1, 1.0), (1, 1.0)]] * 5)
    rest = f"{unsorted}?label=y&sparse=idx:val"
    assert csvquery.placed_table(*parse_csv_spec(rest, "parquet"), None, 0) is None
    data, _ = load_columnar_source("parquet", rest, shuffle_seed=0)
    data.validate()  # sorted, repeats summed
    assert data.nnz == 15
    # One row out of order in the last row group, after the others were placed: the order
    # is checked as the rows are copied, and the load still goes the general way.
    late = _write(tmp_path / "late.parquet", _rows(30) + [[(9, 1.0), (3, 2.0)]])
    rest = f"{late}?label=y&sparse=idx:val"
    assert csvquery.placed_table(*parse_csv_spec(rest, "parquet"), None, 0) is None
    data, _ = load_columnar_source("parquet", rest, shuffle_seed=0)
    _same(data, _general(rest, 0)[0])
    data.validate()
    fitted = load_columnar_source("parquet", f"{_write(tmp_path / 'f.parquet', _rows(20))}"
                                  "?label=y&sparse=idx:val", shuffle_seed=0)[1]
    table = pq.read_table(tmp_path / "f.parquet").drop(["y"])
    pq.write_table(table, tmp_path / "nolabel.parquet")
    unlabelled, _ = load_columnar_source("parquet", f"{tmp_path / 'nolabel.parquet'}?",
                                         hashing=fitted, shuffle_seed=0)
    assert np.isnan(unlabelled.labels).all()


def test_bad_values_name_their_row(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.parquet", _rows(30), weights=np.r_[np.ones(20), -1.0,
                                                                    np.ones(9)])
    with pytest.raises(DataError, match=r"d.parquet, row 21: column 'w': weight -1 is "
                                        r"negative"):
        load_columnar_source("parquet", f"{path}?label=y&sparse=idx:val&weight=w",
                             shuffle_seed=0)
    bad = _write(tmp_path / "b.parquet", [[(1, 1.0)]] * 8 + [[(-3, 1.0)]])
    with pytest.raises(DataError, match=r"b.parquet, row 9: column 'idx': index -3"):
        load_columnar_source("parquet", f"{bad}?label=y&sparse=idx:val", shuffle_seed=0)
