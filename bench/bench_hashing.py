"""Accuracy of the CSV encodings: hogwild's default (one-hot while a column's vocabulary fits),
the sqrt(D)-bucket split hashing of earlier versions, 2**12 buckets, and scikit-learn's
FeatureHasher(2**18) + SGDClassifier, on one generated table.

Data (seeded): a ``city`` column of --cities values (default 3,000) whose label depends on
the city (each city its own normal effect), three numeric columns with fixed weights, 5 % of
labels flipped; --rows training rows (default 60,000) and a quarter as many test rows from
the same rule. hogwild trains through ``hogwild train``'s in-process API (``train_job``,
logistic loss, the default settings, 1 thread, --seeds seeds); scikit-learn gets
``{"city=VALUE": 1, "xj": value}`` dicts hashed into 2**18 signed features and
``SGDClassifier(loss="log_loss")`` (its defaults otherwise; the same seeds).

    python bench/bench_hashing.py [--rows 60000] [--cities 3000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, workdir

NUMERIC = ("x1", "x2", "x3")
WEIGHTS = np.array([0.6, -0.4, 0.2])


def write_table(path: Path, rows: int, cities: int, seed: int) -> None:
    """``y,city,x1,x2,x3`` rows: y = sign(city effect + numeric part), 5 % flipped. The city
    effects come from their own generator, so train and test files share them."""
    rng = np.random.default_rng(seed)
    effect = np.random.default_rng(1234).normal(size=cities)
    city = rng.integers(0, cities, rows)
    x = rng.normal(size=(rows, len(NUMERIC)))
    score = effect[city] + x @ WEIGHTS
    y = np.where(score > 0, 1, -1) * np.where(rng.random(rows) < 0.05, -1, 1)
    lines = ["y,city," + ",".join(NUMERIC)]
    lines += [f"{y[i]},c{city[i]}," + ",".join(f"{v:.4f}" for v in x[i]) for i in range(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def hogwild_accuracy(train: Path, test: Path, query: str, seed: int) -> tuple[float, int]:
    """(test accuracy, feature count) of ``hogwild train`` on ``csv:train?label=y&categorical=
    city`` plus ``query``."""
    from hogwild import config
    from hogwild.inprocess.local import train_job

    with tempfile.TemporaryDirectory() as tmp:
        s = config.load(flags={"data": f"csv:{train}?label=y&categorical=city{query}",
                               "test_data": f"csv:{test}", "loss": "logistic", "threads": 1,
                               "seed": seed, "out_dir": tmp})
        metrics = train_job(s, out=io.StringIO())
    return float(metrics["test_accuracy"]), int(metrics["n_features"])


def _dicts(path: Path) -> tuple[list[dict[str, float]], np.ndarray]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    rows, labels = [], []
    for line in lines:
        y, city, *xs = line.split(",")
        row = {f"city={city}": 1.0}
        row.update({name: float(v) for name, v in zip(NUMERIC, xs)})
        rows.append(row)
        labels.append(int(y))
    return rows, np.array(labels)


def sklearn_accuracy(train: Path, test: Path, seed: int) -> float:
    """Test accuracy of FeatureHasher(2**18) + SGDClassifier(log_loss)."""
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import SGDClassifier

    hasher = FeatureHasher(2 ** 18)
    tr, ytr = _dicts(train)
    te, yte = _dicts(test)
    model = SGDClassifier(loss="log_loss", random_state=seed)
    model.fit(hasher.transform(tr), ytr)
    return float(model.score(hasher.transform(te), yte))


ENCODINGS = {
    "hogwild default (one-hot city)": "",
    "hogwild buckets=sqrt, k=2 (old default)": "&buckets=sqrt&onehot_max=64",
    "hogwild hash_bits=12, k=1 signed": "&hash_bits=12&onehot_max=0",
    "hogwild hash_bits=18, k=1 signed": "&onehot_max=0",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--cities", type=int, default=3_000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print(machine_line())
    with workdir() as tmp:
        train, test = Path(tmp) / "train.csv", Path(tmp) / "test.csv"
        write_table(train, args.rows, args.cities, seed=1)
        write_table(test, args.rows // 4, args.cities, seed=2)
        print(f"table: {args.rows:,} train / {args.rows // 4:,} test rows, city column of "
              f"{args.cities:,} values, {len(NUMERIC)} numeric columns; {args.seeds} seed(s)")
        results: dict[str, list[float]] = {}
        widths: dict[str, int] = {}
        t0 = time.perf_counter()
        peer = [sklearn_accuracy(train, test, seed) for seed in range(args.seeds)]
        print(f"  scikit-learn done in {time.perf_counter() - t0:.1f}s")
        for name, query in ENCODINGS.items():
            t0 = time.perf_counter()
            runs = [hogwild_accuracy(train, test, query, seed) for seed in range(args.seeds)]
            results[name] = [acc for acc, _ in runs]
            widths[name] = runs[0][1]
            print(f"  {name} done in {time.perf_counter() - t0:.1f}s")
    ref = statistics.mean(peer)
    print(f"\n{'encoding':<44} {'features':>9} {'test acc (mean)':>15} {'range':>13} "
          f"{'/ sklearn':>9}")
    print(f"{'sklearn FeatureHasher(2**18) + SGDClassifier':<44} {2 ** 18:>9,} {ref:>15.4f} "
          f"{min(peer):.4f}-{max(peer):.4f} {1.0:>9.3f}")
    for name, accs in results.items():
        mean = statistics.mean(accs)
        print(f"{name:<44} {widths[name]:>9,} {mean:>15.4f} {min(accs):.4f}-{max(accs):.4f} "
              f"{mean / ref:>9.3f}")


if __name__ == "__main__":
    main()
