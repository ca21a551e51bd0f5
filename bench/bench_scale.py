"""Many workers on one machine: messages and bytes per round of topology mesh, star and tree.

    .venv/bin/python bench/bench_scale.py                       # 16, 32 and 64 workers
    .venv/bin/python bench/bench_scale.py --workers 16 --topologies star tree --tree-fanout 2
    .venv/bin/python bench/bench_scale.py --delta-dtype float16 --delta-topk 2000

Each configuration is one `hogwild run --workers N --threads 1` on loopback (real coordinator
and worker processes) over a small synthetic RCV1-shaped set. Printed per run: delta messages
and serialized bytes per round (every worker's sends to peers and coordinator, plus the
coordinator's relayed aggregates in star and tree), beside the analytic count n(n+1) (mesh)
or 2n (star, tree); round latency (training seconds / rounds); time from the start of training to the
first validation accuracy at or above --target; test accuracy. The machine's load is
printed: on a shared 2-core machine N processes time-share, so latencies say more about
the machine than the protocol; the message and byte counts do not depend on it. Mesh runs
above --mesh-max workers are skipped (64 workers: 4,160 messages per round, each one an RPC
on 2 shared cores), and the output says so. The last column is the largest resident set of
a process of the run (median over the coordinator and the workers) and the largest total,
sampled from /proc every 0.5 s; then the largest difference between a worker's final weights
and the global model (sync: float rounding).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _analytic(topology: str, n: int) -> int:
    return n * (n + 1) if topology == "mesh" else 2 * n


class _RssSampler:
    """Samples (every 0.5 s, from /proc) the resident sets of the processes the `hogwild run`
    launcher started: the largest one seen per process and the largest total."""

    def __init__(self, launcher: int) -> None:
        self.launcher = launcher
        self.peak: dict[int, int] = {}
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(0.5):
            now = 0
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) != self.launcher:
                        continue
                    rss = int(Path(f"/proc/{entry}/statm").read_text().split()[1]) * page
                except (OSError, ValueError, IndexError):
                    continue
                self.peak[int(entry)] = max(self.peak.get(int(entry), 0), rss)
                now += rss
            self.total = max(self.total, now)

    def stop(self) -> tuple[float, float]:
        """(median per-process peak, largest total), in MB."""
        self._stop.set()
        self._thread.join()
        peaks = sorted(self.peak.values())
        return (peaks[len(peaks) // 2] / 1e6 if peaks else 0.0), self.total / 1e6


def run_once(n: int, topology: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One `hogwild run`; the figures of its metrics.json."""
    out = workdir / f"{topology}-{n}"
    argv = [sys.executable, "-m", "hogwild.cli", "run", f"--workers={n}", "--threads=1",
            f"--topology={topology}", f"--mode={args.mode}", f"--data={args.data}",
            f"--epochs={args.epochs}", "--patience=0", f"--eval-interval={args.eval_interval}",
            f"--out-dir={out}", "--data-cache=false", "--register-timeout=600",
            "--connect-timeout=600", f"--barrier-timeout={args.barrier_timeout}",
            f"--rpc-timeout={args.barrier_timeout}", f"--round-size={args.round_size}",
            f"--delta-dtype={args.delta_dtype}", f"--delta-topk={args.delta_topk}",
            f"--tree-fanout={args.tree_fanout}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    t0 = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as launcher:
        sampler = _RssSampler(launcher.pid)
        try:
            output, _ = launcher.communicate(timeout=args.timeout)
        finally:
            if launcher.poll() is None:
                launcher.terminate()
                launcher.communicate(timeout=30)
            rss_each, rss_total = sampler.stop()
    wall = time.perf_counter() - t0
    if launcher.returncode != 0:
        tail = "\n".join(output.splitlines()[-15:])
        raise SystemExit(f"{topology} with {n} workers failed (exit {launcher.returncode}):"
                         f"\n{tail}")
    metrics = json.loads((out / "latest" / "metrics.json").read_text())
    states = metrics["worker_states"]
    rounds = max(1, int(metrics["rounds"]))
    to_peers = sum(sum(s["acked_by"].values()) for s in states)
    to_coordinator = sum(s["acked_by_coordinator"] for s in states)
    messages = to_peers + to_coordinator + int(metrics.get("relay_messages", 0))
    nbytes = sum(s["bytes_sent"] for s in states) + int(metrics.get("relay_bytes", 0))
    history = [json.loads(line) for line in (out / "latest" / "metrics.jsonl").read_text().splitlines()
               if line.strip()]
    reached = next((row["elapsed"] for row in history
                    if (row.get("val_accuracy") or 0.0) >= args.target), None)
    return {"n": n, "topology": topology, "rounds": rounds, "messages": messages / rounds,
            "analytic": _analytic(topology, n), "kb": nbytes / rounds / 1e3,
            "latency_ms": 1e3 * float(metrics["seconds"]) / rounds, "to_target": reached,
            "accuracy": metrics["test_accuracy"], "wall": wall, "rss_each": rss_each,
            "max_diff": max((s["max_abs_diff_to_global"] for s in states), default=0.0),
            "rss_total": rss_total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--topologies", nargs="+", default=["mesh", "star", "tree"])
    parser.add_argument("--tree-fanout", type=int, default=4)
    parser.add_argument("--mesh-max", type=int, default=32,
                        help="skip mesh runs with more workers than this")
    parser.add_argument("--mode", default="sync", choices=["sync", "async"])
    parser.add_argument("--data", default="synthetic:rcv1?rows=32000")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--round-size", type=int, default=100)
    parser.add_argument("--eval-interval", type=float, default=1.0)
    parser.add_argument("--barrier-timeout", type=float, default=60.0)
    parser.add_argument("--target", type=float, default=0.8,
                        help="validation accuracy for the time-to-target column")
    parser.add_argument("--delta-dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--delta-topk", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per configuration, interleaved; medians printed at the end")
    parser.add_argument("--timeout", type=float, default=590.0,
                        help="seconds one run may take before the benchmark gives up")
    args = parser.parse_args()
    print(f"hogwild bench_scale: {args.mode}, {args.data}, {args.epochs} epochs, rounds of "
          f"{args.round_size} rows, delta {args.delta_dtype} topk {args.delta_topk}, tree "
          f"fan-out {args.tree_fanout}; "
          f"{os.cpu_count()} CPUs, load average {_load_average()}", flush=True)
    header = (f"{'workers':>7} {'topology':>8} {'rounds':>6} {'msgs/round':>10} "
              f"{'analytic':>8} {'KB/round':>9} {'round ms':>9} {'to target s':>11} "
              f"{'test acc':>8} {'wall s':>7} {'RSS MB/proc':>11} {'RSS MB all':>10} "
              f"{'max|w-global|':>13}  load")
    print(header, flush=True)
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scale-") as tmp:
        for _ in range(args.repeats):
            for n in args.workers:
                for topology in args.topologies:
                    if topology == "mesh" and n > args.mesh_max:
                        print(f"{n:>7} {topology:>8}  skipped: {_analytic('mesh', n):,} "
                              f"messages per round (--mesh-max {args.mesh_max})", flush=True)
                        continue
                    r = run_once(n, topology, args, Path(tmp))
                    runs.setdefault((n, topology), []).append(r)
                    _print_row(r, _load_average())
    if args.repeats > 1:
        print(f"medians of {args.repeats} runs (load average now {_load_average()}):")
        print(header, flush=True)
        for rows in runs.values():
            median = {key: _median([r[key] for r in rows])
                      for key in rows[0] if key not in ("n", "topology")}
            _print_row({**rows[0], **median}, "")


def _median(values: list[Any]) -> Any:
    known = sorted(v for v in values if v is not None)
    return known[len(known) // 2] if known else None


def _print_row(r: dict[str, Any], load: str) -> None:
    target = "-" if r["to_target"] is None else f"{r['to_target']:.1f}"
    print(f"{r['n']:>7} {r['topology']:>8} {r['rounds']:>6} {r['messages']:>10.1f} "
          f"{r['analytic']:>8} {r['kb']:>9.1f} {r['latency_ms']:>9.1f} "
          f"{target:>11} {r['accuracy']:>8.4f} {r['wall']:>7.0f} "
          f"{r['rss_each']:>11.0f} {r['rss_total']:>10.0f} {r['max_diff']:>13.2e}  {load}",
          flush=True)

if __name__ == "__main__":
    main()
