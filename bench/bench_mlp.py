"""Examples per second of the sparse-input MLP: hogwild's compiled kernel on 1 and 2 Hogwild
threads against the same network in PyTorch on the CPU.

The same rows for everybody (features renumbered by document frequency and rows permuted
once, as the training job does), the same network (an embedding bag summing value x W1 rows,
ReLU hidden layers, a linear output), the same loss (logistic), step size and number of
passes, no L2. PyTorch: ``nn.EmbeddingBag(mode="sum", sparse=True)`` fed the row's values as
``per_sample_weights``, then ``Linear`` + ``ReLU`` layers, plain ``torch.optim.SGD``; once
with batch size 1 (the same per-example algorithm, timed on a slice of the rows because a
Python-driven step per example is slow) and once with a larger batch (fewer, cheaper steps: the
fair best case for a framework; the batch's mean loss with a larger step size, --batch-lr,
since the per-example step on the summed loss diverged). Examples/s is the median over the timed passes; the
test accuracy is after the same number of passes. Without torch installed the peer is
skipped with a note. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from common import Timing

LOSS = "logistic"


def timed_pass(fn: Any) -> tuple[float, float, float]:
    """Run ``fn()`` once: (wall seconds, this process's CPU seconds, cores others used)."""
    with common.CpuMeter() as m:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
    return dt, m.own * dt, m.others


def load_set(name: str, max_rows: int | None,
             data_dir: Path = common.SHARED_DATA) -> tuple[Any, Any] | None:
    """(train, test) renumbered by frequency, train permuted; None if the files are absent."""
    from hogwild.data.formats.placement import permuted
    from hogwild.data.sources import load_source
    from hogwild.data.transform.reorder import frequency_order, renumber

    if name.startswith("bundled:"):
        from hogwild.data.sources import default_test_source

        test_spec = default_test_source(name)
        assert test_spec is not None
        train, test = load_source(name), load_source(test_spec)
    else:
        train_file, test_file, _ = common.REAL_SETS[name]
        paths = [data_dir / train_file, data_dir / test_file]
        if not all(p.exists() for p in paths):
            print(f"skipping {name}: {paths[0]} not found")
            return None
        train, test = load_source(str(paths[0])), load_source(str(paths[1]))
    width = max(train.n_features, test.n_features)
    train, test = train.with_n_features(width), test.with_n_features(width)
    train = permuted(train, seed=0)
    if max_rows is not None and train.n_rows > max_rows:
        train = train.take(np.arange(max_rows))
    order = frequency_order(train)
    return renumber(train, order), renumber(test, order)


# --------------------------------------------------------------------------------------
# hogwild
# --------------------------------------------------------------------------------------
def bench_hogwild(train: Any, test: Any, hidden: tuple[int, ...], threads: int, lr: float,
                  epochs: int) -> tuple[Timing, float, float]:
    """Per-pass timing, median CPU seconds per pass, test accuracy after the passes."""
    from hogwild.engine.mlp import MLPTrainer
    from hogwild.engine.trainer import TrainParams
    from hogwild.model.evaluation import evaluate
    from hogwild.model.spec import ModelSpec

    spec = ModelSpec("mlp", train.n_features, hidden)
    trainer = MLPTrainer(spec, TrainParams(loss=LOSS, learning_rate=lr, l2=0.0, lr_decay=1.0,
                                           threads=threads), seed=0)
    runs, cpu, others = [], [], []
    for _ in range(epochs):
        dt, c, o = timed_pass(lambda: trainer.fit(train, 1))
        runs.append(dt)
        cpu.append(c)
        others.append(o)
    acc = evaluate(test, trainer.w, LOSS, spec).accuracy
    return Timing(tuple(runs), tuple(others)), statistics.median(cpu), float(acc or 0.0)


# --------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------
def torch_model(torch: Any, n_features: int, hidden: tuple[int, ...]) -> Any:
    nn = torch.nn

    class SparseMLP(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.bag = nn.EmbeddingBag(n_features, hidden[0], mode="sum", sparse=True)
            nn.init.normal_(self.bag.weight, std=0.1)
            self.b1 = nn.Parameter(torch.zeros(hidden[0], dtype=torch.float64))
            layers: list[Any] = []
            for a, b in zip(hidden, (*hidden[1:], 1)):
                lin = nn.Linear(a, b)
                nn.init.normal_(lin.weight, std=float(np.sqrt(2.0 / a)))
                nn.init.zeros_(lin.bias)
                layers.append(lin)
            self.layers = nn.ModuleList(layers)

        def forward(self, idx: Any, offsets: Any, weights: Any) -> Any:
            h = torch.relu(self.bag(idx, offsets, per_sample_weights=weights) + self.b1)
            for lin in self.layers[:-1]:
                h = torch.relu(lin(h))
            return self.layers[-1](h).squeeze(-1)

    return SparseMLP().double()


def torch_batches(torch: Any, data: Any, batch: int, rows: int) -> list[tuple[Any, ...]]:
    """Tensors of every batch, built before timing (the framework's input format)."""
    out = []
    indptr = data.indptr
    y01 = (np.asarray(data.labels) > 0).astype(np.float64)
    for lo in range(0, rows, batch):
        hi = min(rows, lo + batch)
        a, b = int(indptr[lo]), int(indptr[hi])
        out.append((torch.from_numpy(data.indices[a:b].astype(np.int64)),
                    torch.from_numpy((indptr[lo:hi] - a).astype(np.int64)),
                    torch.from_numpy(data.values[a:b].astype(np.float64)),
                    torch.from_numpy(y01[lo:hi])))
    return out


def bench_torch(torch: Any, train: Any, test: Any, hidden: tuple[int, ...], batch: int,
                lr: float, epochs: int, max_rows: int) -> tuple[Timing, float, float, int]:
    """Per-pass timing over the first ``max_rows`` rows (all for large batches), median CPU
    seconds per pass, test accuracy after ``epochs`` passes over those rows, rows used."""
    rows = min(train.n_rows, max_rows)
    model = torch_model(torch, train.n_features, hidden)
    # The mean loss of a batch: at batch size 1 exactly hogwild's step; larger batches get
    # their own (larger) step size, see --batch-lr.
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    batches = torch_batches(torch, train, batch, rows)

    def one_pass() -> None:
        for idx, off, val, y in batches:
            opt.zero_grad()
            loss = loss_fn(model(idx, off, val), y)
            loss.backward()
            opt.step()

    runs, cpu, others = [], [], []
    for _ in range(epochs):
        dt, c, o = timed_pass(one_pass)
        runs.append(dt)
        cpu.append(c)
        others.append(o)
    with torch.no_grad():
        idx, off, val, y = torch_batches(torch, test, test.n_rows, test.n_rows)[0]
        pred = model(idx, off, val) >= 0
        acc = float((pred == (y > 0.5)).double().mean())
    return Timing(tuple(runs), tuple(others)), statistics.median(cpu), acc, rows


# --------------------------------------------------------------------------------------
# Accuracy: `hogwild train` itself, linear (defaults) against the MLP, over seeds
# --------------------------------------------------------------------------------------
# The MLP as the README documents it: the linear model's settings (hinge, step 0.5, inverse
# schedule, l2 1e-5) with model mlp and its defaults (hidden [64], deep_lr_scale 0.01).
LINEAR_RUNS: dict[str, dict[str, Any]] = {"linear, defaults": {}}
MLP_RUNS: dict[str, dict[str, Any]] = {
    "mlp, defaults": {"model": "mlp"},
    "mlp, deep_lr_scale 0.2": {"model": "mlp", "deep_lr_scale": 0.2},
}


def accuracy_table(sets: list[str], seeds: int, data_dir: Path, threads: int,
                   patience: int, runs: dict[str, dict[str, Any]] | None = None) -> None:
    """Test (and validation) accuracy of `hogwild train` (10 epochs; early stopping on the
    validation loss with ``patience``, 0 = off: the model after the last epoch) for each
    seed: the seed changes the validation split, the row order and the MLP's
    initialisation; the test file stays the same. Each MLP's test accuracy minus the linear
    model's of the same seed is printed too (paired: the seeds' own spread cancels)."""
    import io
    import tempfile

    from hogwild import config
    from hogwild.inprocess.local import train_job

    runs = {**LINEAR_RUNS, **MLP_RUNS} if runs is None else runs
    rows = []
    for name in sets:
        if name.startswith("bundled:"):
            files = {"data": name}
        else:
            train_file, test_file, _ = common.REAL_SETS[name]
            if not (data_dir / train_file).exists():
                print(f"skipping {name}: {data_dir / train_file} not found")
                continue
            files = {"data": str(data_dir / train_file), "test_data": str(data_dir / test_file)}
        first: list[float] | None = None
        for label, extra in runs.items():
            accs, vals = [], []
            for seed in range(seeds):
                with tempfile.TemporaryDirectory() as tmp:
                    s = config.load(flags={**files, **extra, "seed": seed, "threads": threads,
                                           "patience": patience, "out_dir": tmp})
                    metrics = train_job(s, out=io.StringIO())
                accs.append(float(metrics["test_accuracy"]))
                vals.append(float(metrics["val_accuracy"] or 0.0))
            diffs = [a - b for a, b in zip(accs, first)] if first is not None else None
            first = accs if first is None else first
            rows.append([name, label, f"{statistics.mean(accs):.4f}",
                         f"{min(accs):.4f}-{max(accs):.4f}", f"{statistics.mean(vals):.4f}",
                         "" if diffs is None else f"{statistics.mean(diffs):+.4f}", len(accs)])
            print(f"  {name}: {label}: test {' '.join(f'{a:.4f}' for a in accs)}; validation "
                  f"{' '.join(f'{v:.4f}' for v in vals)}", flush=True)
    common.print_table(["data", "model", "mean test acc", "min-max", "mean val acc",
                        "minus first row (paired)", "seeds"], rows,
                       title=f"hogwild train, {threads} thread(s), patience {patience}, test "
                             "accuracy")


# --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="sst2,bundled:spamassassin",
                        help="data sets: names in ../shared/data (sst2, rcv1_vw_subset, "
                             "spamassassin, reuters_earn) or bundled:NAME")
    parser.add_argument("--hidden", default="64", help="hidden sizes, e.g. 64 or 128,32")
    parser.add_argument("--epochs", type=int, default=3, help="passes per engine (>= 3)")
    parser.add_argument("--lr", type=float, default=0.1, help="step size of every engine")
    parser.add_argument("--batch", type=int, default=64, help="PyTorch's larger batch")
    parser.add_argument("--batch-lr", type=float, default=2.0,
                        help="step size of the larger batch's mean loss (on SpamAssassin, 3 "
                             "passes: 0.5 -> 0.952 test accuracy, 2 -> 0.973, 8 diverged)")
    parser.add_argument("--torch-rows", type=int, default=5000,
                        help="rows PyTorch at batch size 1 passes over (a slice: it is slow)")
    parser.add_argument("--max-rows", type=int, default=None, help="cut each train set")
    parser.add_argument("--data-dir", type=Path, default=common.SHARED_DATA,
                        help=f"where the real data sets are (default {common.SHARED_DATA})")
    parser.add_argument("--accuracy", action="store_true",
                        help="instead of speed: test accuracy of `hogwild train`, linear "
                             "against the MLP, over --seeds seeds")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per model (--accuracy)")
    parser.add_argument("--threads", type=int, default=2, help="threads (--accuracy)")
    parser.add_argument("--patience", type=int, default=3,
                        help="early stopping patience, 0 = off (--accuracy)")
    parser.add_argument("--deep-lr-scales", default=None,
                        help="--accuracy: the MLP rows' deep_lr_scale values instead of the "
                             "default and 0.2, e.g. 0.01,0.02,0.05,0.1 (a sweep to read on the "
                             "mean validation accuracy)")
    parser.add_argument("--linear-twice", action="store_true",
                        help="--accuracy: train the linear model a second time with the same "
                             "seeds (its paired difference is the threads' own noise)")
    args = parser.parse_args(argv)
    if args.accuracy:
        runs = None
        if args.deep_lr_scales:
            runs = {**LINEAR_RUNS, **{f"mlp, deep_lr_scale {x}": {"model": "mlp",
                                                                 "deep_lr_scale": float(x)}
                                      for x in args.deep_lr_scales.split(",")}}
        if args.linear_twice:
            # The run-to-run noise of Hogwild threads: the same seeds, the same model again.
            runs = {**(runs or {**LINEAR_RUNS, **MLP_RUNS}),
                    "linear, defaults, run again": {}}
        accuracy_table(args.sets.split(","), args.seeds, args.data_dir, args.threads,
                       args.patience, runs)
        return 0
    hidden = tuple(int(x) for x in args.hidden.split(","))
    epochs = max(3, args.epochs)
    from hogwild.model.warmup import warmup

    warmup()
    print(f"load average at start: {os.getloadavg()}")
    try:
        import torch
    except ImportError:
        torch = None
        print("note: torch is not installed (pip install torch, or the bench extra): the "
              "PyTorch peer is skipped")
    if torch is not None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} intra-op thread")
    for name in args.sets.split(","):
        loaded = load_set(name, args.max_rows, args.data_dir)
        if loaded is None:
            continue
        train, test = loaded
        print(f"\n{name}: {train.n_rows:,} train rows, {train.n_features:,} features, "
              f"{train.nnz / max(1, train.n_rows):.1f} non-zeros per row; hidden {list(hidden)}, "
              f"{LOSS}, lr {args.lr}, {epochs} passes")
        rows: list[list[Any]] = []
        rates: dict[str, float] = {}
        cpu_rates: dict[str, float] = {}
        for threads in (1, 2):
            timing, cpu, acc = bench_hogwild(train, test, hidden, threads, args.lr, epochs)
            rate = train.n_rows / timing.median
            rates[f"hogwild {threads}"] = rate
            cpu_rates[f"hogwild {threads}"] = train.n_rows / cpu
            rows.append([f"hogwild, {threads} thread{'s' if threads > 1 else ''}",
                         train.n_rows, f"{rate:,.0f}", f"{train.n_rows / cpu:,.0f}",
                         timing.spread(), acc, timing.quality()])
        if torch is not None:
            for batch, lr, max_rows in ((1, args.lr, args.torch_rows),
                                        (args.batch, args.batch_lr, train.n_rows)):
                timing, cpu, acc, used = bench_torch(torch, train, test, hidden, batch, lr,
                                                     epochs, max_rows)
                rate = used / timing.median
                rates[f"torch {batch}"] = rate
                cpu_rates[f"torch {batch}"] = used / cpu
                rows.append([f"PyTorch, batch {batch}", used, f"{rate:,.0f}",
                             f"{used / cpu:,.0f}", timing.spread(), acc, timing.quality()])
        common.print_table(["engine", "rows/pass", "examples/s", "per CPU s",
                            "s/pass (min-max)", "test acc", "timed runs"], rows, title=name)
        print("ratios (examples/s):")
        print(common.ratio_line("hogwild 2 threads vs 1 thread",
                                rates["hogwild 2"] / rates["hogwild 1"]))
        if torch is not None:
            print(common.ratio_line("hogwild 1 thread vs PyTorch batch 1",
                                    rates["hogwild 1"] / rates["torch 1"]))
            print(common.ratio_line("  the same per CPU second",
                                    cpu_rates["hogwild 1"] / cpu_rates["torch 1"]))
            print(common.ratio_line(f"hogwild 1 thread vs PyTorch batch {args.batch}",
                                    rates["hogwild 1"] / rates[f"torch {args.batch}"]))
            print(common.ratio_line("  the same per CPU second",
                                    cpu_rates["hogwild 1"] / cpu_rates[f"torch {args.batch}"]))
            print(common.ratio_line(f"hogwild 2 threads vs PyTorch batch {args.batch}",
                                    rates["hogwild 2"] / rates[f"torch {args.batch}"]))
    print(f"\nload average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
