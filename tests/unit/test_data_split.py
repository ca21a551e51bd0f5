"""Permutation, train/validation/test split and shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hogwild.data.csr import CSRData
from hogwild.data.formats.placement import permuted
from hogwild.data.transform.split import shard, train_val_test_split


def numbered(n: int) -> CSRData:
    """Row i holds the single feature i with value i, label = i: rows identify themselves."""
    return CSRData(np.arange(n + 1), np.arange(n), np.arange(n, dtype=np.float32),
                   np.arange(n, dtype=np.float32), max(n, 1))


def ids(d: CSRData) -> np.ndarray:
    return d.labels.astype(np.int64)


def test_permute_is_a_seeded_permutation() -> None:
    d = numbered(1000)
    p = permuted(d, 1)
    assert sorted(ids(p).tolist()) == list(range(1000))
    assert not np.array_equal(ids(p), np.arange(1000))
    assert np.array_equal(ids(permuted(d, 1)), ids(p))
    assert np.array_equal(p.indices, ids(p))  # rows moved whole


def test_split_disjoint_complete_sizes() -> None:
    d = numbered(1001)
    tr, va, te = train_val_test_split(d, val_fraction=0.1, test_fraction=0.2, seed=0)
    assert (va.n_rows, te.n_rows, tr.n_rows) == (100, 200, 701)
    all_ids = np.concatenate([ids(tr), ids(va), ids(te)])
    assert sorted(all_ids.tolist()) == list(range(1001))
    assert not np.array_equal(ids(tr), np.sort(ids(tr)))  # train comes permuted
    tr2, _, _ = train_val_test_split(d, val_fraction=0.1, test_fraction=0.2, seed=0)
    assert np.array_equal(ids(tr), ids(tr2))
    with pytest.raises(ValueError):
        train_val_test_split(d, val_fraction=0.5, test_fraction=0.5, seed=0)


def test_partition_shards() -> None:
    d = numbered(103)
    parts = shard(d, 4, seed=1)
    sizes = [p.n_rows for p in parts]
    assert sum(sizes) == 103 and max(sizes) - min(sizes) <= 1
    got = np.concatenate([ids(p) for p in parts])
    assert sorted(got.tolist()) == list(range(103))
    for p in parts:
        p.validate()


def test_replicate_shards() -> None:
    d = numbered(200)
    parts = shard(d, 3, seed=1, mode="replicate")
    for p in parts:
        assert sorted(ids(p).tolist()) == list(range(200))
    assert not np.array_equal(ids(parts[0]), ids(parts[1]))
    with pytest.raises(ValueError):
        shard(d, 2, seed=0, mode="mirror")
    with pytest.raises(ValueError):
        shard(d, 0, seed=0)


def test_row_weights_follow_splits_and_shards() -> None:
    from hogwild.data.transform.split import shard, split_shuffled, train_val_test_split

    base = _weighted()
    parts = train_val_test_split(base, val_fraction=0.2, test_fraction=0.2, seed=3)
    parts += split_shuffled(base, val_fraction=0.2, test_fraction=0.2)
    parts += tuple(shard(base, 3, seed=1))
    for part in parts:
        # Each row's weight is its label's (made so below): a row keeps its own weight.
        assert part.weights is not None
        assert np.array_equal(part.weights, part.labels * 10.0)


def _weighted() -> CSRData:
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 50, size=60).astype(np.float32)
    indptr = np.arange(61, dtype=np.int64)
    indices = rng.integers(0, 5, size=60).astype(np.int32)
    return CSRData(indptr, indices, np.ones(60, np.float32), labels, 5, weights=labels * 10.0)


# ------------------------------------------------------------------ classes the split left out


def test_every_class_with_a_training_row_says_nothing() -> None:
    from hogwild.data.transform.classweights import untrained_classes

    targets = np.array([-1, 1, 1, -1], dtype=np.float32)
    assert untrained_classes((0.0, 1.0), targets, targets) is None
    assert untrained_classes(None, targets, targets) is None  # regression: no classes


def test_a_class_left_out_of_training_is_named_with_its_rows() -> None:
    from hogwild.data.transform.classweights import untrained_classes

    # multiclass targets are class indices: class 2 (label 3) only in the held-out rows
    everything = np.array([0, 1, 0, 1, 2], dtype=np.float32)
    note = untrained_classes((1.0, 2.0, 3.0), everything[:4], everything)
    assert note is not None
    assert note.startswith("class 3 has no training row: its one row is in the validation")
    assert "never predicts it" in note and "counts as an error" in note
    # two classes, three rows: both named, the rows counted
    everything = np.array([0, 0, 1, 2, 2], dtype=np.float32)
    note = untrained_classes((5.0, 7.0, 9.0), everything[:2], everything)
    assert note is not None
    assert note.startswith("classes 7, 9 have no training row: their 3 rows are all in")
    # binary -1/+1 targets: the positive class (the second) missing
    note = untrained_classes((0.0, 1.0), np.array([-1, -1], dtype=np.float32),
                             np.array([-1, -1, 1, 1], dtype=np.float32))
    assert note is not None and note.startswith("class 1 has no training row: its 2 rows")


def test_the_split_warns_of_a_class_it_left_out_of_training(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from hogwild.config import Settings
    from hogwild.engine.runstart import load_splits

    path = _rare_class_file(tmp_path, "3 3:1 4:0.5", labels=(1, 2))
    said = {}
    for seed in range(12):
        caplog.clear()
        with caplog.at_level("WARNING"):
            splits = load_splits(Settings(data=str(path), threads=1, seed=seed))
        held_out = int(np.sum(splits.val.labels == 2) + np.sum(splits.test.labels == 2))
        warned = any("class 3 has no training row" in r.getMessage() for r in caplog.records)
        assert warned == (held_out == 1), seed
        said[warned] = seed
    assert set(said) == {True, False}  # both cases met among the seeds


def _rare_class_file(tmp_path: Path, rare: str, labels: tuple[int, int]) -> Path:
    """400 rows of two labels, and one row ``rare`` of a third in their middle."""
    path = tmp_path / "rare.svm"
    lines = [f"{labels[i % 2]} {1 + i % 2}:1 {3 + i % 5}:0.5" for i in range(400)]
    lines.insert(200, rare)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_out_of_core_warns_of_a_class_it_left_out_of_training_too(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from hogwild.config import Settings
    from hogwild.inprocess.outofcore import TEST, VAL, open_data

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # binary: one +1 row among 400 of -1 (the two "labels" of the helper are both -1)
    path = _rare_class_file(tmp_path, "1 3:1 4:0.5", labels=(-1, -1))
    said = set()
    for seed in range(12):
        caplog.clear()
        settings = Settings(data=str(path), threads=1, seed=seed, out_of_core=True)
        with caplog.at_level("WARNING"):
            source, _ = open_data(settings, io.StringIO())
        held_out = bool(source.role[200] in (VAL, TEST))  # the +1 row is row 200 of the file
        warned = any("class 1 has no training row" in r.getMessage() for r in caplog.records)
        assert warned == held_out, seed
        said.add(warned)
    assert said == {True, False}
