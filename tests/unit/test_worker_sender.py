"""The outgoing queue of one destination: deltas queued behind a slow send are summed exactly,
the queue stays bounded, and the float32 rounding of a sum is never lost."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.engine.sparse import merge_sparse

DIM = 1_000


def test_merge_sparse_equals_a_dense_sum() -> None:
    rng = np.random.default_rng(0)
    dense = np.zeros(DIM)
    idx_acc = np.zeros(0, dtype=np.int32)
    val_acc = np.zeros(0, dtype=np.float64)
    for _ in range(20):
        idx = np.sort(rng.choice(DIM, size=rng.integers(0, 200), replace=False)).astype(np.int32)
        val = rng.normal(size=idx.shape[0]).astype(np.float32)
        dense[idx] += val
        idx_acc, val_acc = merge_sparse(idx_acc, val_acc, idx, val)
    assert np.all(np.diff(idx_acc) > 0)
    out = np.zeros(DIM)
    out[idx_acc] = val_acc
    np.testing.assert_array_equal(out, dense)  # float64 sums of float32 values: exact here


def test_merge_sparse_drops_cancelled_coordinates() -> None:
    idx, val = merge_sparse(np.array([1, 3], dtype=np.int32), np.array([1.0, 2.0]),
                            np.array([3, 5], dtype=np.int32), np.array([-2.0, 4.0]))
    assert idx.tolist() == [1, 5] and val.tolist() == [1.0, 4.0]


def test_the_merge_kernel_sums_as_the_sort_does_and_leaves_unsorted_lists_to_it() -> None:
    """Ascending lists (deltas) go through one compiled pass; read-only (received) arrays,
    float32 values and cancellations included, its sums are the sort's, bit for bit. A list
    out of order or with a repeated index is summed by the sort instead."""
    rng = np.random.default_rng(1)
    for n_a, n_b in ((0, 0), (0, 50), (400, 300), (DIM, DIM)):
        idx_a = np.sort(rng.choice(DIM, size=n_a, replace=False)).astype(np.int32)
        idx_b = np.sort(rng.choice(DIM, size=n_b, replace=False)).astype(np.int32)
        val_a = rng.normal(size=n_a)
        val_b = rng.normal(size=n_b).astype(np.float32)
        both = np.intersect1d(idx_a, idx_b)[:5]  # some coordinates cancel exactly
        val_a[np.searchsorted(idx_a, both)] = -val_b[np.searchsorted(idx_b, both)]
        idx_b.flags.writeable = val_b.flags.writeable = False
        dense = np.zeros(DIM)
        np.add.at(dense, idx_a, val_a)
        np.add.at(dense, idx_b, val_b.astype(np.float64))
        idx, val = merge_sparse(idx_a, val_a, idx_b, val_b)
        assert idx.dtype == np.int32 and val.dtype == np.float64
        assert idx.tolist() == np.flatnonzero(dense).tolist()
        assert val.tobytes() == dense[idx].tobytes()
    for idx_a in (np.array([5, 2], dtype=np.int32), np.array([2, 2], dtype=np.int32)):
        idx, val = merge_sparse(idx_a, np.array([1.0, 2.0]), np.array([2], dtype=np.int32),
                                np.array([4.0]))
        dense = np.zeros(8)
        np.add.at(dense, idx_a, [1.0, 2.0])
        dense[2] += 4.0
        assert idx.tolist() == np.flatnonzero(dense).tolist()
        assert val.tolist() == dense[idx].tolist()


class GatedStub:
    """A fake stub whose PushDelta blocks until released, recording what arrives."""

    def __init__(self, channel: Any) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.received: list[Any] = []
        self.other: list[tuple[str, Any]] = []

    def PushDelta(self, message: Any, timeout: float) -> None:
        self.entered.set()
        self.gate.wait(10)
        self.received.append(message)

    def ReportProgress(self, message: Any, timeout: float) -> None:
        self.other.append(("ReportProgress", message))


def _destination(coalesce: bool) -> tuple[Destination, GatedStub, list[int]]:
    seqs: list[int] = []
    lock = threading.Lock()

    def encoder(idx: Any, val: Any, round_: int, final: bool, examples: int) -> list[Any]:
        with lock:
            seqs.append(len(seqs) + 100)
            seq = seqs[-1]
        return encode_delta_parts(DeltaHeader("run", 0, round_, seq, DIM, final=final,
                                              examples=examples), idx, val, 1 << 20)

    dest = Destination("peer 1", 1, "127.0.0.1:1", GatedStub, 5.0, 5.0, lambda i, w: None,
                       coalesce=coalesce, encoder=encoder)
    return dest, dest.stub, seqs


def _delta(rng: np.random.Generator, round_: int, final: bool = False) -> OutgoingDelta:
    idx = np.sort(rng.choice(DIM, size=50, replace=False)).astype(np.int32)
    val = (rng.normal(size=50) * 1e-3).astype(np.float32)
    header = DeltaHeader("run", 0, round_, round_, DIM, final=final, examples=round_ * 10)
    return OutgoingDelta(round_, final, round_ * 10, idx, val,
                         encode_delta_parts(header, idx, val, 1 << 20))


def _deltas(rng: np.random.Generator, n: int) -> tuple[list[OutgoingDelta], np.ndarray]:
    """Rounds 1..n (the last one final) and their float64 sum."""
    deltas = [_delta(rng, r, final=(r == n)) for r in range(1, n + 1)]
    expected = np.zeros(DIM)
    for d in deltas:
        expected[d.indices] += d.values.astype(np.float64)
    return deltas, expected


def _applied(messages: list[Any]) -> np.ndarray:
    w = np.zeros(DIM)
    for m in messages:
        d = decode_delta(m, DIM)
        w[d.indices] += d.values.astype(np.float64)
    return w


@pytest.mark.parametrize("coalesce", [True, False])
def test_deltas_behind_a_slow_send_are_summed_and_nothing_is_lost(coalesce: bool) -> None:
    rng = np.random.default_rng(1)
    dest, stub, seqs = _destination(coalesce)
    try:
        deltas, expected = _deltas(rng, 30)
        dest.put_delta(deltas[0])
        assert stub.entered.wait(5)  # the first send is in flight and blocked
        for d in deltas[1:]:
            dest.put_delta(d)
            dest.put("ReportProgress", pb.Progress(round=d.round))
        # Bounded: one delta waiting (all the others summed into it) and one progress report.
        assert dest.pending() == (3 if coalesce else 1 + 29 + 1)
        stub.gate.set()
        assert dest.flush(10)
    finally:
        stub.gate.set()
        dest.close(1.0)
    got = _applied(stub.received)
    rounds = [int(m.round) for m in stub.received]
    assert rounds == sorted(rounds) and rounds[-1] == 30
    # Numbered per destination, whatever was summed: a gap-free stream 1, 2, 3, ...
    assert [int(m.seq) for m in stub.received] == list(range(1, len(stub.received) + 1))
    assert stub.received[-1].final and not any(m.final for m in stub.received[:-1])
    if coalesce:
        assert dest.deltas_merged == 28
        assert 2 <= len(stub.received) <= 3  # the first, the sum, maybe its rounding residual
        assert len(seqs) >= 1  # the sum was encoded here, not taken as queued
        # The float64 sum of every float32 delta, to float64 rounding: nothing lost to float32.
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
        assert [(rpc, m.round) for rpc, m in stub.other] == [("ReportProgress", 30)]
    else:
        assert len(stub.received) == 30 and seqs == []
        # Messages other destinations share were numbered as copies, never in place.
        assert all(d.messages is not None and d.messages[0].seq == d.round for d in deltas)
        np.testing.assert_array_equal(got, expected)


def test_after_a_sum_the_next_deltas_go_out_as_encoded_and_the_rounding_goes_last() -> None:
    # The float32 rounding of a sum used to be summed into every later delta, so each one was
    # merged and encoded again in the sender (about 2 ms a round for a dense delta). Now the
    # deltas between go out as encoded, and the final delta carries the rounding.
    rng = np.random.default_rng(2)
    dest, stub, seqs = _destination(coalesce=True)
    try:
        deltas, expected = _deltas(rng, 10)
        dest.put_delta(deltas[0])
        assert stub.entered.wait(5)
        dest.put_delta(deltas[1])
        dest.put_delta(deltas[2])  # summed into deltas[1]: a sum with a float32 rounding
        stub.gate.set()
        assert dest.flush(10)
        assert dest.deltas_merged == 1 and len(seqs) == 1
        assert dest.residual is not None  # this sum does not round exactly to float32
        for d in deltas[3:9]:
            dest.put_delta(d)
            assert dest.flush(10)
        assert len(seqs) == 1  # sent as the exchange encoded them: no merge, no new encoding
        assert dest.residual is not None
        dest.put_delta(deltas[9])  # the final one takes the rounding along
        assert dest.flush(10)
        assert dest.residual is None and len(seqs) >= 2
    finally:
        stub.gate.set()
        dest.close(1.0)
    assert stub.received[-1].final and not any(m.final for m in stub.received[:-1])
    np.testing.assert_allclose(_applied(stub.received), expected, rtol=0, atol=1e-15)
