"""A model remembers its training data's most frequent features; predict and eval refuse new
data that shares few of them (another vocabulary or hashing), and so does a run its test
file, on real data sets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hogwild.cli import main
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.featurespace import (
    foreign_space_warning,
    frequent_features,
    shared_frequent,
)
from hogwild.data.transform.reorder import frequency_order

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SPAM = (DATA / "spamassassin.train.libsvm.gz", DATA / "spamassassin.test.libsvm.gz")
REUTERS_TEST = DATA / "reuters21578_modapte_earn.test.libsvm.gz"


def _rows(ids_per_row: list[list[int]], n_features: int) -> CSRData:
    indptr = np.cumsum([0] + [len(r) for r in ids_per_row]).astype(np.int64)
    indices = np.array([i for r in ids_per_row for i in r], dtype=np.int32)
    return CSRData(indptr, indices, np.ones(indices.shape[0], dtype=np.float32),
                   np.ones(len(ids_per_row), dtype=np.float32), n_features)


def test_the_most_frequent_features_and_what_data_shares_of_them() -> None:
    train = _rows([[0, 5, 7], [5, 7], [5], [2, 9]], 10)
    # by document frequency: 5 (3 rows), 7 (2), then 0, 2, 9 by id
    assert frequent_features(frequency_order(train), kept=5) == [5, 7, 0, 2, 9]
    other = _rows([[1, 3], [3, 4], [3], [5]], 10)
    assert shared_frequent(other, [5, 7], looked_up=3) == (0, 3)  # its top 3: 3, 1, 4
    assert shared_frequent(other, [5, 7], looked_up=10) == (1, 4)  # only 4 ids occur
    # too few distinct features to judge: no warning either way
    assert foreign_space_warning(other, [5, 7], "f") is None


def test_a_wide_foreign_file_is_named_and_a_matching_one_is_not() -> None:
    rng = np.random.default_rng(0)
    rows = [sorted(rng.choice(40, size=5, replace=False).tolist()) for _ in range(200)]
    frequent = frequent_features(frequency_order(_rows(rows, 1000)))
    assert foreign_space_warning(_rows(rows, 1000), frequent, "same") is None
    shifted = [[i + 500 for i in r] for r in rows]  # the same shape, other ids
    text = foreign_space_warning(_rows(shifted, 1000), frequent, "other.svm")
    assert text is not None and text.startswith("other.svm: only 0 of its 40 most frequent "
                                                "features are among the 256 most frequent")


def test_predict_and_eval_refuse_data_from_another_feature_space(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (SPAM[0].exists() and REUTERS_TEST.exists()):
        pytest.skip(f"shared data sets not found in {DATA}")
    model = tmp_path / "spam"
    assert main(["train", "--data", str(SPAM[0]), "--test", str(SPAM[1]), "--epochs", "1",
                 "--threads", "1", "--data-cache", "false", "--out", str(model)],
                environ={}) == 0
    model = model / "latest"
    kept = json.loads((model / "model.json").read_text())["frequent_features"]
    assert len(kept) == 256 and len(set(kept)) == 256
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(SPAM[1]), "--out",
                 str(tmp_path / "p.txt")], environ={}) == 0
    assert "feature space" not in capsys.readouterr().err
    # Refused by default: its metrics (and predictions) would mean nothing; no file written.
    preds = tmp_path / "reuters.txt"
    for command in (["eval"], ["predict", "--out", str(preds)]):
        assert main([*command, "--model", str(model), "--data", str(REUTERS_TEST)],
                    environ={}) != 0
        err = capsys.readouterr().err
        assert (f"hogwild {command[0]}: error: {REUTERS_TEST}: only 0 of its 64 most frequent "
                "features are among the 256 most frequent of the model's training data") in err
        assert err.rstrip().endswith("Not scored: give --any-feature-space to score it "
                                     "anyway."), err
    assert not preds.exists()
    # Asked for: scored, with the same finding as a warning.
    assert main(["eval", "--model", str(model), "--data", str(REUTERS_TEST),
                 "--any-feature-space"], environ={}) == 0
    err = capsys.readouterr().err
    assert (f"hogwild eval: warning: {REUTERS_TEST}: only 0 of its 64 most frequent features "
            "are among the 256 most frequent of the model's training data") in err, err


def test_data_that_uses_every_feature_evenly_is_not_judged() -> None:
    """Its most frequent features are a draw: however few of them the model knows, that says
    nothing about its space, so it is neither refused nor warned about."""
    rng = np.random.default_rng(1)
    frequent = list(range(256))
    even = [sorted(rng.choice(20_000, size=30, replace=False).tolist()) for _ in range(2000)]
    data = _rows(even, 20_000)
    shared, k = shared_frequent(data, frequent)
    assert k == 64 and shared < 0.25 * k  # would be foreign by the overlap alone
    assert foreign_space_warning(data, frequent, "even.svm") is None
    # The same ids, skewed as real data is (a few features in most rows): judged foreign.
    skewed = [sorted({*r[:25], *(1000 + j for j in range(5 + i % 60))}) for i, r in
              enumerate(even)]
    text = foreign_space_warning(_rows(skewed, 20_000), frequent, "skewed.svm")
    assert text is not None and text.startswith("skewed.svm: only 0 of its 64")


@pytest.mark.parametrize("out_of_core", [False, True])
def test_train_refuses_a_test_file_from_another_feature_space(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], out_of_core: bool) -> None:
    """Its test figures would mean nothing: refused before training, nothing written; the
    training data's own test file is taken."""
    if not (SPAM[0].exists() and REUTERS_TEST.exists()):
        pytest.skip(f"shared data sets not found in {DATA}")
    args = ["train", "--data", str(SPAM[0]), "--epochs", "1", "--threads", "1",
            "--data-cache", "false", "--out-of-core", str(out_of_core).lower()]
    out = tmp_path / "foreign"
    assert main([*args, "--test", str(REUTERS_TEST), "--out", str(out)], environ={}) != 0
    err = capsys.readouterr().err
    assert (f"{REUTERS_TEST}: only 0 of its 64 most frequent features are among the 256 most "
            "frequent of the model's training data") in err, err
    assert "Not used as the test set: its figures would mean nothing." in err
    assert not (out / "latest").exists()
    assert main([*args, "--test", str(SPAM[1]), "--out", str(tmp_path / "own")],
                environ={}) == 0


def test_the_local_plan_refuses_a_test_file_from_another_feature_space() -> None:
    """`run` with shipping local: the coordinator checks the test file against the plan's
    frequencies before any worker is sent a range."""
    if not (SPAM[0].exists() and REUTERS_TEST.exists()):
        pytest.skip(f"shared data sets not found in {DATA}")
    from hogwild.cluster.coordinator.data.localplan import load_local
    from hogwild.config import Settings
    from hogwild.errors import DataError

    base = Settings().replace(shipping="local", workers=2, data=str(SPAM[0]), data_cache=False)
    with pytest.raises(DataError, match="only 0 of its 64 most frequent features"):
        load_local(base.replace(test_data=str(REUTERS_TEST)))
    splits, _ = load_local(base.replace(test_data=str(SPAM[1])))
    assert splits.test.n_rows == 1210
