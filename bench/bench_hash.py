"""Feature hashing of a CSV file: hogwild's per-column hashing against scikit-learn's
FeatureHasher on the same generated data, and the hash collisions of each column.

Data: a generated CSV (--rows, default 300k) with a label, three high-cardinality categorical
columns (Zipf-like, up to 100k / 10k / 2k distinct values), two small ones (one-hot), two
numeric columns and a text column (3-8 words of a 5,000-word vocabulary).

Timed (median of --runs, the two tools interleaved run by run):
* end to end: the CSV file -> a CSR matrix. hogwild: ``fit_hashing`` (read, choose the
  encodings, hash, assemble). scikit-learn: the csv module, one list of (name, value) pairs
  per row (the input FeatureHasher takes), ``FeatureHasher(2**20, input_type="pair")``.
* hashing only, from columns already read: hogwild ``fit_table``; scikit-learn
  ``FeatureHasher.transform`` on the prepared per-row lists (their building not counted).

    python bench/bench_hash.py [--rows 300000] [--runs 3]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.data.formats.csvtable import read_table
from hogwild.data.hashing.tables import fit_hashing, fit_table
from hogwild.data.transform.encodings import HashOptions, buckets_for, sqrt_buckets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_line, machine_line, workdir

CATEGORICAL = ("user", "item", "shop", "color", "size")
NUMERIC = ("price", "age")
TEXT = ("review",)
OPTIONS = HashOptions(label="y", categorical=CATEGORICAL, text=TEXT)


def zipf_ids(rng: np.random.Generator, n: int, distinct: int) -> np.ndarray:
    """Ids in [0, distinct) with Zipf-like popularity (a few very common)."""
    return (rng.zipf(1.3, size=n) - 1) % distinct


def write_csv(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {
        "y": rng.choice(np.array(["-1", "1"]), rows),
        "user": np.char.add("u", zipf_ids(rng, rows, 100_000).astype(str)),
        "item": np.char.add("i", zipf_ids(rng, rows, 10_000).astype(str)),
        "shop": np.char.add("s", rng.integers(0, 2_000, rows).astype(str)),
        "color": rng.choice(np.array(["red", "green", "blue", "black", "white"]), rows),
        "size": np.char.add("z", rng.integers(0, 40, rows).astype(str)),
        "price": np.char.mod("%.2f", rng.lognormal(3, 1, rows)),
        "age": rng.integers(18, 90, rows).astype(str),
    }
    vocab = np.char.add("w", np.arange(5_000).astype(str))
    lengths = rng.integers(3, 9, rows)
    words = vocab[zipf_ids(rng, int(lengths.sum()), 5_000)]
    ends = np.cumsum(lengths)
    cols["review"] = np.array([" ".join(words[e - n:e]) for e, n in zip(ends, lengths)])
    names = ["y", *CATEGORICAL, *NUMERIC, *TEXT]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(zip(*(cols[n].tolist() for n in names)))


def sklearn_rows(path: Path) -> tuple[list[list[tuple[str, float]]], list[float]]:
    """The rows as FeatureHasher's "pair" input: categorical as name=value with 1, numeric
    as (name, value), words as review=word with 1 (repeats add up)."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        pos = {name: i for i, name in enumerate(header)}
        rows: list[list[tuple[str, float]]] = []
        labels: list[float] = []
        for rec in reader:
            pairs = [(f"{c}={rec[pos[c]]}", 1.0) for c in CATEGORICAL]
            pairs += [(c, float(rec[pos[c]])) for c in NUMERIC]
            pairs += [(f"review={w}", 1.0) for w in rec[pos["review"]].split()]
            rows.append(pairs)
            labels.append(float(rec[pos["y"]]))
    return rows, labels


def one_run(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): both tools run on one thread, so on a
    busy machine the CPU time is the fairer measure."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def collisions(table: Any) -> None:
    """Whole-code collisions of each hashed column for k = 1..3 against the birthday bound,
    and FeatureHasher's collisions in its one 2**20 space, for the same distinct values."""
    from sklearn.utils import murmurhash3_32

    print("\n== hash collisions: distinct values sharing their whole code with another ==")
    print(f"{'column':<8} {'distinct':>9} {'buckets':>8} {'k=1':>8} {'k=2':>8} {'k=3':>8} "
          f"{'expected k=2':>13} {'FeatureHasher 2^20':>19}")
    for name in ("user", "item", "shop"):
        uniq = np.unique(np.asarray(table.columns[name], dtype=np.str_))
        d = uniq.shape[0]
        b = sqrt_buckets(d)
        shares = []
        for k in (1, 2, 3):
            _, counts = np.unique(buckets_for(name, uniq, k, b, 0), axis=0, return_counts=True)
            shares.append(counts[counts > 1].sum() / d)
        expected = 1 - (1 - b ** -2.0) ** (d - 1)
        fh = np.array([murmurhash3_32(f"{name}={v}", positive=True) % (1 << 20)
                       for v in uniq.tolist()])
        _, fh_counts = np.unique(fh, return_counts=True)
        fh_share = fh_counts[fh_counts > 1].sum() / d
        print(f"{name:<8} {d:>9,} {b:>8,} {shares[0]:>8.2%} {shares[1]:>8.2%} {shares[2]:>8.2%} "
              f"{expected:>13.2%} {fh_share:>19.3%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from sklearn.feature_extraction import FeatureHasher

    print(machine_line())
    print(load_line())
    with workdir() as tmp:
        path = Path(tmp) / "bench.csv"
        write_csv(path, args.rows)
        size = path.stat().st_size
        print(f"data: {args.rows:,} rows, {size / 1e6:.1f} MB of CSV")
        hasher = FeatureHasher(n_features=1 << 20, input_type="pair", alternate_sign=False)
        rows, _ = sklearn_rows(path)
        table = read_table(path)
        data, _ = fit_hashing(path, OPTIONS)  # warm-up (imports, caches)
        hasher.transform(rows)
        e2e: dict[str, list[tuple[float, float]]] = {"hogwild": [], "sklearn": []}
        only: dict[str, list[tuple[float, float]]] = {"hogwild": [], "sklearn": []}
        for _ in range(max(1, args.runs)):
            e2e["hogwild"].append(one_run(lambda: fit_hashing(path, OPTIONS)))
            e2e["sklearn"].append(one_run(lambda: hasher.transform(sklearn_rows(path)[0])))
            only["hogwild"].append(one_run(lambda: fit_table(table, OPTIONS)))
            only["sklearn"].append(one_run(lambda: hasher.transform(rows)))
        print(f"\nhogwild: {data.n_features:,} features, {data.nnz:,} non-zeros; "
              f"FeatureHasher: {1 << 20:,} features (median of {args.runs})")
        print(f"\n{'':<32} {'hogwild':>10} {'sklearn':>10} {'ratio':>7}")
        for title, runs in (("end to end (CSV file -> CSR)", e2e),
                            ("hashing only (columns -> CSR)", only)):
            print(title)
            for i, clock in ((0, "wall s"), (1, "CPU s")):
                h = statistics.median(r[i] for r in runs["hogwild"])
                s = statistics.median(r[i] for r in runs["sklearn"])
                print(f"  {clock:<30} {h:>10.3f} {s:>10.3f} {s / h:>6.2f}x")
                print(f"  {'  rows/s (' + clock.split()[0] + ')':<30} {args.rows / h:>10,.0f} "
                      f"{args.rows / s:>10,.0f}")
                print(f"  {'  MB/s of CSV (' + clock.split()[0] + ')':<30} "
                      f"{size / 1e6 / h:>10.1f} {size / 1e6 / s:>10.1f}")
        collisions(table)
    print(load_line())


if __name__ == "__main__":
    main()
