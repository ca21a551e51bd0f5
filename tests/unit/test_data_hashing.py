"""Feature hashing of CSV/TSV columns: layout, determinism, collisions, errors, the csv: source,
training and prediction through stored parameters, and the `hogwild hash` command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.formats.csvquery import parse_csv_spec
from hogwild.data.formats.csvtable import read_table
from hogwild.data.formats.svmlight import read_svmlight
from hogwild.data.hashing.tables import apply_hashing, fit_hashing
from hogwild.data.sources import load_source
from hogwild.data.transform.encodings import (
    HashOptions,
    buckets_for,
    signed_buckets_for,
    sqrt_buckets,
)
from hogwild.errors import DataError, DataFormatError

COLORS = ("red", "green", "blue", "black", "white")


def write_fixture(path: Path, rows: int, seed: int = 0, cities: int = 3000,
                  sep: str = ",") -> None:
    """A learnable table: the label is the sign of a per-city effect + a per-colour effect +
    a numeric column + review words, with 5 % of labels flipped."""
    rng = np.random.default_rng(seed)
    city_effect = np.random.default_rng(99).normal(size=cities)
    city = rng.integers(0, cities, rows)
    color = rng.integers(0, len(COLORS), rows)
    x = rng.normal(scale=50.0, size=rows)
    good = rng.integers(0, 3, rows)
    score = city_effect[city] + np.array([1.5, -1.5, 0, 0.5, -0.5])[color] + x / 50 + good - 1
    y = np.where(score > 0, 1, -1) * np.where(rng.random(rows) < 0.05, -1, 1)
    words = np.array(["fine", "place", "ok", "visit"])
    lines = [sep.join(["y", "city", "color", "x", "review"])]
    for i in range(rows):
        review = " ".join(["good"] * int(good[i]) + list(rng.choice(words, 2)))
        lines.append(sep.join([str(y[i]), f"c{city[i]}", COLORS[color[i]], f"{x[i]:.3f}",
                               review]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


OPTIONS = HashOptions(label="y", categorical=("city", "color"), text=("review",))
# The small split-hashed blocks of earlier versions, asked for explicitly (city hashed).
SQRT = HashOptions(label="y", categorical=("city", "color"), text=("review",), buckets="sqrt",
                   onehot_max=64)


@pytest.fixture(scope="module")
def fixture_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("csv") / "train.csv"
    write_fixture(path, 6000)
    return path


def test_layout_and_row_contents(fixture_csv: Path) -> None:
    data, params = fit_hashing(fixture_csv, SQRT)
    data.validate()
    cols = {c["name"]: c for c in params["columns"]}
    assert [c["name"] for c in params["columns"]] == ["city", "color", "x", "review"]
    assert cols["color"]["kind"] == "onehot" and cols["color"]["values"] == sorted(COLORS)
    city = cols["city"]
    assert city["kind"] == "hashed" and city["k"] == 2
    assert city["buckets"] == math.ceil(math.sqrt(city["distinct"]))
    assert city["width"] == 2 * city["buckets"]
    assert cols["x"]["kind"] == "numeric" and cols["review"]["kind"] == "text"
    assert params["n_features"] == data.n_features == sum(c["width"] for c in params["columns"])
    assert data.n_rows == 6000 and set(np.unique(data.labels)) == {-1.0, 1.0}
    m = data.to_scipy().tocsc()

    def block(name: str) -> np.ndarray:
        c = cols[name]
        return np.asarray((m[:, c["offset"]:c["offset"] + c["width"]] != 0).sum(axis=1)).ravel()

    assert (block("color") == 1).all()                  # one-hot: exactly one
    b = city["buckets"]
    first = m[:, city["offset"]:city["offset"] + b]
    second = m[:, city["offset"] + b:city["offset"] + 2 * b]
    assert (np.asarray((first != 0).sum(axis=1)).ravel() == 1).all()   # one per sub-block
    assert (np.asarray((second != 0).sum(axis=1)).ravel() == 1).all()
    x = m[:, cols["x"]["offset"]].toarray().ravel()
    assert np.abs(x).max() == pytest.approx(1.0)       # maxabs scaling
    table = read_table(fixture_csv)
    raw_x = np.array([float(v) for v in table.columns["x"]])
    np.testing.assert_allclose(x, raw_x * cols["x"]["scale"], rtol=1e-6)


def test_text_counts_and_hashes_match_the_stored_rule(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("label,t\n1,Spam spam EGGS\n-1,\n1,eggs\n", encoding="utf-8")
    data, params = fit_hashing(path, HashOptions(label="label", text=("t",), k=1,
                                                 hash_bits=16))
    col = params["columns"][0]
    assert (col["kind"], col["buckets"], col["distinct"]) == ("text", 65536, 2)
    assert col["signed"] is True
    codes, signs = signed_buckets_for("t", ["eggs", "spam"], 1, 65536, 0)
    codes, signs = codes[:, 0], signs[:, 0]
    m = data.to_scipy().toarray()
    # lower-cased, counted, times the token's sign
    assert m[0, codes[1]] == 2.0 * signs[1] and m[0, codes[0]] == signs[0]
    assert m[1].sum() == 0.0 and m[2, codes[0]] == signs[0]


def test_apply_reproduces_fit_and_handles_new_values(fixture_csv: Path, tmp_path: Path) -> None:
    data, params = fit_hashing(fixture_csv, SQRT)
    again = apply_hashing(json.loads(json.dumps(params)), fixture_csv)
    for name in ("indptr", "indices", "values", "labels"):
        np.testing.assert_array_equal(getattr(again, name), getattr(data, name))
    other = tmp_path / "new.tsv"  # TSV by suffix, columns reordered, label missing
    other.write_text("review\tcolor\tcity\tx\n"
                     "good good\tpurple\tc17\t2\n"
                     "\tred\tnever-seen-city\t\n", encoding="utf-8")
    new = apply_hashing(params, other)
    assert new.n_features == data.n_features and np.isnan(new.labels).all()
    cols = {c["name"]: c for c in params["columns"]}
    row0 = set(new.to_scipy()[0].indices.tolist())
    color = range(cols["color"]["offset"], cols["color"]["offset"] + cols["color"]["width"])
    assert not row0 & set(color)                  # unseen one-hot value: nothing stored
    row1 = new.to_scipy()[1]
    assert len(row1.indices) == 1 + 2             # red + two city buckets; x empty
    with pytest.raises(DataError, match="no column.*review"):
        bad = tmp_path / "missing.csv"
        bad.write_text("y,city,color,x\n1,c1,red,0\n", encoding="utf-8")
        apply_hashing(params, bad)


def test_collision_rates_follow_the_birthday_bound() -> None:
    rng = np.random.default_rng(0)
    distinct = 4000
    values = np.array([f"user-{v}" for v in rng.permutation(10**6)[:distinct]])
    b = sqrt_buckets(distinct)
    for k in (1, 2, 3):
        codes = buckets_for("user", values, k, b, 0)
        _, counts = np.unique(codes, axis=0, return_counts=True)
        collided = counts[counts > 1].sum() / distinct
        expected = 1 - (1 - b ** -k) ** (distinct - 1)
        assert abs(collided - expected) < 0.03, (k, collided, expected)
    # Each sub-block's buckets are evenly loaded (the hash slices are uniform).
    load = np.bincount(buckets_for("user", values, 2, b, 0)[:, 1], minlength=b)
    assert load.max() < 2.5 * distinct / b and load.min() > 0


def test_quoted_csv_and_plain_split_agree(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    quoted = tmp_path / "quoted.csv"
    plain.write_text("y,c,n\n1,a b,1.5\n-1,c,2\n\n1,a b,-3\n", encoding="utf-8")
    quoted.write_text('y,c,n\n1,"a b",1.5\n-1,c,2\n\n1,"a b",-3\n', encoding="utf-8")
    opts = HashOptions(label="y", categorical=("c",))
    a, pa = fit_hashing(plain, opts)
    b, pb = fit_hashing(quoted, opts)
    assert pa["columns"] == pb["columns"]
    np.testing.assert_array_equal(a.to_scipy().toarray(), b.to_scipy().toarray())
    bom = tmp_path / "bom.csv"  # a byte-order mark before the header, as spreadsheets write
    bom.write_bytes(b"\xef\xbb\xbfy,c,n\n1,a,2\n")
    assert fit_hashing(bom, opts)[0].labels.tolist() == [1.0]
    comma = tmp_path / "comma.csv"
    comma.write_text('y,c,n\n1,"x, y",1\n-1,z,2\n', encoding="utf-8")
    _, pc = fit_hashing(comma, opts)
    assert pc["columns"][0]["values"] == ["x, y", "z"]


@pytest.mark.parametrize("quote", ["", '"'])
def test_bad_lines_are_named(tmp_path: Path, quote: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"y,c,n\n1,{quote}a{quote},1\n\n-1,b,x7\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.csv:4: column 'n': 'x7' is not a number"):
        fit_hashing(path, HashOptions(label="y", categorical=("c",)))
    path.write_text(f"y,c,n\n1,{quote}a{quote},1\n-1,b\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.csv:3: expected 3 fields"):
        fit_hashing(path, HashOptions(label="y"))
    path.write_text(f"y,c,n\n1,{quote}a{quote},1\n,b,2\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.csv:3: column 'y' is empty"):
        fit_hashing(path, HashOptions(label="y", categorical=("c",)))
    path.write_text(f"y,c,n\nspam,{quote}a{quote},1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.csv:2: column 'y': 'spam' is not a "
                                              r"number \(labels must be numbers\)"):
        fit_hashing(path, HashOptions(label="y", categorical=("c",)))
    path.write_text(f"y,c,n\n1,{quote}a{quote},inf\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.csv:2: column 'n': value 'inf' is not"):
        fit_hashing(path, HashOptions(label="y", categorical=("c",)))


def test_bad_options_and_specs(tmp_path: Path, fixture_csv: Path) -> None:
    with pytest.raises(DataError, match="no column"):
        fit_hashing(fixture_csv, HashOptions(label="y", categorical=("town",)))
    with pytest.raises(DataError, match="two roles"):
        HashOptions(label="y", categorical=("y",))
    with pytest.raises(DataError, match="k must be"):
        HashOptions(k=5)
    with pytest.raises(DataError, match="unknown parameter"):
        parse_csv_spec("f.csv?lable=y")
    with pytest.raises(DataError, match="bad value"):
        parse_csv_spec("f.csv?k=two")
    path, opts = parse_csv_spec("f.tsv?label=y&categorical=a,b&hash_bits=12&k=3&sep=tab")
    assert (path, opts.categorical, opts.hash_bits, opts.k, opts.sep) == (
        "f.tsv", ("a", "b"), 12, 3, "\t")
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty first line"):
        fit_hashing(empty, HashOptions())
    with pytest.raises(DataError, match="not found"):
        load_source("csv:/no/such.csv?label=y")


def test_csv_source_trains_and_predicts_with_stored_hashing(tmp_path: Path) -> None:
    from hogwild.commands.predict import score_file
    from hogwild.model.saved import SavedModel

    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    write_fixture(train, 8000, seed=1)
    write_fixture(test, 2000, seed=2)
    out = tmp_path / "out"
    spec = f"csv:{train}?label=y&categorical=city,color&text=review"
    # One thread: the same model every run (two threads' interleaving moved the accuracy
    # across the bar now and then).
    assert main(["train", "--data", spec, "--test", f"csv:{test}", "--loss", "logistic",
                 "--threads", "1", "--epochs", "5", "--out", str(out),
                 "--val-fraction", "0"]) == 0
    out = out / "latest"  # the run's own directory
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.75
    assert metrics["conflicts"]["rows"] == 8000 and metrics["conflicts"]["max_degree"] > 0
    model = SavedModel.load(out)
    assert model.hashing is not None and model.hashing["label"] == "y"
    scored = score_file(model, str(test))
    assert scored.metrics is not None
    assert scored.metrics["accuracy"] == pytest.approx(metrics["test_accuracy"])
    # The same file through the parameters directly gives the same margins.
    data = apply_hashing(model.hashing, test)
    margins = data.to_scipy() @ model.w[:-1] + model.w[-1]
    np.testing.assert_allclose(scored.margins, margins, rtol=1e-9, atol=1e-9)
    # New rows without the label column: predictions, and no metrics against made-up labels.
    unlabeled = tmp_path / "unlabeled.csv"
    lines = test.read_text().splitlines()
    unlabeled.write_text("\n".join(line.split(",", 1)[1] for line in lines) + "\n")
    blind = score_file(model, str(unlabeled))
    assert blind.metrics is None
    np.testing.assert_allclose(blind.margins, scored.margins, rtol=1e-12)


def test_hash_command_writes_svmlight_and_params(fixture_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "h.svm"
    assert main(["hash", str(fixture_csv), "--out", str(out), "--label", "y",
                 "--categorical", "city,color", "--text", "review"]) == 0
    data, params = fit_hashing(fixture_csv, OPTIONS)
    back = read_svmlight(out, n_features=data.n_features, cache=False)
    np.testing.assert_array_equal(back.indices, data.indices)
    np.testing.assert_allclose(back.values, data.values, rtol=1e-6)
    saved = json.loads(Path(f"{out}.hashing.json").read_text())
    assert saved["columns"] == json.loads(json.dumps(params["columns"]))
    other = tmp_path / "other.csv"
    write_fixture(other, 300, seed=5)
    out2 = tmp_path / "o.svm"
    assert main(["hash", str(other), "--out", str(out2), "--params", f"{out}.hashing.json"]) == 0
    again = read_svmlight(out2, n_features=data.n_features, cache=False)
    expected = apply_hashing(saved, other)
    np.testing.assert_array_equal(again.indices, expected.indices)
    assert main(["hash", str(other), "--out", str(out2), "--label", "y", "--k", "9"]) == 2
