"""Streamed two-pass loading: equal to parsing the whole text, shuffled in place, bounded blocks."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.data.formats import stream, textblocks
from hogwild.data.formats.svmlight import parse_svmlight_buffer, read_svmlight
from hogwild.data.sources import load_source
from hogwild.data.transform.reorder import frequency_order, renumber
from hogwild.data.transform.split import shuffle_order, split_shuffled, train_val_test_split
from hogwild.engine.runstart import load_splits
from hogwild.errors import DataError, DataFormatError, TrainingDiverged


def rows(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = np.sort(rng.choice(300, size=int(rng.integers(0, 12)), replace=False)) + 1
        feats = " ".join(f"{j}:{rng.normal():.5g}" for j in ids)
        extra = " qid:7" if i % 17 == 0 else ""  # a colon that is not a non-zero
        out.append(f"{rng.choice([-1, 1])}{extra} {feats}".rstrip())
        if i % 23 == 0:
            out.append("# a comment: with a colon")
        if i % 29 == 0:
            out.append("   ")
        if i % 31 == 0:
            out[-1] += "  # trailing 1:2"
    return "\n".join(out) + "\n"


def whole(text: str, **kwargs: object) -> CSRData:
    return parse_svmlight_buffer(np.frombuffer(text.encode(), dtype=np.uint8).copy(),
                                 **kwargs)  # type: ignore[arg-type]


def same(a: CSRData, b: CSRData) -> bool:
    return (a.n_features == b.n_features and np.array_equal(a.indptr, b.indptr)
            and np.array_equal(a.indices, b.indices) and np.array_equal(a.values, b.values)
            and np.array_equal(a.labels, b.labels))


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("block", [64, 4096, 1 << 20])
def test_streamed_equals_whole_parse(tmp_path: Path, gz: bool, block: int) -> None:
    text = rows(3000)
    path = tmp_path / ("d.svm.gz" if gz else "d.svm")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    expected = whole(text)
    assert same(stream.load_text(path, block_bytes=block), expected)
    # shuffled while loading: the same as shuffling afterwards
    for seed in (0, 5):
        got = stream.load_text(path, block_bytes=block, seed=seed)
        assert same(got, expected.take(shuffle_order(expected.n_rows, seed)))


def test_no_final_newline_and_long_lines(tmp_path: Path) -> None:
    long_row = "1 " + " ".join(f"{j}:{j}.25" for j in range(1, 3000))
    text = f"-1 1:1\n{long_row}\n1 2:0.5"
    path = tmp_path / "d.svm"
    path.write_bytes(text.encode())
    got = stream.load_text(path, block_bytes=256)  # the long row needs a bigger buffer
    assert same(got, whole(text + "\n"))
    assert got.nnz == 1 + 2999 + 1


def test_empty_and_comment_only(tmp_path: Path) -> None:
    for text in ("", "# nothing\n\n  \n"):
        path = tmp_path / "e.svm"
        path.write_bytes(text.encode())
        got = stream.load_text(path, seed=3)
        assert got.n_rows == 0 and got.nnz == 0 and got.n_features == 0


@pytest.mark.parametrize("gz", [False, True])
def test_error_names_the_line_across_blocks(tmp_path: Path, gz: bool) -> None:
    text = rows(2000) + "1 5:1 3:1\n" + rows(10)
    line = text.count("\n", 0, text.index("1 5:1 3:1\n")) + 1
    path = tmp_path / ("bad.svm.gz" if gz else "bad.svm")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    with pytest.raises(DataFormatError) as info:
        stream.load_text(path, block_bytes=1024, seed=0)
    assert info.value.line == line
    assert "not strictly increasing" in str(info.value)
    with pytest.raises(DataFormatError) as info:
        stream.load_text(tmp_path / "bad.svm" if not gz else path, n_features=4,
                         block_bytes=1024)
    assert "does not fit n_features" in str(info.value)


def test_blocks_are_bounded(tmp_path: Path) -> None:
    text = rows(5000)
    path = tmp_path / "d.svm.gz"
    path.write_bytes(gzip.compress(text.encode()))
    sizes = [b.shape[0] for b in textblocks.text_blocks(path, 2048)]
    assert max(sizes) <= 2049 and sum(sizes) == len(text.encode())


def test_cache_round_trip_shuffled(tmp_path: Path) -> None:
    text = rows(2500)
    path = tmp_path / "d.svm"
    path.write_bytes(text.encode())
    expected = whole(text)
    cache_dir = tmp_path / "cache"
    first = read_svmlight(path, cache_dir=cache_dir, shuffle_seed=4)
    again = read_svmlight(path, cache_dir=cache_dir, shuffle_seed=4)
    plain = read_svmlight(path, cache_dir=cache_dir)
    shuffled = expected.take(shuffle_order(expected.n_rows, 4))
    assert same(first, shuffled) and same(again, shuffled) and same(plain, expected)


def test_split_of_shuffled_rows_equals_split() -> None:
    data = whole(rows(999))
    expected = train_val_test_split(data, val_fraction=0.1, test_fraction=0.2, seed=3)
    got = split_shuffled(data.take(shuffle_order(data.n_rows, 3)), val_fraction=0.1,
                         test_fraction=0.2)
    for a, b in zip(got, expected):
        assert same(a, b)


def test_renumber_in_place_equals_copy() -> None:
    data = whole(rows(1500))
    order = frequency_order(data)
    expected = renumber(data, order)
    copy = CSRData(data.indptr, data.indices.copy(), data.values.copy(), data.labels,
                   data.n_features)
    got = renumber(copy, order, in_place=True)
    assert got.indices is copy.indices and same(got, expected)


def test_load_splits_equals_split_then_renumber(tmp_path: Path) -> None:
    path = tmp_path / "d.svm"
    path.write_bytes(rows(3000).encode())
    settings = Settings(data=str(path), val_fraction=0.1, test_fraction=0.2, seed=7,
                        data_cache=False)
    splits = load_splits(settings)
    data = load_source(str(path), cache=False)
    train, val, test = train_val_test_split(data, val_fraction=0.1, test_fraction=0.2, seed=7)
    order = frequency_order(train)
    assert np.array_equal(splits.feature_order, order)
    for got, want in ((splits.train, train), (splits.val, val), (splits.test, test)):
        assert same(got, renumber(want, order))


def test_file_changed_between_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.svm"
    path.write_bytes(rows(500).encode())
    real = stream.count_pass

    def count_then_change(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        path.write_bytes(rows(400).encode())
        return result

    monkeypatch.setattr(stream, "count_pass", count_then_change)
    with pytest.raises(DataError, match="changed while it was read"):
        stream.load_text(path, seed=0)



@pytest.mark.parametrize("block_bytes", [64, 1 << 20])
@pytest.mark.parametrize("shrunk", [None, 158])
def test_a_row_grown_between_passes_is_refused(tmp_path: Path, block_bytes: int,
                                               shrunk: int | None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The same bytes and rows, but one row has a feature more than the first pass counted:
    # the parser finds its piece over the count (shrunk None), or, with the next row a
    # feature shorter, the thread placing the rows finds the row over its slot.
    path = tmp_path / "d.svm"
    path.write_bytes(b"+1 1:0.125 2:1\n" * 300)
    real = stream.count_pass

    def count_then_change(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        lines = [b"+1 1:0.125 2:1\n"] * 300
        lines[157] = b"+1 1:1 2:1 3:1\n"
        if shrunk is not None:
            lines[shrunk] = b"+1 1:0.1250000\n"
        path.write_bytes(b"".join(lines))
        return result

    monkeypatch.setattr(stream, "count_pass", count_then_change)
    with pytest.raises(DataError, match="changed while it was read"):
        stream.load_text(path, seed=0, block_bytes=block_bytes)

# --- out of core ------------------------------------------------------------------------------

def test_out_of_core_training_streams_the_cache(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from hogwild.inprocess import outofcore
    from hogwild.inprocess.local import train_job

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(outofcore, "BLOCK_NNZ", 2000)  # many blocks
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=60)
    lines = []
    for _ in range(3000):
        ids = np.sort(rng.choice(60, size=8, replace=False))
        vals = rng.random(8)
        label = 1 if float(vals @ w_true[ids]) > 0 else -1
        lines.append(f"{label} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in zip(ids, vals)))
    path = tmp_path / "d.svm"
    path.write_text("\n".join(lines) + "\n")
    settings = Settings(data=str(path), out_of_core=True, epochs=4, patience=0,
                        out_dir=str(tmp_path / "out"), val_fraction=0.1, test_fraction=0.2)
    with open(tmp_path / "log.txt", "w") as fh:
        metrics = train_job(settings, out=fh)
    log = (tmp_path / "log.txt").read_text()
    assert "parsed 3,000 rows" in log and "out of core: " in log
    assert metrics["out_of_core"] is True and metrics["epochs"] == 4
    assert metrics["train_rows"] == 2100 and metrics["test_rows"] == 600
    assert metrics["test_accuracy"] > 0.85
    assert json.loads((tmp_path / "out" / "latest" / "metrics.json").read_text())["test_accuracy"] == \
        metrics["test_accuracy"]
    assert (tmp_path / "out" / "latest" / "loss.png").is_file()
    # the history is the in-memory job's: the model before training (epoch 0), then 4 epochs
    rows = [json.loads(line) for line in
            (tmp_path / "out" / "latest" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["train_loss"] is None and rows[0]["val_loss"] > rows[-1]["val_loss"]
    # the same held-out rows as the in-memory job (in its own feature ids): the saved model scores
    # the in-memory job's test set exactly as the out-of-core job reported
    from hogwild.data.transform.reorder import to_internal
    from hogwild.model.evaluation import evaluate
    from hogwild.model.saved import SavedModel

    mem = load_splits(settings.replace(out_of_core=False, data_cache=False))
    assert mem.test.n_rows == 600 and mem.train.n_rows == 2100
    saved = SavedModel.load(tmp_path / "out" / "latest")
    w = to_internal(np.asarray(saved.w, dtype=np.float64), mem.feature_order)
    got = evaluate(mem.test, w, "hinge")
    assert got.loss == pytest.approx(metrics["test_loss"], rel=1e-9)
    # trained in the file's own ids, the model still ranks the features as the in-memory
    # job does (predict checks new data against them)
    from hogwild.data.diagnose.featurespace import frequent_features
    assert saved.meta["frequent_features"] == frequent_features(mem.feature_order)
    assert got.accuracy == pytest.approx(metrics["test_accuracy"])
    # a second run reads the cache instead of parsing
    with open(tmp_path / "log2.txt", "w") as fh:
        train_job(settings, out=fh)
    assert "training from the cache" in (tmp_path / "log2.txt").read_text()
    # a step size that blows the weights up is refused, as in memory: nothing published
    before = (tmp_path / "out" / "latest").resolve()
    with open(tmp_path / "log3.txt", "w") as fh, pytest.raises(TrainingDiverged):
        train_job(settings.replace(learning_rate=1e300, lr_schedule="constant"), out=fh)
    assert (tmp_path / "out" / "latest").resolve() == before


def _caps_by_hand(text: bytes) -> tuple[list[int], int]:
    """Per data row, its colons before any '#'; and the number of lines."""
    caps, lines = [], 0
    for line in text.split(b"\n")[:-1]:
        lines += 1
        body = line.lstrip(b" \t\r")
        if body and not body.startswith(b"#"):
            caps.append(body.split(b"#")[0].count(b":"))
    return caps, lines


def test_row_caps_counts_colons_of_data_rows_8_bytes_at_a_time() -> None:
    """Lines of every length around the 8-byte words the first pass reads, with comments,
    blank lines, CRs and qid tokens, at every offset of the buffer."""
    from hogwild.data.formats import _textparse as kp

    rng = np.random.default_rng(5)
    tokens = [b"1", b":", b" ", b"\t", b"\r", b"#", b"0.5", b"qid:3", b"12:0.25", b"-1", b"::"]
    for _ in range(1500):
        lines = [b"".join(tokens[int(t)] for t in rng.integers(0, len(tokens),
                                                               int(rng.integers(0, 30))))
                 for _ in range(int(rng.integers(1, 10)))]
        text = b"\n".join(lines) + b"\n"
        pad = int(rng.integers(0, 9))
        buf = np.frombuffer(b"x" * pad + text + b"Z" * int(rng.integers(0, 9)), dtype=np.uint8)
        caps = np.full(16, -1, dtype=np.int64)
        n_rows, n_lines = kp.row_caps(buf, pad, pad + len(text), caps, 3)
        assert (list(caps[3:3 + int(n_rows)]), int(n_lines)) == _caps_by_hand(text), text


@pytest.mark.parametrize("read", ["whole", "blocks"])
def test_an_unreadable_path_is_one_line_naming_it_whichever_reader(tmp_path: Path,
                                                                  read: str) -> None:
    from hogwild.data.formats.svmlight import read_bytes

    def load(path: Path) -> object:
        return read_bytes(path) if read == "whole" else list(textblocks.text_blocks(path))

    missing = tmp_path / "none.svm"
    with pytest.raises(DataError, match=f"^data file not found: {missing}$"):
        load(missing)
    with pytest.raises(DataError, match=f"^data path is a directory, not a file: {tmp_path}$"):
        load(tmp_path)
