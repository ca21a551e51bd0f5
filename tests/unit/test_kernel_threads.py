"""KernelThreads: kept threads run a series of parallel calls as run_parallel would."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hogwild.data._threads import KernelThreads, run_parallel
from hogwild.data.formats import stream
from hogwild.data.formats.stream import load_text


def _square_and_who(x: int) -> tuple[int, int]:
    time.sleep(0.001)
    return x * x, threading.get_ident()


def test_results_come_back_in_job_order_also_with_more_jobs_than_threads() -> None:
    jobs = [(i,) for i in range(7)]
    with KernelThreads(3) as pool:
        got = pool.run(_square_and_who, jobs)
    assert [r for r, _ in got] == [r for r, _ in run_parallel(_square_and_who, jobs)]
    assert [r for r, _ in got] == [i * i for i in range(7)]


def test_the_same_threads_serve_every_call_and_end_on_exit() -> None:
    seen: set[int] = set()
    with KernelThreads(3, name="kept") as pool:
        for _ in range(20):
            seen.update(who for _, who in pool.run(_square_and_who, [(1,), (2,), (3,)]))
        kept = [t for t in threading.enumerate() if t.name.startswith("kept-")]
        assert len(kept) == 2
    # two kept threads and the calling one, never a thread per call
    assert threading.get_ident() in seen
    assert len(seen) == 3
    assert not any(t.is_alive() for t in kept)


def _fail_on(x: int, bad: int, done: list[int]) -> int:
    time.sleep(0.01 if x != bad else 0.0)
    if x == bad:
        raise ValueError(f"job {x}")
    done.append(x)
    return x


@pytest.mark.parametrize("bad", [0, 1])  # the calling thread's job, a kept thread's job
def test_an_error_is_raised_once_every_job_has_ended(bad: int) -> None:
    done: list[int] = []
    with KernelThreads(2) as pool:
        with pytest.raises(ValueError, match=f"job {bad}"):
            pool.run(_fail_on, [(0, bad, done), (1, bad, done)])
        assert done == [1 - bad]   # the other job ran to its end before the raise
        assert pool.run(_fail_on, [(2, bad, done), (3, bad, done)]) == [2, 3]


def test_a_text_load_keeps_its_threads_for_every_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread_starts: list[str]) -> None:
    rng = np.random.default_rng(0)
    lines = [f"{1 if rng.random() < 0.5 else -1} " + " ".join(
        f"{j}:{rng.random():.4f}" for j in sorted(rng.choice(range(1, 500), 20, replace=False)))
        for _ in range(3000)]
    path = tmp_path / "rows.svm"
    path.write_text("\n".join(lines) + "\n")
    block = 16 << 10
    monkeypatch.setattr(stream, "MIN_BYTES_PER_THREAD", block // 5)  # 4 pieces a block
    parsed: list[int] = []
    parse = stream._parse_and_place

    def counting_parse(*args: object) -> object:
        parsed.append(threading.get_ident())
        return parse(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(stream, "_parse_and_place", counting_parse)
    data = load_text(path, threads=4, block_bytes=block)
    assert path.stat().st_size > 8 * block
    assert len(parsed) > 4 * 8                       # many blocks, each parsed in pieces
    assert len(set(parsed)) == 4
    assert data.n_rows == 3000
    assert len(thread_starts) == 3                   # one set of threads for both passes
    # the rows are those of a load in one block
    whole = load_text(path, threads=4)
    assert np.array_equal(data.indptr, whole.indptr)
    assert np.array_equal(data.indices, whole.indices)
    assert np.array_equal(data.values, whole.values)


def test_kernel_threads_follow_the_cores_this_process_may_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from hogwild.data._threads import default_threads

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})    # a one-core cpuset
    assert default_threads() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(3)))
    assert default_threads() == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))
    assert default_threads() == 8                                    # at most 8
