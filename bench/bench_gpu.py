"""Seconds per epoch and test accuracy of the linear model on a GPU (``device: cuda``) against
the CPU threads and PyTorch's EmbeddingBag, on RCV1-shaped rows (``synthetic:rcv1?rows=N``).

Rows, in one table:

* ``hogwild GPU``: :class:`hogwild.engine.gpu.GPUTrainer`, a warp per example, atomic
  HOGWILD! updates, one kernel launch per epoch (the rows copied to the device once). Its
  epoch time counts the launch, the copy of the weights there and back, and nothing else.
* ``hogwild CPU``: the in-process trainer with one thread per core (``hogwild train``'s
  trainer, thread buffers on), the same schedule, loss and L2.
* ``hogwild GPU MLP`` and ``hogwild CPU MLP`` (only when a CUDA device is present): the
  sparse-input MLP (``--mlp-hidden``, ``--deep-lr-scale``) on the GPU
  (:class:`hogwild.engine.gpu_mlp.GPUMLPTrainer`, a warp per example, atomic updates) and
  on the CPU threads (:class:`hogwild.engine.mlp.MLPTrainer`, thread buffers on), from the
  same initial weights.
* ``torch EmbeddingBag, batch B`` (only if torch can be imported; on its GPU when it has
  one): a ``nn.EmbeddingBag(n_features, 1, mode="sum")`` fed the row's values as
  ``per_sample_weights``, plus a bias, the hinge loss summed over a mini-batch of B rows
  and one plain SGD step per mini-batch, of the size hogwild's ``inverse`` schedule gives at
  the batch's first row: the B rows' steps applied at once, as B examples in flight on the
  GPU are. No L2 (hogwild's default, 1e-5, barely moves these figures).

The data is loaded as ``hogwild train`` loads it (shuffled, renumbered by frequency, a test
share split off). ``s/epoch`` is the median over the epochs after the first (the first one
compiles the kernels: its time is shown apart); the accuracy is on the test rows after all
epochs. Without a CUDA device the GPU row says so and the others still run. Under numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the GPU row runs, slowly, as a check that the
script works: its times mean nothing. Usage::

    .venv/bin/python bench/bench_gpu.py [--rows 800000] [--epochs 10] [--threads N]
        [--max-warps 4096] [--weight-dtype float32] [--torch-batches 256,4096]
        [--mlp-hidden 64] [--deep-lr-scale 0.01]
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


def load(rows: int, seed: int) -> Any:
    """(train, test) as the train job makes them: shuffled, renumbered, 20 % test."""
    from hogwild import config
    from hogwild.engine.runstart import load_splits

    settings = config.load(flags={"data": f"synthetic:rcv1?rows={rows}&seed={seed}",
                                  "val_fraction": 0.0, "test_fraction": 0.2, "seed": seed})
    return settings, load_splits(settings)


def accuracy(test: Any, w: np.ndarray, spec: Any = None) -> float:
    from hogwild.model.evaluation import evaluate_model

    return float(evaluate_model(test, w, "hinge", spec).accuracy or 0.0)


def summary(seconds: list[float]) -> tuple[str, str]:
    """(median of the epochs after the first, the first epoch), as table cells."""
    rest = seconds[1:] or seconds
    return f"{statistics.median(rest):.4f}", f"{seconds[0]:.4f}"


def bench_cpu(settings: Any, splits: Any, epochs: int, threads: int) -> list[Any]:
    from hogwild.engine.job import train_params
    from hogwild.engine.trainer import Trainer

    params = train_params(settings.replace(threads=threads))
    trainer = Trainer(splits.train.n_features, params)
    history = trainer.fit(splits.train, epochs)
    return [f"hogwild CPU, {threads} threads", *summary([h.seconds for h in history]),
            f"{accuracy(splits.test, trainer.w):.4f}"]


def gpu_missing() -> str | None:
    """Why the GPU row cannot run (no CUDA device, numba's reason), or None."""
    from hogwild.engine.gpu_device import cuda_device
    from hogwild.errors import ConfigError

    try:
        cuda_device("cuda")
    except ConfigError as exc:
        # numba's reason, its first sentence: "CUDA driver library cannot be found"
        return str(exc).split("available: ", 1)[-1].split(". ")[0].rstrip(".")
    return None


def bench_gpu(settings: Any, splits: Any, epochs: int, max_warps: int,
              weight_dtype: str) -> list[Any]:
    from hogwild.engine.gpu import GPUTrainer
    from hogwild.engine.job import train_params

    trainer = GPUTrainer(splits.train.n_features, train_params(settings), max_warps=max_warps,
                         weight_dtype=weight_dtype)
    history = trainer.fit(splits.train, epochs)
    sim = " (simulator: times mean nothing)" if os.environ.get("NUMBA_ENABLE_CUDASIM") else ""
    name = f"hogwild GPU, {trainer.warps(splits.train.n_rows)} warps, {weight_dtype}{sim}"
    return [name, *summary([h.seconds for h in history]),
            f"{accuracy(splits.test, trainer.w):.4f}"]


def bench_mlp(settings: Any, splits: Any, epochs: int, threads: int, hidden: tuple[int, ...],
              deep_lr_scale: float, max_warps: int, weight_dtype: str) -> list[list[Any]]:
    """The GPU MLP's row and the CPU MLP threads' row, on the same model and seed."""
    from hogwild.engine.gpu_mlp import GPUMLPTrainer
    from hogwild.engine.job import train_params
    from hogwild.engine.mlp import MLPTrainer
    from hogwild.model.spec import ModelSpec

    spec = ModelSpec("mlp", splits.train.n_features, hidden)
    gpu = GPUMLPTrainer(spec, train_params(settings), seed=settings.seed,
                        deep_lr_scale=deep_lr_scale, max_warps=max_warps,
                        weight_dtype=weight_dtype)
    gpu_history = gpu.fit(splits.train, epochs)
    cpu = MLPTrainer(spec, train_params(settings.replace(threads=threads)), seed=settings.seed,
                     deep_lr_scale=deep_lr_scale)
    cpu_history = cpu.fit(splits.train, epochs)
    sim = " (simulator: times mean nothing)" if os.environ.get("NUMBA_ENABLE_CUDASIM") else ""
    shape = f"hidden {list(hidden)}"
    gpu_name = (f"hogwild GPU MLP, {shape}, {gpu.warps(splits.train.n_rows)} warps, "
                f"{weight_dtype}{sim}")
    return [[gpu_name, *summary([h.seconds for h in gpu_history]),
             f"{accuracy(splits.test, gpu.w, spec):.4f}"],
            [f"hogwild CPU MLP, {shape}, {threads} threads",
             *summary([h.seconds for h in cpu_history]),
             f"{accuracy(splits.test, cpu.w, spec):.4f}"]]


def bench_torch(torch: Any, settings: Any, splits: Any, epochs: int, batch: int) -> list[Any]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = splits.train
    n, d = train.n_rows, train.n_features
    bag = torch.nn.EmbeddingBag(d, 1, mode="sum", sparse=True).to(device)
    torch.nn.init.zeros_(bag.weight)
    bias = torch.zeros(1, device=device, requires_grad=True)
    dense = torch.optim.SGD([bias], lr=1.0)
    sparse = torch.optim.SGD(bag.parameters(), lr=1.0)
    indptr = train.indptr.astype(np.int64)
    indices = torch.from_numpy(train.indices.astype(np.int64)).to(device)
    values = torch.from_numpy(train.values.astype(np.float32)).to(device)
    labels = torch.from_numpy(train.labels.astype(np.float32)).to(device)
    offsets = torch.from_numpy(indptr).to(device)
    lr0 = float(settings.learning_rate)
    seconds = []
    for epoch in range(epochs):
        began = time.perf_counter()
        for b0 in range(0, n, batch):
            b1 = min(b0 + batch, n)
            lo, hi = int(indptr[b0]), int(indptr[b1])
            # The inverse schedule at the batch's first row: lr0 / (1 + examples seen / n).
            lr = lr0 / (1.0 + (epoch * n + b0) / n)
            for opt in (dense, sparse):
                for group in opt.param_groups:
                    group["lr"] = lr
            margin = bag(indices[lo:hi], offsets[b0:b1] - lo,
                         per_sample_weights=values[lo:hi]).squeeze(1) + bias
            loss = torch.clamp(1.0 - labels[b0:b1] * margin, min=0.0).sum()
            dense.zero_grad()
            sparse.zero_grad()
            loss.backward()
            dense.step()
            sparse.step()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - began)
    w = np.append(bag.weight.detach().cpu().numpy()[:, 0].astype(np.float64),
                  float(bias.detach().cpu()))
    return [f"torch EmbeddingBag ({device}), batch {batch}", *summary(seconds),
            f"{accuracy(splits.test, w):.4f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=800_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="CPU threads (default: every core this process may use)")
    parser.add_argument("--max-warps", type=int, default=4096,
                        help="GPU: examples in flight at most")
    parser.add_argument("--weight-dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--torch-batches", default="256,4096")
    parser.add_argument("--mlp-hidden", default="64",
                        help="MLP rows (GPU only): hidden layer sizes, comma separated")
    parser.add_argument("--deep-lr-scale", type=float, default=None,
                        help="MLP rows: the deep part's step factor (default: the setting's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if os.environ.get("NUMBA_ENABLE_CUDASIM"):
        sys.setswitchinterval(1e-5)  # simulated GPU threads meet at barriers: switch fast
    print(common.machine_line())
    settings, splits = load(args.rows, args.seed)
    print(f"synthetic:rcv1?rows={args.rows}: {splits.train.n_rows} training rows, "
          f"{splits.test.n_rows} test rows, {splits.train.n_features} features, "
          f"{args.epochs} epochs")
    rows: list[list[Any]] = []
    missing = gpu_missing()
    if missing is None:
        rows.append(bench_gpu(settings, splits, args.epochs, args.max_warps,
                              args.weight_dtype))
    else:
        rows.append(["hogwild GPU", "-", "-", f"no CUDA device ({missing})"])
    rows.append(bench_cpu(settings, splits, args.epochs, args.threads))
    if missing is None:
        hidden = tuple(int(h) for h in args.mlp_hidden.split(",") if h.strip())
        deep = (settings.deep_lr_scale if args.deep_lr_scale is None
                else args.deep_lr_scale)
        rows.extend(bench_mlp(settings, splits, args.epochs, args.threads, hidden, deep,
                              args.max_warps, args.weight_dtype))
    else:
        rows.append(["hogwild GPU MLP / CPU MLP", "-", "-", "no CUDA device: not run"])
    try:
        import torch
    except ImportError:
        rows.append(["torch EmbeddingBag", "-", "-", "torch not installed"])
    else:
        for batch in (int(b) for b in args.torch_batches.split(",") if b.strip()):
            rows.append(bench_torch(torch, settings, splits, args.epochs, batch))
    common.print_table(["trainer", "s/epoch", "first epoch s", "test accuracy"], rows)


if __name__ == "__main__":
    main()
