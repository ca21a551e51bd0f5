"""How much of a round's sparse update a coordinate-wise robust combine would throw away.

A coordinate-wise trimmed mean over W workers drops the k highest and k lowest values of
each coordinate (k = W/4 here); a coordinate-wise median keeps the middle one. Where fewer
than k + 1 workers touched a coordinate in the round (the others' deltas are 0 there), the
trimmed mean of that coordinate is 0: the honest update is lost; the median loses every
coordinate fewer than half the workers touched. For each data set, worker count and rounds
an epoch, this deals the rows to W workers at random and counts, over one round of each:

* the coordinates (features) touched by at most k workers, and their share of the round's
  |x| mass (what the gradient steps are proportional to);
* the same for fewer than half the workers (the median's loss).

    python bench/bench_robust_sparsity.py [--data FILE ...] [--workers 4,8] [--rounds 1,4]

Defaults: the real text sets of ../shared/data (Reuters earn, the RCV1 subset, SpamAssassin).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_SETS = ["reuters21578_modapte_earn.train.libsvm.gz", "rcv1_vw_subset.train.libsvm.gz",
                "spamassassin.train.libsvm.gz"]


def lost_shares(path: Path, workers: int, rounds: int, seed: int) -> tuple[float, ...]:
    """(trimmed: coordinates %, mass %; median: coordinates %, mass %) for one round."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        x = load_svmlight_file(f)[0].tocsr()
    rows = x.shape[0] // workers // rounds
    order = np.random.default_rng(seed).permutation(x.shape[0])
    counts = np.zeros(x.shape[1], dtype=np.int64)
    mass = np.zeros(x.shape[1])
    share = x.shape[0] // workers
    for w in range(workers):
        part = x[order[w * share: w * share + rows]]
        counts[np.unique(part.indices)] += 1
        mass += np.asarray(abs(part).sum(axis=0)).ravel()
    touched = counts > 0
    k = max(1, workers // 4)
    out = []
    for lost in ((counts <= k) & touched, (counts < workers / 2) & touched):
        out += [100 * lost.sum() / touched.sum(), 100 * mass[lost].sum() / mass.sum()]
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="*", type=Path,
                        default=[SHARED / name for name in DEFAULT_SETS])
    parser.add_argument("--workers", default="4,8")
    parser.add_argument("--rounds", default="1,4", help="rounds an epoch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print("| data | W | rounds an epoch | trimmed (k = W/4): coordinates lost | mass lost "
          "| median: coordinates lost | mass lost |")
    print("|---|---|---|---|---|---|---|")
    for path in args.data:
        for workers in (int(w) for w in args.workers.split(",")):
            for rounds in (int(r) for r in args.rounds.split(",")):
                shares = lost_shares(path, workers, rounds, args.seed)
                cells = " | ".join(f"{v:.0f} %" if i % 2 == 0 else f"{v:.1f} %"
                                   for i, v in enumerate(shares))
                print(f"| {path.name.split('.')[0]} | {workers} | {rounds} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
