"""hogwild.run_cluster: a real coordinator and workers started from Python, the model loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hogwild import HogwildClassifier, HogwildRegressor, run_cluster
from hogwild.data.sources import load_source

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

_DEADLINES = {"register_timeout": 60, "connect_timeout": 60, "rpc_timeout": 5,
              "barrier_timeout": 5, "data_cache": False}


def test_run_cluster_on_a_data_source_matches_the_runs_report(tmp_path: Path) -> None:
    out = tmp_path / "run"
    clf = run_cluster("bundled:spamassassin", workers=2, threads=1, mode="async", epochs=3,
                      out_dir=out, **_DEADLINES)
    assert isinstance(clf, HogwildClassifier)
    reported = json.loads((out / "latest" / "metrics.json").read_text())
    assert reported["workers"] == 2 and reported["mode"] == "async"
    test = load_source("bundled:spamassassin/test", cache=False)
    assert clf.score(test.to_scipy(), test.labels) == pytest.approx(
        reported["test_accuracy"], abs=1e-12)
    assert reported["test_accuracy"] > 0.95


def test_run_cluster_on_arrays_keeps_the_callers_labels_and_cleans_up(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n, d = 3000, 200
    X = sp.random(n, d, density=0.05, random_state=1, format="csr", dtype=np.float64)
    w = rng.normal(size=d)
    y = np.where(X @ w > 0, "yes", "no")
    y_numeric = np.where(y == "yes", 20, 10)
    clf = run_cluster(X, y_numeric, workers=2, threads=1, mode="sync", epochs=5,
                      learning_rate=0.1, **_DEADLINES)
    assert isinstance(clf, HogwildClassifier)
    assert clf.classes_.tolist() == [10, 20] and clf.coef_.shape == (1, d)
    assert set(np.unique(clf.predict(X))) <= {10, 20}
    assert clf.score(X, y_numeric) > 0.85
    reg = run_cluster(X, X @ w, workers=2, threads=1, epochs=5, loss="squared",
                      learning_rate=0.05, **_DEADLINES)
    assert isinstance(reg, HogwildRegressor) and reg.score(X, X @ w) > 0.5
    with pytest.raises(ValueError, match="binary"):
        run_cluster(X, rng.integers(0, 3, size=n), workers=2)


def test_run_cluster_reports_a_failed_run_and_a_bad_setting(tmp_path: Path) -> None:
    from hogwild.errors import ConfigError

    with pytest.raises(RuntimeError, match="data file not found"):
        run_cluster(str(tmp_path / "missing.svm"), workers=1, **_DEADLINES)
    with pytest.raises(ConfigError, match="mode"):
        run_cluster("bundled:spamassassin", workers=1, mode="sometimes")
