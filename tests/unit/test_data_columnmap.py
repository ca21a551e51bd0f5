"""The column mapping of table sources: weights, sparse pairs and crosses (csv:), and
`hogwild inspect` naming crossed features."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.hashing.crosses import tuple_buckets
from hogwild.data.hashing.tables import apply_hashing
from hogwild.data.sources import load_source_hashed
from hogwild.errors import DataError

CSV = """y,w,color,size,desc,idx,val,n
1,1.0,red,S,Hello world,1 3,0.5 2,3
0,2.0,blue,M,hello there,0,1,0
1,0.5,red,L,,2 3,1 1,1.5
"""


def _load(tmp_path: Path, query: str, text: str = CSV) -> tuple[CSRData, dict[str, Any]]:
    path = tmp_path / "t.csv"
    path.write_text(text)
    data, params = load_source_hashed(f"csv:{path}?{query}")
    assert params is not None
    return data, params


def _spec(params: dict[str, Any], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = next(c for c in params["columns"] if c["name"] == name)
    return spec


def test_weight_column_sets_per_row_weights(tmp_path: Path) -> None:
    data, params = _load(tmp_path, "label=y&weight=w&categorical=color,size&ignore=desc,idx,val")
    assert data.weights is not None and data.weights.dtype == np.float32
    np.testing.assert_array_equal(data.weights, [1.0, 2.0, 0.5])
    assert params["weight"] == "w"
    # The weight column is no feature: color (2) + size (3) + n (1).
    assert data.n_features == 6
    assert [c["name"] for c in params["columns"]] == ["color", "size", "n"]
    # Without weight= there are none.
    plain, _ = _load(tmp_path, "label=y&categorical=color,size&ignore=desc,idx,val")
    assert plain.weights is None
    # Weights survive the shuffle the loaders apply.
    shuffled, _ = load_source_hashed(f"csv:{tmp_path / 't.csv'}?label=y&weight=w&categorical="
                                     "color,size&ignore=desc,idx,val", shuffle_seed=3)
    assert shuffled.weights is not None
    by_label = dict(zip(shuffled.weights.tolist(), shuffled.labels.tolist()))
    assert by_label == {1.0: 1.0, 2.0: 0.0, 0.5: 1.0}


@pytest.mark.parametrize("cell,message", [("-1", "weight -1 is negative"),
                                          ("", "column 'w' is empty"),
                                          ("inf", "is not finite")])
def test_bad_weight_is_one_line_naming_file_line_column(tmp_path: Path, cell: str,
                                                        message: str) -> None:
    text = CSV.replace("0,2.0,blue", f"0,{cell},blue")
    with pytest.raises(DataError) as err:
        _load(tmp_path, "label=y&weight=w&categorical=color,size&ignore=desc,idx,val", text)
    line = str(err.value)
    assert "\n" not in line and "t.csv:3" in line and message in line and "'w'" in line


def test_csr_weights_are_validated() -> None:
    args = (np.array([0, 1, 1]), np.array([0]), np.array([1.0]), np.array([1.0, 0.0]), 2)
    CSRData(*args, weights=np.array([1.0, 0.0]))
    with pytest.raises(DataError, match="weight of row 1"):
        CSRData(*args, weights=np.array([1.0, -0.5]))
    with pytest.raises(DataError, match="weight of row 0"):
        CSRData(*args, weights=np.array([np.nan, 1.0]))
    with pytest.raises(DataError, match="weights of shape"):
        CSRData(*args, weights=np.array([1.0]))
    data = CSRData(*args, weights=np.array([2.0, 3.0]))
    np.testing.assert_array_equal(data.take(np.array([1, 0])).weights, [3.0, 2.0])
    np.testing.assert_array_equal(data.slice(1, 2).weights, [3.0])


def test_sparse_pair_columns_give_their_indices_and_values(tmp_path: Path) -> None:
    data, params = _load(tmp_path, "label=y&sparse=idx:val&ignore=w,color,size,desc,n")
    spec = _spec(params, "idx")
    assert spec["kind"] == "sparse" and spec["values"] == "val" and spec["width"] == 4
    dense = data.to_scipy().toarray()
    np.testing.assert_array_equal(dense, [[0, 0.5, 0, 2], [1, 0, 0, 0], [0, 0, 1, 1]])
    # New rows: an index beyond the fitted width (4) and a zero value store nothing.
    (tmp_path / "new.csv").write_text("y,w,color,size,desc,idx,val,n\n"
                                      "1,1,red,S,x,9 1 2,5 2 0,1\n")
    again = apply_hashing(params, tmp_path / "new.csv").to_scipy().toarray()
    np.testing.assert_array_equal(again, [[0, 2, 0, 0]])
    bad = CSV.replace("0,1,0\n", "0 2,1,0\n")
    with pytest.raises(DataError) as err:
        _load(tmp_path, "label=y&sparse=idx:val&ignore=w,color,size,desc,n", bad)
    assert "t.csv:3" in str(err.value) and "2 indices but 1 values" in str(err.value)
    bad = CSV.replace("0,1,0\n", "-1,1,0\n")
    with pytest.raises(DataError, match=r"t.csv:3: column 'idx': index -1.0 is not a whole"):
        _load(tmp_path, "label=y&sparse=idx:val&ignore=w,color,size,desc,n", bad)


def test_cross_hashes_every_pair_of_the_two_columns_features(tmp_path: Path) -> None:
    query = "label=y&categorical=color,size&text=desc&ignore=w,idx,val,n&hash_bits=10"
    base, _ = _load(tmp_path, query)
    data, params = _load(tmp_path, query + "&cross=color*size,color*desc")
    cs, cd = _spec(params, "color*size"), _spec(params, "color*desc")
    assert cs["kind"] == cd["kind"] == "cross" and cs["columns"] == ["color", "size"]
    assert cs["offset"] == base.n_features and cd["offset"] == base.n_features + 1024
    assert data.n_features == base.n_features + 2 * 1024
    # The columns' own features are unchanged; each row has one color*size feature, and
    # color*desc features for each of its tokens (row 3 has no text: none).
    head = data.to_scipy()[:, :base.n_features].toarray()
    np.testing.assert_array_equal(head, base.to_scipy().toarray())
    m = data.to_scipy()
    block = m[:, cs["offset"]:cs["offset"] + 1024]
    assert block.getnnz(axis=1).tolist() == [1, 1, 1]
    text_block = m[:, cd["offset"]:cd["offset"] + 1024]
    assert text_block.getnnz(axis=1).tolist() == [2, 2, 0]
    # Row 1's color*size feature is the hash of (red, S), as inspect recomputes it.
    codes, signs = tuple_buckets(["color", "size"], [["red", "S"]], 1024, 0)
    assert block[0, int(codes[0])] == signs[0]
    assert ["red", "S"] in cs["top_values"] and cd["distinct"] == 4
    # Order matters, as in Vowpal Wabbit: size*color is another feature.
    flipped, other = _load(tmp_path, query + "&cross=size*color")
    assert _spec(other, "size*color")["top_values"][0] == ["S", "red"]
    swapped, _ = tuple_buckets(["size", "color"], [["S", "red"]], 1024, 0)
    assert swapped[0] != codes[0]
    assert flipped.to_scipy()[0, cs["offset"] + int(swapped[0])] != 0


def test_cross_of_a_numeric_column_carries_its_value(tmp_path: Path) -> None:
    data, params = _load(tmp_path, "label=y&categorical=color&numeric=n&cross=color*n"
                                   "&hash_bits=8&scale=none")
    spec = _spec(params, "color*n")
    block = data.to_scipy()[:, spec["offset"]:].toarray()
    # |value| = n (row 2 has n = 0: no feature).
    np.testing.assert_allclose(np.abs(block).sum(axis=1), [3.0, 0.0, 1.5])


def test_cross_is_applied_as_fitted_to_new_data(tmp_path: Path) -> None:
    query = "label=y&categorical=color,size&ignore=w,idx,val,desc,n&cross=color*size"
    data, params = _load(tmp_path, query)
    again = apply_hashing(params, tmp_path / "t.csv")
    assert (again.to_scipy() != data.to_scipy()).nnz == 0


@pytest.mark.parametrize("cross,message", [("color*nope", r"t.csv: no column\(s\) nope"),
                                           ("color", "two columns or more"),
                                           ("color*w", "column 'w' is not a feature")])
def test_bad_cross_is_one_clear_line(tmp_path: Path, cross: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        _load(tmp_path, f"label=y&weight=w&categorical=color,size&ignore=desc,idx,val"
                        f"&cross={cross}")


def test_inspect_names_crossed_features(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # The label is decided by the pair (city, day) alone: paris on sunday is positive.
    rng = np.random.default_rng(0)
    lines = ["y,city,day"]
    for _ in range(800):
        city = ["paris", "rome"][int(rng.integers(0, 2))]
        day = ["sunday", "monday"][int(rng.integers(0, 2))]
        lines.append(f"{int(city == 'paris' and day == 'sunday')},{city},{day}")
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    source = f"csv:{tmp_path / 'c.csv'}?label=y&categorical=city,day&cross=city*day&hash_bits=12"
    code = main(["train", "--data", source, "--out", str(tmp_path / "runs"),
                 "--epochs", "5", "--data-cache", "false", "--loss", "logistic", "-q"],
                environ={})
    assert code == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "runs" / "latest"), "--top", "1", "--json"],
                environ={}) == 0
    doc = json.loads(capsys.readouterr().out)
    top = doc["positive"][0]["name"]
    assert top.lstrip("-") == "city=paris * day=sunday", doc["positive"]
