"""Distributed overhead: `hogwild run` (coordinator + workers over gRPC) against the in-process
trainer, plus the wire: delta codec MB/s, shard shipping MB/s, bytes and messages per round.

    .venv/bin/python bench/bench_service.py            # Reuters earn if present, else bundled
    .venv/bin/python bench/bench_service.py --quick    # fewer repeats

Targets (printed next to the numbers): distributed time-to-accuracy <= 1.3x in-process,
codec >= 1 GB/s, shipping >= 200 MB/s.
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
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "src"))

from hogwild import config
from hogwild.data.csr import CSRData
from hogwild.protocol import pb
from hogwild.protocol.codec import DeltaHeader, decode_delta, encode_delta_parts


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


# ------------------------------------------------------------------------------ codec


def bench_codec(entries: int, repeats: int) -> float:
    """MB/s of payload (8 bytes per entry) through encode -> serialise -> parse -> decode."""
    rng = np.random.default_rng(0)
    dim = max(entries * 2, 16)
    idx = np.sort(rng.choice(dim, size=entries, replace=False)).astype(np.int32)
    val = rng.standard_normal(entries).astype(np.float32)
    header = DeltaHeader("bench", 0, 1, 1, dim)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        messages = encode_delta_parts(header, idx, val)
        wire = [m.SerializeToString() for m in messages]
        total = 0
        for blob in wire:
            d = decode_delta(pb.Delta.FromString(blob), dim)
            total += d.indices.shape[0]
        best = min(best, time.perf_counter() - t0)
        assert total == entries
    return entries * 8 / best / 1e6


# --------------------------------------------------------------------------- shipping


def _cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_shipping(n_rows: int, per_row: int) -> list[tuple[float, float, float, float]]:
    """[(MB, MB/s wall, MB per sender CPU second, MB per receiver CPU second)] of the same
    shard shipped twice (cold, then warm memory) over loopback from this process to a real
    worker process, as the coordinator ships it. The CPU rates show the cost apart from how
    busy the machine is."""
    import grpc

    from hogwild.coordinator import create_server as create_coordinator
    from hogwild.protocol import pb_grpc
    from hogwild.protocol.streams import shard_chunks

    n_features = 47_236
    rng = np.random.default_rng(1)
    cols = np.sort(rng.integers(0, n_features - per_row, size=(n_rows, 1))
                   + np.arange(per_row)[None, :], axis=1)
    data = CSRData(np.arange(0, n_rows * per_row + 1, per_row, dtype=np.int64),
                   cols.ravel().astype(np.int32),
                   rng.random(n_rows * per_row).astype(np.float32),
                   np.where(rng.random(n_rows) < 0.5, -1.0, 1.0).astype(np.float32), n_features)
    base = {"bind_host": "127.0.0.1", "coordinator_port": 0, "workers": 1}
    server, port, state, _ = create_coordinator(config.load(None, {}, base))
    server.start()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                      env.get("PYTHONPATH")]))
    worker = subprocess.Popen(
        [sys.executable, "-m", "hogwild.cli", "worker", "--bind-host=127.0.0.1",
         "--worker-port=0", f"--coordinator-address=127.0.0.1:{port}", "--log-level=warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (record,) = state.wait_for_workers(60)
        results = []
        with grpc.insecure_channel(record.address) as channel:
            stub = pb_grpc.WorkerStub(channel)
            for _ in range(2):
                c0, w0 = time.process_time(), _cpu_seconds(worker.pid)
                t0 = time.perf_counter()
                ack = stub.ReceiveShard(shard_chunks(data, state.run_id, record.worker_id,
                                                     1 << 20), timeout=300)
                seconds = time.perf_counter() - t0
                mb = ack.bytes_received / 1e6
                results.append((mb, mb / seconds, mb / (time.process_time() - c0),
                                mb / max(1e-9, _cpu_seconds(worker.pid) - w0)))
        return results
    finally:
        worker.terminate()
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        server.stop(None)


# ------------------------------------------------------------------- time to accuracy


def _dataset() -> tuple[str, str, str]:
    train = SHARED_DATA / "reuters21578_modapte_earn.train.libsvm.gz"
    test = SHARED_DATA / "reuters21578_modapte_earn.test.libsvm.gz"
    if train.exists() and test.exists():
        return "reuters_earn", str(train), str(test)
    return "bundled:spamassassin", "bundled:spamassassin", ""


def run_distributed(data: str, test: str, mode: str, workers: int, threads: int,
                    epochs: int, target: float, workdir: Path,
                    eval_interval: float) -> dict[str, Any]:
    out = workdir / f"run-{mode}-{workers}x{threads}"
    argv = [sys.executable, "-m", "hogwild.cli", "run", f"--data={data}", f"--workers={workers}",
            f"--threads={threads}", f"--mode={mode}", f"--epochs={epochs}", "--patience=0",
            f"--eval-interval={eval_interval}", f"--out={out}"]
    if test:
        argv.append(f"--test={test}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                      env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=workdir, check=False,
                          timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"hogwild run failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    reached = next((r["elapsed"] for r in rows
                    if r.get("val_accuracy") is not None and r["val_accuracy"] >= target), None)
    rounds = max(1, int(metrics["rounds"]))
    per_worker_msgs = metrics["deltas_received"] / rounds / workers
    # Each delta goes to the coordinator and to every peer: W destinations per worker.
    wire_bytes = metrics["bytes_received"] / rounds * workers
    return {"time_to_target": reached, "train_seconds": metrics["seconds"],
            "wall_seconds": wall, "test_accuracy": metrics["test_accuracy"],
            "rounds": rounds, "bytes_per_round": wire_bytes,
            "messages_per_round": per_worker_msgs * workers * workers}


def run_in_process(data: str, test: str, threads: int, epochs: int,
                   target: float) -> dict[str, Any]:
    from hogwild.local import load_splits
    from hogwild.model.evaluation import evaluate
    from hogwild.model.trainer import Trainer, TrainParams, warmup

    warmup()
    settings = config.load(None, {}, {"data": data, "test_data": test, "threads": threads})
    splits = load_splits(settings)
    trainer = Trainer(splits.train.n_features, TrainParams(threads=threads))
    clock = 0.0
    reached = None
    for epoch in range(epochs):
        stats = trainer.fit_epoch(splits.train, epoch)
        clock += stats.seconds  # evaluation time excluded, as the coordinator evaluates aside
        val = evaluate(splits.val, trainer.w, "hinge")
        if reached is None and val.accuracy is not None and val.accuracy >= target:
            reached = clock
    test_metrics = evaluate(splits.test, trainer.w, "hinge")
    return {"time_to_target": reached, "train_seconds": clock,
            "test_accuracy": test_metrics.accuracy}


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.97,
                        help="validation accuracy to reach (default 0.97)")
    parser.add_argument("--data", default=None,
                        help="data source (default: Reuters earn from ../shared/data, else "
                             "bundled:spamassassin), e.g. synthetic:rcv1?rows=300000")
    parser.add_argument("--test", default="", help="test source for --data (default: split)")
    parser.add_argument("--eval-interval", type=float, default=0.02,
                        help="seconds between the coordinator's evaluations (the resolution "
                             "of its time-to-accuracy)")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    print(f"load average at start: {_load_average()}")

    print("\n== delta codec (encode + serialise + parse + validate + decode) ==")
    for entries in (47_236, 1_000_000):
        mbs = bench_codec(entries, repeats)
        print(f"  {entries:>9,} entries: {mbs:8.0f} MB/s   (target >= 1000 MB/s: "
              f"{'ok' if mbs >= 1000 else 'BELOW'})")

    print("\n== shard shipping over loopback (this process -> a worker process) ==")
    for label, (mb, mbs, send_cpu, recv_cpu) in zip(
            ("cold", "warm"), bench_shipping(200_000 if args.quick else 600_000, 75)):
        print(f"  {mb:.0f} MB shard ({label} memory): {mbs:.0f} MB/s   (target >= 200 MB/s: "
              f"{'ok' if mbs >= 200 else 'BELOW'}); per CPU second: sender {send_cpu:.0f} MB, "
              f"receiver {recv_cpu:.0f} MB")

    name, data, test = _dataset() if args.data is None else (args.data, args.data, args.test)
    print(f"\n== time to validation accuracy {args.target} on {name}, {args.epochs} epochs ==")
    local = run_in_process(data, test, 2, args.epochs, args.target)
    print("  (in-process: evaluated after every epoch, evaluation time excluded; hogwild run: "
          f"evaluated every {args.eval_interval:g}s by the coordinator, beside the training)")
    print(f"  in-process Trainer, 2 threads: reached in {_fmt(local['time_to_target'])}s, "
          f"train {local['train_seconds']:.3f}s, test accuracy {local['test_accuracy']:.4f}")
    with tempfile.TemporaryDirectory(prefix="hogwild-bench-") as tmp:
        for mode in ("sync", "async"):
            r = run_distributed(data, test, mode, 2, 1, args.epochs, args.target, Path(tmp),
                                args.eval_interval)
            ratio = (r["time_to_target"] / local["time_to_target"]
                     if r["time_to_target"] and local["time_to_target"] else None)
            print(f"  hogwild run {mode:>5} 2x1: reached in {_fmt(r['time_to_target'])}s "
                  f"(ratio {_fmt(ratio, '.2f')}x, target <= 1.3x), train "
                  f"{r['train_seconds']:.3f}s, process wall {r['wall_seconds']:.1f}s, "
                  f"test accuracy {r['test_accuracy']:.4f}")
            print(f"        {r['rounds']} rounds, {r['bytes_per_round'] / 1e3:.1f} kB and "
                  f"{r['messages_per_round']:.1f} delta messages on the wire per round")
    print(f"\nload average at end: {_load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
