"""Data-source strings: every scheme and the errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from hogwild.data.sources import (
    bundled_names,
    default_test_source,
    describe,
    load_source,
)
from hogwild.errors import DataError


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def test_file_path_plain_and_gz(tmp_path: Path) -> None:
    p = tmp_path / "d.svm"
    p.write_text("1 1:1\n-1 3:2\n")
    d = load_source(str(p), cache=False)
    assert d.n_rows == 2 and d.n_features == 3
    assert load_source(str(p), n_features=9, cache=False).n_features == 9
    g = tmp_path / "d.svm.gz"
    with gzip.open(g, "wb") as f:
        f.write(b"1 0:1\n")
    assert load_source(str(g), zero_based=True, cache=False).indices.tolist() == [0]


def test_bundled_sets_train_and_test_agree(tmp_path: Path) -> None:
    assert bundled_names() == ["rcv1_vw_subset", "spamassassin"]
    for name, features, rows in (("spamassassin", 23941, (4836, 1210)),
                                 ("rcv1_vw_subset", 47236, (1247, 500))):
        train = load_source(f"bundled:{name}")
        test = load_source(default_test_source(f"bundled:{name}") or "")
        assert (train.n_rows, test.n_rows) == rows
        assert train.n_features == test.n_features == features
        assert set(np.unique(train.labels).tolist()) == {-1.0, 1.0}
    # the cache went to the user cache dir, not into the package
    assert list((tmp_path / "xdg" / "hogwild").glob("*.hwcache"))


def test_default_test_source() -> None:
    assert default_test_source("bundled:spamassassin") == "bundled:spamassassin/test"
    assert default_test_source("bundled:spamassassin/test") is None
    assert default_test_source("synthetic:rcv1") is None
    assert default_test_source("/tmp/x.svm") is None


def test_synthetic_sources() -> None:
    d = load_source("synthetic:rcv1?rows=500&noise=0&seed=4&n_features=2000&avg_nnz=20")
    assert d.n_rows == 500 and d.n_features == 2000
    assert 15 <= d.nnz / d.n_rows <= 25
    e = load_source("synthetic:seed000?rows=300&n_features=1000&min_nnz=2&max_nnz=4&binary=1"
                    "&seed=2")
    assert e.n_rows == 300 and e.n_features == 1000 and (e.values == 1).all()
    assert np.diff(e.indptr).max() <= 4
    assert load_source("synthetic:rcv1?rows=10", n_features=3000).n_features == 3000
    assert load_source("synthetic:seed000?rows=7").n_rows == 7


def test_lyrl2004_source(tmp_path: Path) -> None:
    v = tmp_path / "v.dat"
    v.write_text("10  1:1\n11  2:1\n")
    q = tmp_path / "q"
    q.write_text("ECAT 11 1\n")
    d = load_source(f"lyrl2004:{v}@{q}#ECAT")
    assert d.labels.tolist() == [-1, 1] and d.n_features == 47236


@pytest.mark.parametrize(("spec", "message"), [
    ("ftp:somewhere", "unknown data source scheme"),
    ("bundled:nope", "unknown bundled data set"),
    ("bundled:spamassassin/dev", "train' or 'test"),
    ("synthetic:rcv2", "unknown synthetic generator"),
    ("synthetic:rcv1?rows=ten", "bad value 'ten' for parameter 'rows'"),
    ("synthetic:rcv1?rows=10&color=red", "unknown parameter"),
    ("synthetic:seed000?binary=maybe", "parameter 'binary'"),
    ("synthetic:rcv1?noise=0.9", "noise"),
    ("/definitely/not/here.svm", "not found"),
    ("lyrl2004:/no/v.dat@/no/q#CCAT", "not found"),
    ("lyrl2004:v.dat", "expected lyrl2004"),
    ("", "empty"),
])
def test_source_errors(spec: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        load_source(spec)


def test_describe() -> None:
    d = load_source("synthetic:seed000?rows=100&n_features=50&min_nnz=2&max_nnz=2")
    text = describe(d)
    assert text.startswith("100 rows x 50 features, 200 non-zeros (2.0 per row)")
    share = float((d.labels > 0).mean())
    assert text.endswith(f", positive share {share:.3f}") and 0 < share < 1


def test_describe_names_the_users_classes_of_multiclass_rows() -> None:
    from hogwild.data.csr import CSRData
    from hogwild.data.transform.labels import LabelMap

    raw = np.array([5, 6, 7, 7, 7], dtype=np.float32)
    labels = LabelMap.fit(raw, classifier=True, source="t")
    rows = CSRData(np.arange(6, dtype=np.int64), np.zeros(5, dtype=np.int32),
                   np.ones(5, dtype=np.float32), labels.encode(raw, "t"), 1)
    # The rows hold class indices 0..2; the line names label 7, not index 2.
    assert describe(rows, labels).endswith("3 label values, the most common 7 (share 0.600)")
    assert describe(rows).endswith("the most common 2 (share 0.600)")
