"""Scoring speed of `hogwild predict` against scikit-learn's decision_function on the same CSR.

hogwild: ``hogwild.model.scoring.margins`` (what `hogwild predict` and the estimators call:
the compiled margin kernel over contiguous row blocks, one thread each) with 1 and 2 threads.
scikit-learn: ``SGDClassifier.decision_function`` of a classifier holding the same weights
(``coef_``/``intercept_`` copied from the hogwild model), on the same float32 CSR matrix.
Both get the matrix already in memory; parsing is measured by bench_parse.py. The engines are
interleaved run by run; rows/s from the median of --repeats runs (quiet runs only when at
least 3 were quiet, see common.Timing), and the median CPU seconds of this process (robust
on a busy machine for the one-thread engines); the margins of every engine are checked to
agree.

    python bench/bench_predict.py [--rows 400000] [--repeats 5] [--no-real]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common import (
    Timing,
    load_line,
    machine_line,
    print_table,
    ratio_line,
    timed,
    wait_for_quiet,
)
from hogwild.data.csr import CSRData
from hogwild.data.sources import load_source
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.model import scoring


def trained_weights(data: CSRData) -> np.ndarray:
    """A real model: two hinge passes of the trainer on the first rows (so the margins are
    those of a fitted classifier, not of random weights)."""
    train = data.slice(0, min(data.n_rows, 50_000))
    model = Trainer(data.n_features, TrainParams(loss="hinge", threads=1, mode="serial"))
    model.fit(train, 2)
    return model.w.copy()


def sklearn_twin(w: np.ndarray, X: Any) -> Any:
    """An SGDClassifier fitted for one step (to create its attributes), then given ``w``."""
    from sklearn.linear_model import SGDClassifier

    clf = SGDClassifier(loss="hinge", max_iter=1, tol=None)
    clf.partial_fit(X[:2], np.array([-1.0, 1.0]), classes=np.array([-1.0, 1.0]))
    clf.coef_ = w[:-1][None, :].copy()
    clf.intercept_ = np.array([w[-1]])
    return clf


def bench_set(name: str, data: CSRData, repeats: int, wait: float) -> list[Any]:
    w = trained_weights(data)
    X = data.to_scipy()
    clf = sklearn_twin(w, X)
    engines: dict[str, Callable[[], np.ndarray]] = {
        "hogwild 1 thread": lambda: scoring.margins(w, data, 1),
        "hogwild 2 threads": lambda: scoring.margins(w, data, 2),
        "scikit-learn decision_function": lambda: np.asarray(clf.decision_function(X)),
    }
    results = {label: fn() for label, fn in engines.items()}  # warm-up + agreement check
    reference = results["scikit-learn decision_function"]
    for label, got in results.items():
        if not np.allclose(got, reference, rtol=1e-6, atol=1e-6):
            sys.exit(f"{name}: {label} disagrees with scikit-learn's margins")
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in engines}
    cpu: dict[str, list[float]] = {label: [] for label in engines}
    labels = list(engines)
    for r in range(repeats):
        if wait:
            wait_for_quiet(wait)
        for k in range(len(labels)):
            label = labels[(r + k) % len(labels)]  # rotate who goes first
            c0 = time.process_time()
            runs[label].append(timed(engines[label]))
            cpu[label].append(time.process_time() - c0)
    timings = {label: Timing(tuple(t for t, _ in v), tuple(o for _, o in v))
               for label, v in runs.items()}
    sk = timings["scikit-learn decision_function"].median
    sk_cpu = statistics.median(cpu["scikit-learn decision_function"])
    rows = []
    for label, t in timings.items():
        c = statistics.median(cpu[label])
        rows.append([name, label, f"{data.n_rows / t.median / 1e6:.2f}", t.median, t.spread(),
                     t.quality(), f"{sk / t.median:.2f}x", c, f"{sk_cpu / c:.2f}x"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000,
                        help="synthetic RCV1-shaped rows (default 400000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per engine")
    parser.add_argument("--no-real", action="store_true", help="skip the bundled data sets")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each round, wait up to SECONDS for the machine to be idle")
    args = parser.parse_args(argv)
    print(machine_line())
    print(load_line())
    scoring.warmup()
    sets = [(f"synthetic {args.rows // 1000}k", load_source(f"synthetic:rcv1?rows={args.rows}&seed=1"))]
    if not args.no_real:
        for name in ("rcv1_vw_subset", "spamassassin"):
            train = load_source(f"bundled:{name}")
            test = load_source(f"bundled:{name}/test")
            both = CSRData(np.concatenate([train.indptr, test.indptr[1:] + train.nnz]),
                           np.concatenate([train.indices, test.indices]),
                           np.concatenate([train.values, test.values]),
                           np.concatenate([train.labels, test.labels]), train.n_features)
            sets.append((f"{name} train+test", both))
    rows: list[Any] = []
    for name, data in sets:
        print(f"{name}: {data.n_rows:,} rows, {data.nnz:,} non-zeros", flush=True)
        rows.extend(bench_set(name, data, args.repeats, args.wait_quiet))
    print_table(["data", "engine", "M rows/s", "median s", "spread", "timed runs",
                 "vs sklearn", "cpu s", "vs sklearn (cpu)"], rows,
                title="scoring a CSR matrix (margins of a linear model)")
    print()
    for name, _ in sets:
        mine = next(r for r in rows if r[0] == name and r[1] == "hogwild 2 threads")
        ratio = float(mine[6].rstrip("x"))
        print(ratio_line(f"{name}: 2 threads vs scikit-learn", ratio, ">= 1x", ratio >= 1.0))
    print(load_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
