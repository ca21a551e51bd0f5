"""svmlight/LIBSVM reader and writer: valid input, malformed input, round trip, cache."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.formats import blockparse, svmlight
from hogwild.data.formats.cache import cache_path
from hogwild.data.formats.stream import load_text
from hogwild.data.formats.svmlight import parse_svmlight_buffer, read_svmlight, write_svmlight
from hogwild.errors import DataError, DataFormatError

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def parse(text: str | bytes, **kwargs: object) -> CSRData:
    raw = text.encode() if isinstance(text, str) else text
    return parse_svmlight_buffer(np.frombuffer(raw, dtype=np.uint8), **kwargs)  # type: ignore


def write_text(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


# --- valid input -----------------------------------------------------------------------------

def test_labels_plus_minus_one_and_structure() -> None:
    d = parse("+1 1:0.5 3:2\n-1 2:1.25\n")
    assert d.n_rows == 2 and d.n_features == 3 and d.nnz == 3
    assert d.indptr.tolist() == [0, 2, 3]
    assert d.indices.tolist() == [0, 2, 1]
    assert d.values.tolist() == [0.5, 2.0, 1.25]
    assert d.labels.tolist() == [1.0, -1.0]
    assert d.indptr.dtype == np.int64 and d.indices.dtype == np.int32
    assert d.values.dtype == np.float32 and d.labels.dtype == np.float32


def test_labels_zero_one_and_real() -> None:
    assert parse("0 1:1\n1 1:1\n").labels.tolist() == [0.0, 1.0]
    assert parse("2.5 1:1\n-0.125 2:1\n1e2 3:1\n").labels.tolist() == [2.5, -0.125, 100.0]


def test_comments_qid_blank_lines_crlf() -> None:
    text = ("# header comment\r\n"
            "\r\n"
            "1 qid:7 1:1 2:2 # trailing comment 9:9\r\n"
            "   \t\n"
            "-1 qid:8 3:3\r\n"
            "1\r\n"
            "# 1:1 not a row\n")
    d = parse(text)
    assert d.n_rows == 3
    assert d.labels.tolist() == [1.0, -1.0, 1.0]
    assert d.indptr.tolist() == [0, 2, 3, 3]
    assert d.indices.tolist() == [0, 1, 2]
    assert d.values.tolist() == [1.0, 2.0, 3.0]


def test_zero_based_ids() -> None:
    d = parse("1 0:1 4:2\n", zero_based=True)
    assert d.indices.tolist() == [0, 4] and d.n_features == 5


def test_no_final_newline_and_tabs() -> None:
    d = parse("1\t1:1\t2:2\n-1 3:3")
    assert d.n_rows == 2 and d.indices.tolist() == [0, 1, 2]


@pytest.mark.parametrize("token", [
    "1", "-1", "+3", ".5", "5.", "-0.25", "1e-3", "1E5", "2.5e+2", "007", "0.000123456789",
    "123456789012345678901234", "0.1234567890123456789012", "3.4028235e38", "1e-40", "1e-50",
    "9.99999999999999999999", "0.33333334", "16777217", "1.00000005960464477539",
])
def test_float_values_match_correctly_rounded_reference(token: str) -> None:
    d = parse(f"1 1:{token}\n")
    assert d.values[0] == np.float32(float(token))


def test_random_float32_values_parse_exactly() -> None:
    rng = np.random.default_rng(1)
    vals = (rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000)).astype(np.float32)
    text = "".join(f"1 1:{float(v)!r}\n1 1:{v:.9g}\n" for v in vals)
    d = parse(text)
    expected = np.repeat(vals, 2)
    assert np.array_equal(d.values, expected)


def test_large_input_uses_several_pieces_and_matches_one_thread(tmp_path: Path) -> None:
    from hogwild.data.synthetic import make_seed000

    data = make_seed000(40000, n_features=1000, min_nnz=1, max_nnz=30, seed=2)
    write_svmlight(data, tmp_path / "big.svm", digits=6)
    raw = (tmp_path / "big.svm").read_bytes()[:-1]  # no final newline
    assert len(raw) > 2 * blockparse.MIN_BYTES_PER_THREAD
    one = parse(raw, threads=1)
    three = parse(raw, threads=3)
    assert one.n_rows == three.n_rows == 40000
    assert np.array_equal(one.indices, data.indices)
    for name in ("indptr", "indices", "values", "labels"):
        assert np.array_equal(getattr(one, name), getattr(three, name))


def test_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "a.svm.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"1 1:0.5\n-1 2:0.25\n")
    d = read_svmlight(path, cache=False)
    assert d.labels.tolist() == [1.0, -1.0] and d.values.tolist() == [0.5, 0.25]


def test_empty_file_gives_zero_rows(tmp_path: Path) -> None:
    path = write_text(tmp_path / "empty.svm", "")
    d = read_svmlight(path, cache=False)
    assert d.n_rows == 0 and d.nnz == 0 and d.n_features == 0
    assert read_svmlight(path, n_features=7, cache=False).n_features == 7
    only_comments = write_text(tmp_path / "c.svm", "# nothing\n\n")
    assert read_svmlight(only_comments, cache=False).n_rows == 0


def test_n_features_argument_widens() -> None:
    d = parse("1 1:1 3:1\n", n_features=10)
    assert d.n_features == 10


# --- malformed input -------------------------------------------------------------------------

MALFORMED = [
    ("1 1:1\n-1 x:1\n", 2, "bad token"),
    ("1 1:1\n\n-1 2:1:3\n", 3, "bad token"),
    ("1 1:\n", 1, "bad token"),
    ("1 1:0.5abc\n", 1, "bad token"),
    ("1 2:1\n1 0:1\n", 2, "index 0"),
    ("1 -3:1\n", 1, "negative"),
    ("1 3:1 2:1\n", 1, "strictly increasing"),
    ("# c\n1 2:1 2:1\n", 2, "strictly increasing"),
    ("1 1:nan\n", 1, "non-finite"),
    ("1 1:1\n1 1:inf\n", 2, "non-finite"),
    ("1 1:-Infinity\n", 1, "non-finite"),
    ("1 1:1e39\n", 1, "non-finite"),
    ("1 1:1\n1:1 2:1\n", 2, "missing label"),
    ("spam 1:1\n", 1, "label is not a number"),
    ("1 1:1\r\n1 1:1\r\n+- 1:1\r\n", 3, "label is not a number"),
    ("nan 1:1\n", 1, "non-finite"),
    ("1 99999999999:1\n", 1, "too large"),
]


@pytest.mark.parametrize(("text", "line", "what"), MALFORMED)
def test_malformed_input_names_path_and_line(tmp_path: Path, text: str, line: int,
                                             what: str) -> None:
    path = write_text(tmp_path / "bad.svm", text)
    with pytest.raises(DataFormatError) as info:
        read_svmlight(path, cache=False)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert what in str(info.value)


def test_malformed_line_in_second_piece_is_located() -> None:
    good = "1 1:0.5 2:0.25 3:0.125\n" * 200000
    text = good + "1 3:1 2:1\n" + good
    with pytest.raises(DataFormatError) as info:
        parse(text, threads=2)
    assert info.value.line == 200001


def test_n_features_too_small_names_line(tmp_path: Path) -> None:
    path = write_text(tmp_path / "a.svm", "1 1:1\n1 5:1\n1 9:1\n")
    with pytest.raises(DataFormatError) as info:
        read_svmlight(path, n_features=6, cache=False)
    assert info.value.line == 3 and "n_features" in str(info.value)
    # also when the arrays come from the cache
    read_svmlight(path)
    with pytest.raises(DataFormatError) as info:
        read_svmlight(path, n_features=6)
    assert info.value.line == 3


def test_missing_file_is_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_svmlight(tmp_path / "nope.svm")


# --- writer ----------------------------------------------------------------------------------

def test_write_read_round_trip_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 500
    lengths = rng.integers(0, 30, n)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.sort(rng.choice(5000, k, replace=False)) for k in lengths])
    mags = 10.0 ** rng.integers(-40, 38, indptr[-1])
    values = (rng.standard_normal(indptr[-1]) * mags).astype(np.float32)
    values[:5] = [np.finfo(np.float32).max, np.finfo(np.float32).tiny, 1e-45, -0.0, 1.0]
    labels = rng.choice([-1.0, 1.0, 0.0, 2.5, -1e-7, 123456.75], n).astype(np.float32)
    data = CSRData(indptr, indices, values, labels, 5000)
    for name in ("rt.svm", "rt.svm.gz"):
        path = tmp_path / name
        write_svmlight(data, path)
        back = read_svmlight(path, n_features=5000, cache=False)
        assert np.array_equal(back.indptr, data.indptr)
        assert np.array_equal(back.indices, data.indices)
        assert np.array_equal(back.values, data.values)
        assert np.array_equal(back.labels, data.labels)
    with gzip.open(tmp_path / "rt.svm.gz") as f:
        assert f.read(10)  # really gzip
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_write_zero_based_and_short_digits(tmp_path: Path) -> None:
    data = CSRData(np.array([0, 2]), np.array([0, 3]), np.array([0.1234567, 2.0]),
                   np.array([1.0]), 4)
    path = tmp_path / "z.svm"
    write_svmlight(data, path, zero_based=True, digits=3)
    assert path.read_text() == "1 0:0.123 3:2\n"


# --- cache -----------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Caches of these tests go to a temporary user cache dir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "hogwild"


def test_cache_hit_skips_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_text(tmp_path / "a.svm", "1 1:0.5 4:1\n-1 2:0.25\n")
    first = read_svmlight(path)
    where = cache_path(path)
    # under the user cache dir, never beside the data
    assert where.parent == tmp_path / "xdg" / "hogwild" and (where / "meta.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.svm", "xdg"]

    def fail(*args: object, **kwargs: object) -> CSRData:
        raise AssertionError("parsed although a fresh cache exists")

    monkeypatch.setattr(svmlight, "load_text", fail)
    second = read_svmlight(path)
    assert np.array_equal(second.indices, first.indices)
    assert np.array_equal(second.values, first.values)
    assert second.labels.tolist() == [1.0, -1.0] and second.n_features == 4
    assert read_svmlight(path, n_features=10).n_features == 10
    assert read_svmlight(path, shuffle_seed=1).n_rows == 2


def test_stale_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    path = write_text(tmp_path / "a.svm", "1 1:0.5\n")
    read_svmlight(path)
    where = cache_path(path)
    write_text(path, "-1 2:0.75\n1 1:1\n")  # other size
    d = read_svmlight(path)
    assert d.labels.tolist() == [-1.0, 1.0] and d.values.tolist() == [0.75, 1.0]
    # same size, other mtime
    write_text(path, "-1 2:0.25\n1 1:1\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert read_svmlight(path).values.tolist() == [0.25, 1.0]
    assert json.loads((where / "meta.json").read_text())["key"]["mtime_ns"] == \
        st.st_mtime_ns + 5_000_000_000
    # zero_based is part of the key
    write_text(path, "1 0:1 1:2\n")
    assert read_svmlight(path, zero_based=True).indices.tolist() == [0, 1]
    with pytest.raises(DataFormatError):
        read_svmlight(path, zero_based=False)
    # one cache directory per source, no leftovers
    assert [p.name for p in where.parent.iterdir()] == [where.name]


def test_damaged_cache_is_ignored(tmp_path: Path) -> None:
    path = write_text(tmp_path / "a.svm", "1 1:0.5 2:1\n-1 3:2\n")
    read_svmlight(path)
    values = cache_path(path) / "values.npy"
    raw = bytearray(values.read_bytes())
    raw[-4:] = np.array([np.nan], dtype=np.float32).tobytes()  # a value no parse gives
    values.write_bytes(bytes(raw))
    assert read_svmlight(path).values.tolist() == [0.5, 1.0, 2.0]
    (cache_path(path) / "indices.npy").write_bytes(b"not an array")
    assert read_svmlight(path).indices.tolist() == [0, 1, 2]


def test_cache_dir_used_when_given(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    path = write_text(src / "a.svm", "1 1:0.5\n")
    root = tmp_path / "cache"
    read_svmlight(path, cache_dir=root)
    dirs = list(root.glob("*.hwcache"))
    assert len(dirs) == 1 and dirs[0].name.endswith("-a.svm.hwcache")
    assert [p.name for p in src.iterdir()] == ["a.svm"]
    assert not (tmp_path / "xdg").exists()


def test_cache_keyed_by_absolute_path(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a = write_text(tmp_path / "x" / "d.svm", "1 1:1\n")
    b = write_text(tmp_path / "y" / "d.svm", "-1 2:1\n")
    assert cache_path(a) != cache_path(b)
    assert read_svmlight(a).labels.tolist() == [1.0]
    assert read_svmlight(b).labels.tolist() == [-1.0]
    assert read_svmlight(a).labels.tolist() == [1.0]


# --- against scikit-learn on the real data sets ----------------------------------------------

SHARED_FILES = sorted(SHARED_DATA.glob("*.libsvm.gz")) if SHARED_DATA.is_dir() else []


@pytest.mark.skipif(not SHARED_FILES, reason=f"shared data sets not found in {SHARED_DATA}")
@pytest.mark.parametrize("path", SHARED_FILES, ids=[p.name for p in SHARED_FILES])
def test_equal_to_sklearn(path: Path) -> None:
    sk = pytest.importorskip("sklearn.datasets")
    X, y = sk.load_svmlight_file(str(path), dtype=np.float64, zero_based=False)
    ours = read_svmlight(path, cache=False)
    assert ours.n_features == X.shape[1] and ours.n_rows == X.shape[0]
    assert np.array_equal(ours.indptr, X.indptr)
    assert np.array_equal(ours.indices, X.indices)
    assert np.array_equal(ours.values, X.data.astype(np.float32))
    assert np.array_equal(ours.labels, y.astype(np.float32))


# --- gzip streaming --------------------------------------------------------------------------

def gz_rows(n: int, start: int = 0) -> str:
    return "".join(f"{1 if i % 3 else -1} {i % 50 + 1}:{i}.5 77:0.25\n"
                   for i in range(start, start + n))


def test_gzip_stream_small_blocks_and_members(tmp_path: Path) -> None:
    text_a, text_b = gz_rows(3000), gz_rows(2000, 3000)
    path = tmp_path / "multi.svm.gz"
    path.write_bytes(gzip.compress(text_a.encode()) + gzip.compress(text_b.encode()))
    expected = parse(text_a + text_b)
    got = load_text(path, block_bytes=4096)
    assert got.indptr.shape[0] == 5001
    assert np.array_equal(got.indptr, expected.indptr)
    assert np.array_equal(got.indices, expected.indices)
    assert np.array_equal(got.values, expected.values)
    assert np.array_equal(got.labels, expected.labels)
    assert read_svmlight(path, cache=False).n_rows == 5000


def test_gzip_stream_error_line_across_blocks(tmp_path: Path) -> None:
    text = gz_rows(4000) + "1 5:1 3:1\n" + gz_rows(10)
    path = tmp_path / "bad.svm.gz"
    path.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(DataFormatError) as info:
        load_text(path, block_bytes=4096)
    assert info.value.line == 4001
    assert str(info.value).startswith(f"{path}:4001: feature indices not strictly increasing")


def test_gzip_truncated_or_trailing_garbage(tmp_path: Path) -> None:
    blob = gzip.compress(gz_rows(500).encode())
    cut = tmp_path / "cut.svm.gz"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="truncated"):
        read_svmlight(cut, cache=False)
    junk = tmp_path / "junk.svm.gz"
    junk.write_bytes(blob + b"garbage")
    with pytest.raises(DataError, match="after the gzip stream"):
        read_svmlight(junk, cache=False)
    padded = tmp_path / "pad.svm.gz"
    padded.write_bytes(blob + b"\0" * 100)
    assert read_svmlight(padded, cache=False).n_rows == 500


# --- line endings ----------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["1 1:0.5\r-1 1:0.2\r", "1 1:0.5\r1 2:0.2\r",
                                  "1 1:1\n1 1:0.5\r-1 1:0.2\n"])
def test_cr_only_line_endings_are_named_as_the_cause(tmp_path: Path, text: str) -> None:
    path = write_text(tmp_path / "cr.svm", text)
    line = text.count("\n") + (not text.endswith("\n"))
    cause = ("a carriage return inside a line (old Mac line endings?): convert the file to "
             "\\n line endings (parsing stopped at ")
    # The streamed file loader, and an in-memory buffer (whose last line lacks a newline).
    with pytest.raises(DataFormatError) as info:
        read_svmlight(path, cache=False)
    assert str(info.value).startswith(f"{path}:{line}: {cause}"), str(info.value)
    with pytest.raises(DataFormatError) as info:
        parse(text)
    assert str(info.value).startswith(f"<buffer>:{line}: {cause}"), str(info.value)


def test_crlf_files_still_parse_and_their_errors_are_not_blamed_on_cr(tmp_path: Path) -> None:
    path = write_text(tmp_path / "crlf.svm", "1 1:0.5\r\n-1 2:0.2\r\n")
    d = read_svmlight(path, cache=False)
    assert d.labels.tolist() == [1.0, -1.0] and d.indices.tolist() == [0, 1]
    bad = write_text(tmp_path / "bad.svm", "1 1:0.5\r\n-1 2:x\r\n")
    with pytest.raises(DataFormatError) as info:
        read_svmlight(bad, cache=False)
    assert str(info.value) == f"{bad}:2: bad token (expected index:value): '2:x'"
