"""Compile every numba kernel once (parse, write, generate, split, train, deltas) into the on-disk cache."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hogwild.data.diagnose.conflicts import warmup as warmup_conflicts
from hogwild.data.formats._textformat import MAX_VALUE_BYTES, format_table
from hogwild.data.formats.svmlight import parse_svmlight_buffer, read_svmlight, write_svmlight
from hogwild.data.parts.ranges import LocalSpec, plan_file, read_ranges
from hogwild.data.synthetic import make_rcv1_like, make_seed000
from hogwild.data.transform.split import shard, train_val_test_split
from hogwild.model.scoring import warmup as warmup_scoring
from hogwild.model.warmup import warmup as warmup_model


def warmup() -> float:
    """Run each compiled path on tiny inputs; returns the seconds it took (compiling or loading)."""
    started = time.perf_counter()
    warmup_model()
    warmup_scoring()
    warmup_conflicts()
    format_table(np.ones((1, 2)), 9, np.empty(3 * MAX_VALUE_BYTES, dtype=np.uint8))
    text = np.frombuffer(b"1 1:0.5 3:1.5e-1\n-1 qid:3 2:2 # c\n0 4:1\n", dtype=np.uint8)
    parse_svmlight_buffer(text)
    data = make_rcv1_like(64, n_features=200, avg_nnz=8, seed=1)
    make_seed000(16, n_features=100, min_nnz=1, max_nnz=5, seed=1)
    train, _, _ = train_val_test_split(data, val_fraction=0.25, test_fraction=0.25, seed=0)
    shard(train, 2, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("w.svm", "w.svm.gz"):
            path = Path(tmp) / name
            write_svmlight(data, path)
            read_svmlight(path, cache=False)
        # streamed loads: shuffled, a qid row (loose bounds), written to and read from a cache
        path = Path(tmp) / "q.svm"
        path.write_bytes(b"1 qid:2 1:0.5 3:1\n-1 2:2\n")
        for _ in range(2):
            read_svmlight(path, cache_dir=Path(tmp) / "cache", shuffle_seed=0)
        # shipping local: the coordinator's plan of ranges and a worker's read of them
        plan = plan_file(str(path), workers=1, seed=0, val_fraction=0.0, test_fraction=0.0)
        read_ranges(LocalSpec(str(path), plan.file_size, plan.max_index + 1, False, 0, 0.0),
                    plan.ranges)
    return time.perf_counter() - started


def preload_in_background(load: Callable[[], object] | None = None) -> threading.Thread:
    """Start loading kernels from numba's cache on a daemon thread, while the data is parsed
    (the parser's kernels release the GIL): ``load`` when given (a job that knows which
    kernels it will call), else every training and conflict kernel. The plotting library is
    imported by the plot's own helper process (hogwild.outputs.plotter). Errors are left for the
    real calls to report."""

    def load_all() -> None:
        warmup_model()
        warmup_conflicts()

    def run() -> None:
        with contextlib.suppress(Exception):
            (load or load_all)()

    thread = threading.Thread(target=run, name="hogwild-preload", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    print(f"hogwild kernels ready in {warmup():.1f}s")
