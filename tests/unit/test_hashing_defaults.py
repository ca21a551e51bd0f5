"""The default CSV encodings: one-hot while a column's vocabulary fits (accurate as
scikit-learn's hashing on a many-valued column), signed 2**18 hashing beyond it, sqrt buckets
on request, old parameters still applied, and the per-column account of the encodings."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from hogwild import config
from hogwild.cli import main
from hogwild.data.formats.csvquery import load_csv_source
from hogwild.data.hashing.summary import SUMMARY_LINES, column_summary, onehot_value
from hogwild.data.hashing.tables import apply_hashing, fit_hashing
from hogwild.data.transform.encodings import DEFAULT_HASH_BITS, HashOptions
from hogwild.errors import DataError
from hogwild.inprocess.local import train_job

CITIES = 600


def write_city_table(path: Path, rows: int, seed: int) -> None:
    """``y,city,x1,x2``: the label is the sign of the city's own effect plus a numeric part,
    5 % flipped; the effects are the same for every file (their own generator)."""
    rng = np.random.default_rng(seed)
    effect = np.random.default_rng(7).normal(size=CITIES)
    city = rng.integers(0, CITIES, rows)
    x = rng.normal(size=(rows, 2))
    y = np.where(effect[city] + 0.5 * x[:, 0] - 0.3 * x[:, 1] > 0, 1, -1)
    y *= np.where(rng.random(rows) < 0.05, -1, 1)
    lines = ["y,city,x1,x2"] + [f"{y[i]},c{city[i]},{x[i, 0]:.4f},{x[i, 1]:.4f}"
                                for i in range(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def city_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("city")
    train, test = folder / "train.csv", folder / "test.csv"
    write_city_table(train, 15_000, seed=1)
    write_city_table(test, 4_000, seed=2)
    return train, test


def _sklearn_accuracy(train: Path, test: Path) -> float:
    sklearn = pytest.importorskip("sklearn")
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import SGDClassifier

    del sklearn

    def dicts(path: Path) -> tuple[list[dict[str, float]], list[int]]:
        rows, labels = [], []
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            y, city, x1, x2 = line.split(",")
            rows.append({f"city={city}": 1.0, "x1": float(x1), "x2": float(x2)})
            labels.append(int(y))
        return rows, labels

    hasher = FeatureHasher(2 ** 18)
    xs, ys = dicts(train)
    xt, yt = dicts(test)
    model = SGDClassifier(loss="log_loss", random_state=0).fit(hasher.transform(xs), ys)
    return float(model.score(hasher.transform(xt), yt))


def test_default_encoding_is_as_accurate_as_sklearn_hashing(
        city_files: tuple[Path, Path], tmp_path: Path) -> None:
    train, test = city_files
    out = io.StringIO()
    settings = config.load(flags={"data": f"csv:{train}?label=y&categorical=city",
                                  "test_data": f"csv:{test}", "loss": "logistic",
                                  "threads": 1, "seed": 0, "out_dir": str(tmp_path)})
    metrics = train_job(settings, out=out)
    peer = _sklearn_accuracy(train, test)
    assert float(metrics["test_accuracy"]) >= peer - 0.01, (metrics["test_accuracy"], peer)
    # The training log names each column's encoding.
    log = out.getvalue()
    assert f"city: onehot, features 0..{CITIES - 1} ({CITIES} values, one feature each)" in log
    assert "x1: numeric, features 600..600" in log


def test_large_columns_get_a_signed_2_18_space_and_sqrt_stays_available(
        city_files: tuple[Path, Path]) -> None:
    train, _ = city_files
    _, params = fit_hashing(train, HashOptions(label="y", categorical=("city",),
                                               onehot_max=100))
    city = params["columns"][0]
    assert (city["kind"], city["k"], city["buckets"], city["signed"]) == (
        "hashed", 1, 2 ** DEFAULT_HASH_BITS, True)
    assert city["distinct"] == CITIES and city["onehot_max"] == 100
    line = next(column_summary(params))
    assert "600 distinct values > onehot_max 100 -> 1 x 262,144 signed buckets" in line
    data, params = load_csv_source(f"{train}?label=y&categorical=city&buckets=sqrt&"
                                   "onehot_max=64")
    city = params["columns"][0]
    assert (city["kind"], city["k"], city["buckets"], city["signed"]) == (
        "hashed", 2, 25, False)
    assert (data.values[data.indices < 50] == 1.0).all()        # unsigned, as it was
    assert "(sqrt rule)" in next(column_summary(params))


def test_old_parameters_apply_as_they_were_fitted(city_files: tuple[Path, Path]) -> None:
    _, test = city_files
    data, params = fit_hashing(test, HashOptions(label="y", categorical=("city",),
                                                 buckets="sqrt", onehot_max=64))
    # As the first version wrote them: no sign, no rule.
    old = json.loads(json.dumps(params))
    old["version"] = 1
    for col in old["columns"]:
        for key in ("signed", "rule", "onehot_max"):
            col.pop(key, None)
    again = apply_hashing(old, test)
    np.testing.assert_array_equal(again.indices, data.indices)
    np.testing.assert_array_equal(again.values, data.values)
    old["version"] = 3
    with pytest.raises(DataError, match="version 3"):
        apply_hashing(old, test)


def test_onehot_feature_ids_name_their_column_and_value(city_files: tuple[Path, Path]) -> None:
    train, _ = city_files
    data, params = fit_hashing(train, HashOptions(label="y", categorical=("city",)))
    first_row = data.indices[data.indptr[0]:data.indptr[1]]
    city_id = int(first_row.min())
    raw = train.read_text(encoding="utf-8").splitlines()[1].split(",")[1]
    assert onehot_value(params, city_id) == ("city", raw)
    assert onehot_value(params, CITIES) is None        # x1: numeric, not one-hot


def test_column_lines_are_bounded(tmp_path: Path) -> None:
    wide = tmp_path / "wide.csv"
    n = SUMMARY_LINES + 6
    wide.write_text(",".join(["y"] + [f"c{i}" for i in range(n)]) + "\n"
                    + "1," + ",".join("1" for _ in range(n)) + "\n", encoding="utf-8")
    _, params = fit_hashing(wide, HashOptions(label="y"))
    lines = list(column_summary(params))
    assert len(lines) == SUMMARY_LINES + 1
    assert lines[-1] == "  ... and 6 more columns (numeric)"


@pytest.mark.parametrize("query, message", [
    ("buckets=cube", "buckets must be one of bits, sqrt, got 'cube'"),
    ("buckets=sqrt&hash_bits=12", "buckets=sqrt and hash_bits both set"),
    ("k=0", "k must be between 1 and 4, got 0"),
])
def test_bad_encoding_options_are_one_line(city_files: tuple[Path, Path], query: str,
                                           message: str) -> None:
    train, _ = city_files
    with pytest.raises(DataError, match=message):
        load_csv_source(f"{train}?label=y&categorical=city&{query}")


def test_hash_command_flags(city_files: tuple[Path, Path], tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    train, _ = city_files
    out = tmp_path / "h.svm"
    assert main(["hash", str(train), "--out", str(out), "--label", "y", "--categorical",
                 "city", "--buckets", "sqrt", "--onehot-max", "10"]) == 0
    printed = capsys.readouterr().out
    assert "city: hashed, features 1..50 (600 distinct values > onehot_max 10 -> 2 x 25 " \
           "buckets (sqrt rule);" in printed
    assert main(["hash", str(train), "--out", str(out), "--label", "y", "--buckets", "sqrt",
                 "--hash-bits", "4"]) == 2
    assert "buckets=sqrt and hash_bits both set" in capsys.readouterr().err
