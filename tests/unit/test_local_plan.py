"""The coordinator's side of shipping: local (coordinator.localplan): what it keeps and sends."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from hogwild.cluster.coordinator.data.localplan import load_local
from hogwild.config import Settings
from hogwild.data.transform.reorder import check_order
from hogwild.errors import ConfigError


def test_sources_built_by_the_coordinator_are_refused_naming_shipping() -> None:
    settings = Settings().replace(shipping="local", data="synthetic:rcv1?rows=100")
    with pytest.raises(ConfigError, match="setting 'shipping': local needs `data` to be a "
                                          "svmlight file: synthetic:"):
        load_local(settings)


def test_a_bundled_file_is_planned_for_every_worker() -> None:
    settings = Settings().replace(shipping="local", workers=3, data="bundled:spamassassin")
    splits, local = load_local(settings)
    plan = local.plan
    assert splits.train.n_rows == 0  # the coordinator holds no training row
    assert plan.total_rows == 4836 and splits.test.n_rows == 1210  # the bundled test file
    assert plan.train_rows + splits.val.n_rows == plan.total_rows and plan.test.n_rows == 0
    assert set(np.unique(splits.val.labels).tolist()) == {-1.0, 1.0}
    order = check_order(local.order, 23941)
    assert splits.feature_order is local.order and order.shape == (23941,)
    # the hottest training feature gets id 0
    assert int(order[int(np.argmax(plan.df))]) == 0
    covered = []
    for w in range(3):
        msg = local.source(w)
        assert msg.path == "bundled:spamassassin" and msg.n_features == 23941
        assert list(msg.classes) == [-1.0, 1.0]  # the file's labels, negative first
        assert msg.holdout == pytest.approx(0.1) and msg.text_bytes == plan.text_bytes
        assert sum(r.train_rows for r in msg.ranges) == local.train_rows(w) > 0
        covered += [(r.first_row, r.first_row + r.rows) for r in msg.ranges]
    covered.sort()
    assert covered[0][0] == 0 and covered[-1][1] == plan.total_rows
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    # each worker shuffles its rows with a seed of its own
    assert len({local.source(w).shuffle_seed for w in range(3)}) == 3
    report = local.ranges_report(3)
    assert report["train_rows"] == plan.train_rows and len(report["workers"]) == 3
    assert "none held here" in local.describe()


def test_a_stray_huge_feature_id_is_refused_by_name_before_its_arrays_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hogwild.data.parts.ranges
    from hogwild.errors import DataError

    data = tmp_path / "wide.svm"
    data.write_text(("1 1:0.5\n-1 2:1\n" * 20 + "1 3000000:1\n") * 5)
    settings = Settings().replace(shipping="local", workers=2, data=str(data))
    # A machine of 64 MiB: 3e6 ids x (16 bytes of counts + 24 the job keeps per id).
    monkeypatch.setattr(hogwild.data.parts.ranges, "physical_memory", lambda: 64 << 20)
    with pytest.raises(DataError, match=r"wide.svm: the largest feature id is 3,000,000: the "
                                        r"weights and counts kept per feature id need 114.4 "
                                        r"MiB, more than the 64.0 MiB this machine allows"):
        load_local(settings)
    # Below the RAM but beyond a limit (ulimit -v): the MemoryError is blamed on the ids.
    monkeypatch.setattr(hogwild.data.parts.ranges, "physical_memory", lambda: None)

    grown = hogwild.data.parts.ranges.grown

    def no_memory(counts: np.ndarray, size: int) -> np.ndarray:
        if size > 1000:
            raise MemoryError
        return grown(counts, size)

    monkeypatch.setattr(hogwild.data.parts.ranges, "grown", no_memory)
    with pytest.raises(DataError, match=r"the largest feature id is 3,000,000: the weights and "
                                        r"counts kept per feature id need 114.4 MiB; renumber"):
        load_local(settings)


def test_a_scan_tells_of_a_class_it_left_without_a_training_row(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # one +1 row among 400 of -1: on some seeds it is held out, and the scan's label counts
    # (training rows per label) say so, as a split in memory does
    lines = [f"-1 {1 + i % 2}:1 {3 + i % 5}:0.5" for i in range(400)]
    lines.insert(200, "1 3:1 4:0.5")
    path = tmp_path / "rare.svm"
    path.write_text("\n".join(lines) + "\n")
    said = set()
    for seed in range(12):
        settings = Settings().replace(shipping="local", workers=2, data=str(path), seed=seed,
                                      local_plan="scan")
        caplog.clear()
        with caplog.at_level("WARNING"):
            _, local = load_local(settings)
        trained = dict(zip(local.plan.labels.tolist(), local.plan.label_counts.tolist()))
        warned = any("class 1 has no training row: its one row is in the validation or test "
                     "split" in r.getMessage() for r in caplog.records)
        assert warned == (trained.get(1.0, 0) == 0), seed
        said.add(warned)
    assert said == {True, False}
