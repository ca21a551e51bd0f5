"""Compressed deltas on a real cluster (Reuters earn, 2 workers): each option (sync) and all
three together (async) reach the accuracy of the uncompressed run within 1 point and send
fewer bytes to their peers.

Bytes are compared only where the count of messages does not depend on timing: in sync mode
each worker sends exactly one delta per round to each peer. The coordinator-bound queue (and,
in async mode, every queue) sums the deltas that wait behind a slow send, and a summed delta is
much smaller than its parts, so those totals measure the machine's load more than the encoding
(tests/unit/test_delta_compression.py checks the encoded sizes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .helpers import final_states, finished_run

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

_BASELINES: dict[str, dict[str, Any]] = {}


def _peer_bytes(metrics: dict[str, Any]) -> int:
    return sum(int(s["bytes_sent"]) - int(s["bytes_to_coordinator"])
               for s in metrics["worker_states"])


def _baseline(mode: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if mode not in _BASELINES:
        _BASELINES[mode] = finished_run(tmp_path_factory.mktemp(f"plain-{mode}"), 2, mode=mode)
    return _BASELINES[mode]


@pytest.mark.parametrize(("mode", "option"), [
    ("sync", {"delta_threshold": 1e-3}), ("sync", {"delta_topk": 200}),
    ("sync", {"delta_dtype": "float16"}),
    ("async", {"delta_threshold": 1e-3, "delta_topk": 200, "delta_dtype": "float16"})],
    ids=["sync-threshold", "sync-topk", "sync-float16", "async-all"])
def test_compressed_run_matches_the_uncompressed_accuracy(
        mode: str, option: dict[str, Any], tmp_path: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    plain = _baseline(mode, tmp_path_factory)
    squeezed = finished_run(tmp_path, 2, mode=mode, **option)
    assert squeezed["test_accuracy"] >= plain["test_accuracy"] - 0.01, (squeezed, plain)
    assert squeezed["dropped_workers"] == []
    if mode == "sync":
        assert _peer_bytes(squeezed) < _peer_bytes(plain)
        # The final delta sends every residual in float32: workers end on the global model.
        out = squeezed["out"]
        with final_states(out, "global.npz") as g:
            global_w = g["w"]
        for wid in range(2):
            with final_states(out, f"worker-{wid}.npz") as f:
                np.testing.assert_allclose(f["w"], global_w, rtol=1e-6, atol=1e-6)
