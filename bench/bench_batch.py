"""Seconds per pass of mini-batch SGD (batch sizes 1, 2, 125) beside scikit-learn's SGDClassifier.

One run, the same RCV1-shaped synthetic rows for everybody (renumbered by document frequency
and permuted once, as the training job does), hinge loss, the trainer's default settings.
Engines: hogwild with 1 and 2 threads at each batch size (B = 1 is the per-example kernel,
B > 1 the mini-batch kernel: each thread applies the mean gradient of B rows in one step),
syncsgd with 2 threads (the threads share each mini-batch, a barrier per mini-batch), and
SGDClassifier (per example, one partial_fit per pass). Passes are interleaved across engines;
medians. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from bench_engine import LOSS, PassEngine, SklearnEngine, print_results, run_interleaved


class BatchEngine(PassEngine):
    """The Trainer at one (mode, threads, batch_size), otherwise the training job's defaults
    (buffered hot features for per-example hogwild threads)."""

    def __init__(self, train: Any, test: Any, *, mode: str, threads: int, batch: int) -> None:
        from hogwild.engine.trainer import Trainer, TrainParams
        from hogwild.model.hot import RENUMBERED_HOT_FEATURES

        self.name = f"{mode}, {threads} thread{'s' if threads > 1 else ''}, batch {batch}"
        self.note = "per-example kernel" if batch == 1 else (
            "threads share each mini-batch" if mode == "syncsgd" else "mini-batch per thread")
        self.train, self.test = train, test
        self.trainer = Trainer(train.n_features, TrainParams(
            loss=LOSS, threads=threads, mode=mode, batch_size=batch,
            hot_features=RENUMBERED_HOT_FEATURES))

    def one_pass(self, epoch: int) -> None:
        self.trainer.fit_epoch(self.train, epoch)

    def accuracy(self) -> float:
        from hogwild.model.evaluation import evaluate

        acc = evaluate(self.test, self.trainer.w, LOSS).accuracy
        return float("nan") if acc is None else acc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000,
                    help="synthetic rows, 90%% train / 10%% test (default 400000)")
    ap.add_argument("--epochs", type=int, default=5, help="passes per engine (default 5)")
    ap.add_argument("--batch-sizes", default="1,2,125", help="default 1,2,125")
    ap.add_argument("--no-sklearn", action="store_true", help="skip SGDClassifier")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each round of passes wait up to SECONDS for other processes "
                         "to go idle (default 0: do not wait)")
    args = ap.parse_args(argv)
    sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]

    from hogwild.model.warmup import warmup

    started = time.perf_counter()
    print(common.machine_line())
    print(common.load_line())
    warmup()
    data = common.rcv1_like(args.rows, seed=0)
    n_train = data.n_rows * 9 // 10
    train, test = common.renumbered(data.slice(0, n_train), data.slice(n_train, data.n_rows))
    train = common.shuffled(train, seed=1)
    print(f"synthetic RCV1-shaped data: {train.n_rows:,} train / {test.n_rows:,} test rows, "
          f"{train.nnz:,} train non-zeros")

    engines: dict[str, PassEngine] = {}
    for b in sizes:
        for t in (1, 2):
            engines[f"hogwild-{t}-{b}"] = BatchEngine(train, test, mode="hogwild", threads=t,
                                                      batch=b)
        if b >= 2:
            engines[f"syncsgd-2-{b}"] = BatchEngine(train, test, mode="syncsgd", threads=2,
                                                    batch=b)
    if not args.no_sklearn:
        engines["sklearn"] = SklearnEngine(train, test)
    res = run_interleaved(engines, max(3, args.epochs), args.wait_quiet)
    print_results(res, f"per pass, {max(3, args.epochs)} passes each (hinge)")

    print("\n== ratios of seconds per pass (wall, then CPU); > 1: the first named is slower ==")

    def ratio(label: str, slow: str, fast: str) -> None:
        a, b = res[slow], res[fast]
        cpu = (a.cpu / b.cpu) if a.cpu and b.cpu else float("nan")
        print(f"{common.ratio_line(label, a.seconds / b.seconds)}   CPU {cpu:6.2f}x")

    for b in sizes:
        if b == 1:
            continue
        for t in (1, 2):
            ratio(f"hogwild {t}T: batch {b} / batch 1", f"hogwild-{t}-{b}", f"hogwild-{t}-1")
        if f"syncsgd-2-{b}" in res:
            ratio(f"batch {b}, 2T: syncsgd / hogwild", f"syncsgd-2-{b}", f"hogwild-2-{b}")
    for b in sizes:
        ratio(f"batch {b}: hogwild 1T / 2T (2T speedup)", f"hogwild-1-{b}", f"hogwild-2-{b}")
    if "sklearn" in res:
        for b in sizes:
            for t in (1, 2):
                ratio(f"scikit-learn / hogwild {t}T batch {b}", "sklearn", f"hogwild-{t}-{b}")
    print(common.load_line())
    print(f"\nbench_batch finished in {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
