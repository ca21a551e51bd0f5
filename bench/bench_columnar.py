"""The same rows into a model from svmlight text and from Parquet (a sparse pair of columns).

Writes --rows synthetic RCV1-shaped rows (6-digit values) as a svmlight file and as a Parquet
file (columns y, idx list<int32>, val list<float32>; row groups of --row-group rows), then
times `hogwild train` end to end on each (wall clock of the whole process, no data cache,
one epoch, alternating, median of --runs). Prints both times and Parquet/text.

    python bench/bench_columnar.py [--rows 200000] [--runs 3] [--epochs 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.synthetic import make_rcv1_like

REPO = Path(__file__).resolve().parents[1]


def write_parquet(path: Path, rows: int, seed: int, row_group: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = make_rcv1_like(rows, seed=seed)
    # The svmlight file's ids are 1-based: the same ids here.
    offsets = pa.array(data.indptr.astype(np.int32))
    idx = pa.ListArray.from_arrays(offsets, pa.array(data.indices.astype(np.int32) + 1))
    val = pa.ListArray.from_arrays(offsets, pa.array(data.values))
    table = pa.table({"y": pa.array(data.labels), "idx": idx, "val": val})
    pq.write_table(table, path, row_group_size=row_group)


def train(source: str, out: Path, epochs: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `hogwild train` process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src")
    cmd = [sys.executable, "-c", "import sys; from hogwild.cli import main; sys.exit(main())",
           "train", "--data", source, "--out", str(out), "--epochs", str(epochs),
           "--data-cache", "false", "--val-fraction", "0", "--test-fraction", "0.1",
           "--patience", "0", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--row-group", type=int, default=65_536)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hogwild-columnar-") as tmp:
        root = Path(tmp)
        text, table = root / "rows.svm", root / "rows.parquet"
        write_svmlight(make_rcv1_like(args.rows, seed=0), text)
        write_parquet(table, args.rows, 0, args.row_group)
        sources = {"svmlight text": str(text),
                   "parquet (sparse=idx:val)": f"parquet:{table}?label=y&sparse=idx:val"}
        sizes = {"svmlight text": text.stat().st_size,
                 "parquet (sparse=idx:val)": table.stat().st_size}
        times: dict[str, list[float]] = {name: [] for name in sources}
        cpus: dict[str, list[float]] = {name: [] for name in sources}
        for name, source in sources.items():  # warm-up: numba caches, page cache
            train(source, root / "warm", args.epochs)
        for _ in range(args.runs):
            for name, source in sources.items():
                wall, cpu = train(source, root / "runs", args.epochs)
                times[name].append(wall)
                cpus[name].append(cpu)
        print(f"{args.rows:,} rows, {args.epochs} epoch(s), `hogwild train` end to end, "
              f"median of {args.runs}; load average {os.getloadavg()[0]:.1f}")
        for name in sources:
            runs = ", ".join(f"{t:.2f}" for t in times[name])
            print(f"  {name:26s} wall {statistics.median(times[name]):6.2f} s, CPU "
                  f"{statistics.median(cpus[name]):6.2f} s  ({sizes[name] / 1e6:.0f} MB; "
                  f"wall runs {runs})")
        for label, table in (("wall", times), ("CPU", cpus)):
            ratio = statistics.median(table["parquet (sparse=idx:val)"]) / statistics.median(
                table["svmlight text"])
            print(f"  parquet / text, {label}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
