"""Parse speed of hogwild's svmlight reader against scikit-learn's load_svmlight_file.

Prints MB/s of uncompressed text (median of --runs, wall clock) for: our parser with 1 and
2 threads, loading our parsed-array cache, scikit-learn, and gzip decompression; then
ours/sklearn. ``1t_cpu`` is the one-thread parse per CPU second (robust on a busy machine).
Data: a synthetic RCV1-shaped file (--rows, 6-digit values, ~1.1 KB per row) written to a
temporary directory, and every *.libsvm.gz in the shared data directory (decompressed to
the temporary directory for the plain-text rows; the .gz rows time reading the .gz).

    python bench/bench_parse.py [--rows 180000] [--runs 3] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.data.formats.svmlight import read_bytes, read_svmlight, write_svmlight
from hogwild.data.synthetic import make_rcv1_like

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"


def median_time(fn: Callable[[], Any], runs: int,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Median time of ``runs`` calls (after one untimed warm-up call) on ``clock``."""
    fn()
    times = []
    for _ in range(runs):
        t = clock()
        fn()
        times.append(clock() - t)
    return statistics.median(times)


def sklearn_loader() -> Callable[[Path], Any] | None:
    try:
        from sklearn.datasets import load_svmlight_file
    except ImportError:
        return None

    def load(path: Path) -> Any:
        return load_svmlight_file(str(path), dtype=np.float32, zero_based=False)

    return load


def bench_file(label: str, path: Path, text_bytes: int, runs: int, cache_root: Path,
               sk: Callable[[Path], Any] | None) -> dict[str, float]:
    """MB/s (of ``text_bytes``) for each reader on ``path``."""
    mb = text_bytes / 1e6
    out: dict[str, float] = {}
    for threads in (1, 2):
        t = median_time(functools.partial(read_svmlight, path, cache=False, threads=threads),
                        runs)
        out[f"ours_{threads}t"] = mb / t
    # CPU time of the one-thread parse: the kernel's own speed, insensitive to other load.
    t = median_time(functools.partial(read_svmlight, path, cache=False, threads=1), runs,
                    clock=time.process_time)
    out["1t_cpu"] = mb / t
    read_svmlight(path, cache=True, cache_dir=cache_root)  # create the cache
    t = median_time(lambda: read_svmlight(path, cache=True, cache_dir=cache_root), runs)
    out["cache"] = mb / t
    if sk is not None:
        t = median_time(lambda: sk(path), runs)
        out["sklearn"] = mb / t
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=180_000,
                    help="rows of the synthetic RCV1-shaped file (180k rows ~ 200 MB)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per measurement")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                    help="directory with *.libsvm.gz data sets")
    ap.add_argument("--no-sklearn", action="store_true", help="skip scikit-learn")
    args = ap.parse_args(argv)

    sk = None if args.no_sklearn else sklearn_loader()
    print(f"# cores: {os.cpu_count()}  load average: {os.getloadavg()[0]:.2f}  "
          f"runs: {args.runs} (median)  sklearn: {'yes' if sk else 'no'}")
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="hogwild-bench-") as tmp_name:
        tmp = Path(tmp_name)
        cache_root = tmp / "cache"

        t = time.perf_counter()
        data = make_rcv1_like(args.rows, seed=0)
        gen = time.perf_counter() - t
        synth = tmp / "rcv1_like.svm"
        t = time.perf_counter()
        write_svmlight(data, synth, digits=6)
        wrote = time.perf_counter() - t
        size = synth.stat().st_size
        print(f"# synthetic: {data.n_rows:,} rows, {data.nnz:,} non-zeros, "
              f"{size / 1e6:.0f} MB text (generated in {gen:.1f} s, written at "
              f"{size / 1e6 / wrote:.0f} MB/s)")
        del data
        rows.append((f"synthetic rcv1 ({size / 1e6:.0f} MB)",
                     bench_file("synthetic", synth, size, args.runs, cache_root, sk)))
        synth.unlink()

        gz_rows: list[tuple[str, float, float, float]] = []
        shared = sorted(args.data_dir.glob("*.libsvm.gz")) if args.data_dir.is_dir() else []
        if not shared:
            print(f"# no *.libsvm.gz in {args.data_dir}: real data sets skipped")
        for gz in shared:
            raw = gz.read_bytes()
            text = gzip.decompress(raw)
            plain = tmp / gz.name[:-3]
            plain.write_bytes(text)
            name = gz.name.replace(".libsvm.gz", "")
            rows.append((f"{name} ({len(text) / 1e6:.1f} MB)",
                         bench_file(name, plain, len(text), args.runs, cache_root, sk)))
            t_dec = median_time(functools.partial(gzip.decompress, raw), args.runs)
            t_read = median_time(functools.partial(read_bytes, gz), args.runs)
            t_all = median_time(functools.partial(read_svmlight, gz, cache=False), args.runs)
            gz_rows.append((name, len(text) / 1e6 / t_dec, len(text) / 1e6 / t_read,
                            len(text) / 1e6 / t_all))
            plain.unlink()

    cols = ["ours_1t", "ours_2t", "1t_cpu", "cache", "sklearn"]
    print()
    print(f"{'plain text, MB/s':40s}" + "".join(f"{c:>10s}" for c in cols)
          + f"{'1t/sk':>8s}{'2t/sk':>8s}{'cache/sk':>9s}")
    for label, r in rows:
        line = f"{label:40s}" + "".join(
            f"{r[c]:10.0f}" if c in r else f"{'-':>10s}" for c in cols)
        if "sklearn" in r:
            sk_rate = r["sklearn"]
            line += (f"{r['ours_1t'] / sk_rate:8.1f}{r['ours_2t'] / sk_rate:8.1f}"
                     f"{r['cache'] / sk_rate:9.1f}")
        print(line)
    if gz_rows:
        print()
        print(f"{'gzip, MB/s of text':40s}{'gunzip':>10s}{'read+gunzip':>12s}{'gz->CSR':>10s}")
        for name, dec, rd, full in gz_rows:
            print(f"{name:40s}{dec:10.0f}{rd:12.0f}{full:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
