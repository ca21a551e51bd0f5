"""Validation accuracy per epoch under each step-size schedule, as `hogwild train` runs it.

Prints one row per (data set, schedule): the validation accuracy after every epoch (early
stopping off), the largest drop below an earlier epoch's accuracy, and the test accuracy at
the end. Each configuration runs ``--seeds`` times (different splits and row orders) and the
row shows the mean accuracy per epoch and the worst drop over the seeds.

    .venv/bin/python bench/bench_schedule.py                 # the bundled sets + synthetic:rcv1
    .venv/bin/python bench/bench_schedule.py --epochs 5 --seeds 1 bundled:spamassassin
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from hogwild import config
from hogwild.engine.job import train_params
from hogwild.engine.runstart import load_splits
from hogwild.engine.trainer import Trainer
from hogwild.model.evaluation import evaluate

DATA = ("bundled:spamassassin", "bundled:rcv1_vw_subset", "synthetic:rcv1?rows=200000")
# (label, lr_schedule, learning_rate): the former default (constant) first.
SCHEDULES = (
    ("constant 0.5 (x0.9/epoch)", "constant", 0.5),
    ("inverse 0.5 (default)", "inverse", 0.5),
    ("inverse 0.25", "inverse", 0.25),
    ("invscaling 0.5 (t^-0.5)", "invscaling", 0.5),
)


def curve(data: str, schedule: str, rate: float, epochs: int, seed: int,
          threads: int, loss: str) -> tuple[list[float], float]:
    settings = config.load(environ={}).replace(
        data=data, lr_schedule=schedule, learning_rate=rate, seed=seed, threads=threads,
        data_cache=False, loss=loss)
    splits = load_splits(settings)
    trainer = Trainer(splits.train.n_features, train_params(settings))
    accs = []
    for epoch in range(epochs):
        trainer.fit_epoch(splits.train, epoch)
        accs.append(float(evaluate(splits.val, trainer.w, settings.loss).accuracy or 0.0))
    return accs, float(evaluate(splits.test, trainer.w, settings.loss).accuracy or 0.0)


def worst_drop(accs: list[float]) -> float:
    best = -1.0
    drop = 0.0
    for a in accs:
        drop = max(drop, best - a)
        best = max(best, a)
    return drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="*", default=list(DATA))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loss", default="hinge", choices=("hinge", "logistic"))
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.loss}, {args.threads} threads, "
          f"{args.epochs} epochs, mean over {args.seeds} seed(s)")
    for data in args.data:
        print(f"\n{data}")
        print(f"{'schedule':<26} {'validation accuracy per epoch':<{7 * args.epochs}} "
              f"{'worst drop':>10} {'test acc':>8}")
        for label, schedule, rate in SCHEDULES:
            runs = [curve(data, schedule, rate, args.epochs, seed, args.threads, args.loss)
                    for seed in range(args.seeds)]
            mean = np.mean([r[0] for r in runs], axis=0)
            drop = max(worst_drop(r[0]) for r in runs)
            test = float(np.mean([r[1] for r in runs]))
            print(f"{label:<26} {' '.join(f'{a:.3f}' for a in mean):<{7 * args.epochs}} "
                  f"{drop:>10.3f} {test:>8.4f}", flush=True)


if __name__ == "__main__":
    main()
