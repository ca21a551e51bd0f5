"""Training on a file larger than the memory the process may use: `--out-of-core true`.

Writes a synthetic svmlight file (RCV1-shaped rows, ``hogwild gen-data rcv1``) whose CSR
arrays are larger than an address-space limit (RLIMIT_AS, what `ulimit -v` sets), then runs
`hogwild train` under that limit twice: in memory (expected to stop with "out of memory") and
out of core (expected to train: the cache is written block by block, then every epoch
streams it). Prints the limit, the arrays' size, exit codes, wall time, peak RSS and test
accuracy. MALLOC_ARENA_MAX=2 keeps glibc from reserving 64 MB of address space per thread,
so that the limit measures data, not allocator arenas.

    python bench/bench_outofcore.py [--rows 1800000] [--limit-mb 900] [--epochs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common


def run_limited(cmd: list[str], limit: int, env: dict[str, str],
                log: Path) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak RSS bytes, last output line) of ``cmd`` run by a shell
    after ``ulimit -v`` (RLIMIT_AS) of ``limit`` bytes."""
    shell = ["/bin/sh", "-c", f'ulimit -v {limit >> 10} && exec "$@"', "sh", *cmd]
    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(shell, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
    lines = [x for x in log.read_text().splitlines() if x.strip()]
    return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss * 1024.0, \
        (lines[-1] if lines else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_800_000, help="rows (default 1800000)")
    ap.add_argument("--limit-mb", type=int, default=900,
                    help="address-space limit of the training process, MB (default 900)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs (default 2)")
    args = ap.parse_args(argv)
    print(common.machine_line())
    print(common.load_line())
    limit = args.limit_mb << 20
    hogwild = [sys.executable, "-m", "hogwild.cli"]
    env = dict(os.environ)
    src = str(common.REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["MALLOC_ARENA_MAX"] = "2"
    with tempfile.TemporaryDirectory(prefix="hogwild-ooc-") as tmpname:
        tmp = Path(tmpname)
        env["XDG_CACHE_HOME"] = str(tmp / "cache")
        data = tmp / "big.svm"
        t0 = time.perf_counter()
        subprocess.run(hogwild + ["gen-data", "rcv1", "--rows", str(args.rows), "--out",
                                  str(data)], check=True, env=env, stdout=subprocess.DEVNULL)
        text = data.stat().st_size
        print(f"data: {args.rows:,} rows, svmlight {text / 1e6:,.0f} MB, written in "
              f"{time.perf_counter() - t0:.0f}s (not timed)")
        common_flags = ["train", "--data", str(data), "--epochs", str(args.epochs),
                        "--patience", "0"]
        rows = []
        for name, extra in (("in memory", ["--data-cache", "false"]),
                            ("out of core", ["--out-of-core", "true"])):
            out_dir = tmp / name.replace(" ", "_")
            code, seconds, rss, last = run_limited(
                hogwild + common_flags + extra + ["--out", str(out_dir)], limit, env,
                tmp / f"{name.replace(' ', '_')}.log")
            acc = "-"
            if code == 0:
                metrics = json.loads((out_dir / "latest" / "metrics.json").read_text())
                acc = f"{100 * metrics['test_accuracy']:.2f}%"
            rows.append((name, code, seconds, f"{rss / 1e6:.0f}", acc, last[:90]))
        caches = list((tmp / "cache" / "hogwild").glob("*.hwcache"))
        csr = None
        if caches:
            meta = json.loads((caches[0] / "meta.json").read_text())
            csr = meta["nnz"] * 8 + meta["n_rows"] * 12 + 8
        print(f"address-space limit (RLIMIT_AS, as `ulimit -v {limit >> 10}`): "
              f"{limit / 1e6:,.0f} MB; CSR arrays of the data: "
              f"{'-' if csr is None else f'{csr / 1e6:,.0f} MB'}")
        common.print_table(["run", "exit", "wall s", "peak RSS MB", "test acc", "last line"],
                           rows, f"hogwild train, {args.epochs} epochs, under the limit")
        if csr is not None:
            print(common.ratio_line("CSR arrays / address-space limit", csr / limit, "> 1x",
                                    csr > limit))
    print(common.load_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
