"""Delta compression: what is not sent stays in the residual (sent + residual == true delta),
and float16 values travel as a declared dtype and are validated like float32 ones."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.cluster.transport.sender import wire_values
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts
from hogwild.errors import InvalidMessage
from hogwild.model import kernels
from hogwild.model.compression import F16_MAX, Compression, compress_delta, wire_bytes


def _round(w: np.ndarray, snap: np.ndarray, how: Compression) -> tuple[np.ndarray, np.ndarray]:
    idx = np.empty(w.shape[0], dtype=np.int32)
    val = np.empty(w.shape[0], dtype=np.float32)
    n = int(kernels.build_delta(w, snap, idx, val))
    return compress_delta(idx[:n], val[:n], snap, how)


@pytest.mark.parametrize("how", [
    Compression(threshold=0.05), Compression(topk=7), Compression(half=True),
    Compression(threshold=0.01, topk=5, half=True)])
def test_sent_plus_residual_is_the_true_delta(how: Compression) -> None:
    rng = np.random.default_rng(0)
    dim = 200
    snap = rng.normal(size=dim)
    w = snap.copy()
    changed = rng.choice(dim, 60, replace=False)
    w[changed] += rng.normal(scale=0.05, size=60)
    w[3] = snap[3] + 1e5  # beyond float16's range: clipped, the excess stays behind
    true_delta = w - snap
    idx, val = _round(w, snap, how)
    assert np.all(np.diff(idx) > 0)
    sent = np.zeros(dim)
    np.add.at(sent, idx, val.astype(np.float64))
    residual = w - snap
    np.testing.assert_allclose(sent + residual, true_delta, rtol=0, atol=1e-9)
    if how.topk:
        assert idx.shape[0] <= how.topk
    if how.threshold:
        assert np.all(np.abs(val) >= how.threshold * (1 - 1e-3))
    if how.half:
        assert val.dtype == np.float16 and np.all(np.isfinite(val))
        assert abs(float(residual[3])) >= 1e5 - F16_MAX - 1
    assert np.any(residual != 0)  # something was held back


def test_dropped_entries_go_out_in_a_later_round() -> None:
    dim = 10
    snap = np.zeros(dim)
    w = np.zeros(dim)
    w[[1, 4, 7]] = [0.5, 0.01, -0.2]
    how = Compression(topk=1)
    idx1, _ = _round(w, snap, how)
    idx2, _ = _round(w, snap, how)
    idx3, _ = _round(w, snap, how)
    assert [idx1.tolist(), idx2.tolist(), idx3.tolist()] == [[1], [7], [4]]
    # Everything has been sent now, up to float32 rounding (itself kept for later).
    np.testing.assert_allclose(snap, w, rtol=0, atol=1e-7)


def test_float16_delta_round_trips_through_the_codec() -> None:
    header = DeltaHeader(run_id="r", worker_id=1, round=1, seq=1, dim=100)
    idx = np.array([2, 50, 99], dtype=np.int32)
    val = np.array([0.5, -1.25, 3.0], dtype=np.float16)
    for dense in (False, True):
        (message,) = encode_delta_parts(header, idx, val, dense=dense)
        assert message.values.dtype == pb.DTYPE_FLOAT16
        decoded = decode_delta(message, 100)
        assert decoded.values.dtype == np.float32
        got = np.zeros(100, dtype=np.float32)
        got[decoded.indices] = decoded.values
        np.testing.assert_array_equal(got[idx], val.astype(np.float32))
        assert np.count_nonzero(got) == 3


def test_float16_halves_the_value_bytes() -> None:
    header = DeltaHeader(run_id="r", worker_id=1, round=1, seq=1, dim=10_000)
    idx = np.arange(0, 10_000, 10, dtype=np.int32)
    val = np.ones(idx.shape[0], dtype=np.float32)
    (m32,) = encode_delta_parts(header, idx, val)
    (m16,) = encode_delta_parts(header, idx, val.astype(np.float16))
    assert len(m16.values.data) * 2 == len(m32.values.data)


def test_non_finite_float16_value_is_rejected() -> None:
    header = DeltaHeader(run_id="r", worker_id=1, round=1, seq=1, dim=10)
    (message,) = encode_delta_parts(header, np.array([1], np.int32),
                                    np.array([np.inf], np.float16), dense=False)
    with pytest.raises(InvalidMessage, match="not finite"):
        decode_delta(message, 10)
    message.values.length = 2  # declared length no longer matches the float16 buffer
    with pytest.raises(InvalidMessage, match="bytes"):
        decode_delta(message, 10)


def test_summed_deltas_clip_to_float16_range() -> None:
    out = wire_values(np.array([1e6, -1e6, 0.5]), half=True)
    assert out.dtype == np.float16
    assert out.tolist() == [F16_MAX, -F16_MAX, 0.5]


@pytest.mark.parametrize("entries", [1, 300, 500, 501, 999, 1000])
@pytest.mark.parametrize("half", [False, True])
def test_simulated_message_size_is_what_the_codec_sends(entries: int, half: bool) -> None:
    """The simulator charges a message wire_bytes: the payload the codec encodes, dense past
    half the coordinates, float16 values when asked."""
    dim = 1000
    header = DeltaHeader(run_id="r", worker_id=1, round=1, seq=1, dim=dim)
    idx = np.sort(np.random.default_rng(entries).choice(dim, entries, replace=False))
    val = np.ones(entries, dtype=np.float16 if half else np.float32)
    (message,) = encode_delta_parts(header, idx.astype(np.int32), val)
    payload = len(message.indices.data) + len(message.values.data)
    assert payload == wire_bytes(entries, dim, half)
    assert message.dense == (entries > dim // 2)
