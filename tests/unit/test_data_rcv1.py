"""RCV1-v2 lyrl2004 vectors + qrels reader, on small files."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from hogwild.data.formats.rcv1 import read_lyrl2004, read_qrels
from hogwild.errors import DataError, DataFormatError

VEC1 = "2286  1:0.5 7:0.25\n2287  3:1\n"
VEC2 = "5000  2:0.125 47236:0.75\n2288  4:2\n"
QRELS = ("CCAT 2286 1\nGCAT 2286 1\nECAT 2287 1\nCCAT 5000 1\nC15 2288 1\nCCATX 2288 1\n"
         "GCAT 2288 1\n")


def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    v1 = tmp_path / "lyrl2004_vectors_test_pt0.dat"
    v1.write_text(VEC1)
    v2 = tmp_path / "lyrl2004_vectors_train.dat.gz"
    with gzip.open(v2, "wt") as f:
        f.write(VEC2)
    q = tmp_path / "rcv1-v2.topics.qrels"
    q.write_text(QRELS)
    return v1, v2, q


def test_rows_in_file_order_with_topic_labels(tmp_path: Path) -> None:
    v1, v2, q = files(tmp_path)
    d = read_lyrl2004([v1, v2], q, topic="CCAT")
    d.validate()
    assert d.n_rows == 4 and d.n_features == 47236
    assert d.labels.tolist() == [1, -1, 1, -1]
    assert d.indptr.tolist() == [0, 2, 3, 5, 6]
    assert d.indices.tolist() == [0, 6, 2, 1, 47235, 3]
    assert d.values.tolist() == [0.5, 0.25, 1.0, 0.125, 0.75, 2.0]
    g = read_lyrl2004([v1, v2], q, topic="GCAT")
    assert g.labels.tolist() == [1, -1, -1, 1]


def test_qrels_topic_match_is_exact(tmp_path: Path) -> None:
    _, _, q = files(tmp_path)
    assert read_qrels(q, "CCAT").tolist() == [2286, 5000]
    assert read_qrels(q, "C15").tolist() == [2288]
    assert read_qrels(q, "NOPE").tolist() == []


def test_bad_inputs(tmp_path: Path) -> None:
    v1, _, q = files(tmp_path)
    bad = tmp_path / "bad.dat"
    bad.write_text("2286 1:0.5\n12.5 2:1\n")
    with pytest.raises(DataError, match="doc id"):
        read_lyrl2004([bad], q)
    worse = tmp_path / "worse.dat"
    worse.write_text("2286 1:0.5\n2287 3:1 2:1\n")
    with pytest.raises(DataFormatError) as info:
        read_lyrl2004([worse], q)
    assert info.value.line == 2
    with pytest.raises(DataFormatError):
        read_lyrl2004([v1], q, n_features=5)
    badq = tmp_path / "q"
    badq.write_text("CCAT 2286 1\nCCAT abc 1\n")
    with pytest.raises(DataFormatError) as info:
        read_qrels(badq, "CCAT")
    assert info.value.line == 2
    with pytest.raises(DataError):
        read_lyrl2004([], q)
    assert np.array_equal(read_lyrl2004([v1], q).labels, [1, -1])
