"""A worker out of core on a real cluster: under a memory cap its rows would not fit in (an
in-memory worker says so and the run ends), it trains the same model as without the cap.

Real coordinator and worker processes on loopback (port 0), bounded waits, always reaped.
The cap is RLIMIT_DATA (private writable memory: the heap, numpy's arrays), set in the worker
process before it starts; a container's memory limit acts alike on such memory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import Cluster, Proc

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

READ = re.compile(r"read ([\d,]+) training rows \(([\d,]+) non-zeros\) .* in [\d.]+s, (.*)$")


def _peak_data(proc: Proc, timeout: float) -> int:
    """The largest VmData (bytes) seen while ``proc`` ran, polled every few milliseconds."""
    peak = 0
    deadline = time.monotonic() + timeout
    status = Path(f"/proc/{proc.proc.pid}/status")
    while proc.proc.poll() is None and time.monotonic() < deadline:
        try:
            found = re.search(r"VmData:\s+(\d+) kB", status.read_text())
        except OSError:
            break
        if found:
            peak = max(peak, int(found.group(1)) * 1024)
        time.sleep(0.003)
    return peak


def _start(cluster: Cluster, out: Path, data: Path, test: Path, *, out_of_core: bool,
           data_limit: int | None) -> None:
    cluster.start(1, worker_data_limit=data_limit, data=str(data), test_data=str(test),
                  shipping="local", out_of_core=out_of_core, threads=1, epochs=2, patience=0,
                  eval_interval=0.5, out_dir=str(out), data_cache=False, rpc_timeout=10,
                  register_timeout=120, connect_timeout=60)


def _run(tmp_path: Path, name: str, data: Path, test: Path, *, out_of_core: bool,
         data_limit: int | None = None) -> tuple[int, float, re.Match[str]]:
    """One coordinator and one worker; the worker's peak VmData, the test accuracy, and the
    worker's line about the rows it read."""
    cluster = Cluster(tmp_path)
    out = tmp_path / name
    try:
        _start(cluster, out, data, test, out_of_core=out_of_core, data_limit=data_limit)
        worker = cluster.workers[0]
        peak = _peak_data(worker, 240)
        assert cluster.coordinator is not None
        assert cluster.coordinator.wait(120) == 0, cluster.output()
        assert worker.wait(60) == 0, cluster.output()
        read = worker.wait_for(READ, 5)
    finally:
        cluster.reap()
    metrics = json.loads(next(out.glob("*/metrics.json")).read_text())
    return peak, float(metrics["test_accuracy"]), read


def _generate(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "train.svm"
    done = subprocess.run([sys.executable, "-m", "hogwild.cli", "gen-data", "rcv1", "--rows",
                           "200000", "--test-rows", "20000", "--out", str(data)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return data, tmp_path / "train.test.svm"


def test_a_worker_out_of_core_trains_under_a_memory_cap_its_rows_exceed(
        tmp_path: Path) -> None:
    data, test = _generate(tmp_path)
    in_memory, acc_in, read_in = _run(tmp_path, "in-memory", data, test, out_of_core=False)
    on_disk, acc_disk, read_disk = _run(tmp_path, "on-disk", data, test, out_of_core=True)
    assert read_in.group(3) == "in memory"
    assert read_disk.group(3).startswith("out of core (mapped from disk under ")
    rows, nnz = (int(read_disk.group(i).replace(",", "")) for i in (1, 2))
    part = 8 * nnz + 12 * rows  # indices and values, row pointers and labels
    # Held in memory the rows are private memory; out of core they are not.
    assert in_memory - on_disk > part // 2, (in_memory, on_disk, part)

    # A cap halfway between: too small for the rows in memory, room to spare out of core.
    cap = on_disk + (in_memory - on_disk) // 2
    refused = Cluster(tmp_path)
    try:
        _start(refused, tmp_path / "refused", data, test, out_of_core=False, data_limit=cap)
        assert refused.coordinator is not None
        assert refused.coordinator.wait(120) != 0
        assert refused.workers[0].wait(60) != 0
        said = re.compile(r"not enough memory for this worker's [\d,]+ training rows .*"
                          r"set out_of_core: true")
        refused.workers[0].wait_for(said, 5)
        refused.coordinator.wait_for(re.compile(r"cannot load its rows: .*not enough memory"), 5)
    finally:
        refused.reap()
    capped, acc_capped, read_capped = _run(tmp_path, "capped", data, test, out_of_core=True,
                                           data_limit=cap)
    assert read_capped.group(3).startswith("out of core")
    assert capped <= cap
    # The same rows in the same order, so the same model: the cap changed nothing.
    assert acc_capped == acc_disk
    # Out of core mixes the rows by blocks instead of one by one: as accurate all the same.
    assert abs(acc_disk - acc_in) < 0.02, (acc_disk, acc_in)

