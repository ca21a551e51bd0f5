"""Codec round trips (deltas, arrays, shard and weight streams) and every validation failure."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.arrays import RAW, ZLIB, decode_array, encode_array
from hogwild.cluster.wire.codec import (
    DeltaHeader,
    decode_delta,
    encode_delta,
    encode_delta_parts,
)
from hogwild.cluster.wire.streams import (
    FinalState,
    receive_shard,
    receive_state,
    shard_chunks,
    state_chunks,
)
from hogwild.data.csr import CSRData
from hogwild.errors import InvalidMessage, StaleOrUnknown

DIM = 1001


def _delta(n: int = 50, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(DIM, size=n, replace=False)).astype(np.int32)
    val = rng.standard_normal(n).astype(np.float32)
    return idx, val


HEADER = DeltaHeader(run_id="run-1", worker_id=2, round=7, seq=9, dim=DIM, examples=123)


def _wire(message: pb.Delta) -> pb.Delta:
    """What the receiver sees: the message after serialisation."""
    return pb.Delta.FromString(message.SerializeToString())


@pytest.mark.parametrize("codec", [RAW, ZLIB], ids=["raw", "zlib"])
def test_delta_round_trip(codec: object) -> None:
    idx, val = _delta()
    got = decode_delta(_wire(encode_delta(HEADER, idx, val, codec)), DIM)  # type: ignore[arg-type]
    assert got.header == HEADER
    np.testing.assert_array_equal(got.indices, idx)
    np.testing.assert_array_equal(got.values, val)
    assert got.indices.dtype == np.int32 and got.values.dtype == np.float32
    assert got.key == (2, 9, 0)


def test_empty_delta_round_trip() -> None:
    empty_i = np.zeros(0, np.int32)
    empty_v = np.zeros(0, np.float32)
    parts = encode_delta_parts(HEADER, empty_i, empty_v)
    assert len(parts) == 1
    got = decode_delta(_wire(parts[0]), DIM)
    assert got.indices.shape == (0,) and got.header.parts == 1


def test_delta_parts_cover_the_delta_and_respect_the_chunk_size() -> None:
    idx, val = _delta(1000)
    parts = encode_delta_parts(HEADER, idx, val, chunk_bytes=4096, dense=False)
    assert len(parts) == 2  # 512 entries per 4 KiB part
    decoded = [decode_delta(_wire(p), DIM) for p in parts]
    assert [d.header.part for d in decoded] == [0, 1]
    assert all(d.header.parts == 2 for d in decoded)
    assert all(d.nbytes <= 4096 for d in decoded)
    np.testing.assert_array_equal(np.concatenate([d.indices for d in decoded]), idx)
    np.testing.assert_array_equal(np.concatenate([d.values for d in decoded]), val)


def test_array_round_trip_every_dtype() -> None:
    for dtype in (np.int32, np.int64, np.float32, np.float64):
        arr = np.arange(17).astype(dtype)
        back = decode_array(pb.Array.FromString(encode_array(arr).SerializeToString()),
                            dtype, "x")
        np.testing.assert_array_equal(back, arr)
    big_endian = np.arange(5, dtype=">i4")
    np.testing.assert_array_equal(decode_array(encode_array(big_endian), np.int32, "x"),
                                  np.arange(5))


# ---------------------------------------------------------------- validation failures


def _bad(mutate: object, error: type[Exception] = InvalidMessage, match: str = "") -> None:
    idx, val = _delta()
    message = _wire(encode_delta(HEADER, idx, val))
    mutate(message)  # type: ignore[operator]
    with pytest.raises(error, match=match):
        decode_delta(_wire(message), DIM)


def test_index_at_dim_is_rejected() -> None:
    def at_dim(m: pb.Delta) -> None:
        idx = np.frombuffer(m.indices.data, np.int32).copy()
        idx[-1] = DIM
        m.indices.data = idx.tobytes()
    _bad(at_dim, match="outside")


def test_negative_index_is_rejected() -> None:
    def negative(m: pb.Delta) -> None:
        idx = np.frombuffer(m.indices.data, np.int32).copy()
        idx[0] = -1
        m.indices.data = idx.tobytes()
    _bad(negative, match="outside")


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_value_is_rejected(bad_value: float) -> None:
    def poison(m: pb.Delta) -> None:
        val = np.frombuffer(m.values.data, np.float32).copy()
        val[3] = bad_value
        m.values.data = val.tobytes()
    _bad(poison, match="not finite")


def test_declared_length_must_match_buffer() -> None:
    def lie(m: pb.Delta) -> None:
        m.indices.length = m.indices.length + 1
    _bad(lie, match="bytes for")


def test_truncated_buffer_is_rejected() -> None:
    def cut(m: pb.Delta) -> None:
        m.values.data = m.values.data[:-2]
    _bad(cut, match="bytes for")


def test_indices_and_values_lengths_must_agree() -> None:
    def shorter(m: pb.Delta) -> None:
        m.values.data = m.values.data[:-4]
        m.values.length -= 1
    _bad(shorter, match="indices but")


def test_wrong_dtype_is_rejected() -> None:
    def as_float64(m: pb.Delta) -> None:
        m.values.dtype = pb.DTYPE_FLOAT64
    _bad(as_float64, match="dtype")


def test_dim_mismatch_is_rejected() -> None:
    def other_dim(m: pb.Delta) -> None:
        m.dim = DIM + 1
    _bad(other_dim, match="dim")


def test_bad_part_numbering_is_rejected() -> None:
    def part_past_end(m: pb.Delta) -> None:
        m.part, m.parts = 2, 2
    _bad(part_past_end, match="part")


def test_zero_seq_is_rejected() -> None:
    def no_seq(m: pb.Delta) -> None:
        m.seq = 0
    _bad(no_seq, match="seq")


def test_unknown_encoding_is_rejected() -> None:
    def unknown(m: pb.Delta) -> None:
        m.indices.encoding = 42  # type: ignore[assignment]
    _bad(unknown, match="encoding")


def test_zlib_bomb_is_rejected() -> None:
    def bomb(m: pb.Delta) -> None:
        import zlib
        m.values.encoding = pb.ENCODING_ZLIB
        m.values.data = zlib.compress(bytes(10 * len(m.values.data)))
    _bad(bomb, match="inflates")


def test_wrong_protocol_version_is_stale() -> None:
    def future(m: pb.Delta) -> None:
        m.protocol_version = PROTOCOL_VERSION + 1
    _bad(future, StaleOrUnknown, match="protocol version")


# ---------------------------------------------------------------------- streams


def _csr(n_rows: int, n_features: int, nnz_per_row: int, seed: int = 0) -> CSRData:
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.random((n_rows, n_features)).argsort(axis=1)[:, :nnz_per_row], axis=1)
    indptr = np.arange(0, n_rows * nnz_per_row + 1, nnz_per_row, dtype=np.int64)
    return CSRData(indptr, cols.ravel().astype(np.int32),
                   rng.random(n_rows * nnz_per_row).astype(np.float32),
                   np.where(rng.random(n_rows) < 0.5, -1.0, 1.0).astype(np.float32), n_features)


def _same(a: CSRData, b: CSRData) -> None:
    for name in ("indptr", "indices", "values", "labels"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.n_features == b.n_features


def test_shard_round_trip_in_small_chunks() -> None:
    data = _csr(300, 50, 7)
    chunks = [pb.ShardChunk.FromString(c.SerializeToString())
              for c in shard_chunks(data, "r", 1, chunk_bytes=4096, shard_index=1, shard_count=3)]
    assert len(chunks) > 5
    assert all(len(c.payload.data) <= 4096 for c in chunks)
    got = receive_shard(chunks, run_id="r", worker_id=1)
    _same(got.data, data)
    assert (got.shard_index, got.shard_count) == (1, 3)
    assert got.digest == chunks[-1].shard_digest


def test_shard_chunk_with_bad_crc_is_rejected() -> None:
    chunks = list(shard_chunks(_csr(100, 20, 5), "r", 1, chunk_bytes=4096))
    chunks[1].crc32 ^= 1
    with pytest.raises(InvalidMessage, match="crc32"):
        receive_shard(chunks)


def test_shard_with_reordered_chunks_is_rejected() -> None:
    chunks = list(shard_chunks(_csr(2000, 20, 5), "r", 1, chunk_bytes=4096))
    chunks[1], chunks[2] = chunks[2], chunks[1]
    with pytest.raises(InvalidMessage, match="offset"):
        receive_shard(chunks)


def test_shard_missing_its_closing_message_is_rejected() -> None:
    chunks = list(shard_chunks(_csr(100, 20, 5), "r", 1, chunk_bytes=4096))
    with pytest.raises(InvalidMessage, match="closing"):
        receive_shard(chunks[:-1])


def test_shard_with_altered_payload_and_fixed_crc_fails_the_digest() -> None:
    import zlib
    chunks = list(shard_chunks(_csr(100, 20, 5), "r", 1, chunk_bytes=4096))
    values = next(c for c in chunks if c.field == pb.ShardChunk.FIELD_VALUES)
    arr = np.frombuffer(values.payload.data, np.float32).copy()
    arr[0] += 1.0
    values.payload.data = arr.tobytes()
    values.crc32 = zlib.crc32(values.payload.data)
    with pytest.raises(InvalidMessage, match="digest"):
        receive_shard(chunks)


def test_shard_with_out_of_range_feature_is_rejected() -> None:
    data = _csr(10, 20, 3)
    bad = CSRData(data.indptr, data.indices, data.values, data.labels, 5)  # indices up to 19
    with pytest.raises(InvalidMessage, match="CSR"):
        receive_shard(shard_chunks(bad, "r", 1, chunk_bytes=4096))


def test_shard_for_another_run_is_rejected() -> None:
    with pytest.raises(InvalidMessage, match="run"):
        receive_shard(shard_chunks(_csr(10, 20, 3), "other", 1, 4096), run_id="r")


def test_state_round_trip() -> None:
    w = np.random.default_rng(1).standard_normal(3000)
    state = FinalState(worker_id=3, weights=w, rounds=5, examples=999, deltas_sent=6,
                       applied_from={0: 4, 1: 6}, acked_by={0: 6, 1: 6}, dropped_peers=[2])
    chunks = [pb.StateChunk.FromString(c.SerializeToString())
              for c in state_chunks(state, "r", chunk_bytes=4096)]
    assert len(chunks) > 3
    got = receive_state(chunks, dim=3000, run_id="r")
    np.testing.assert_array_equal(got.weights, w)
    assert (got.worker_id, got.rounds, got.examples, got.deltas_sent) == (3, 5, 999, 6)
    assert got.applied_from == {0: 4, 1: 6} and got.acked_by == {0: 6, 1: 6}
    assert got.dropped_peers == [2]


def test_state_with_wrong_dim_is_rejected() -> None:
    state = FinalState(worker_id=0, weights=np.zeros(10))
    with pytest.raises(InvalidMessage, match="dim"):
        receive_state(state_chunks(state, "r", 4096), dim=11)


# ------------------------------------------------------------------------- dense deltas


def _scatter(decoded: list) -> np.ndarray:  # type: ignore[type-arg]
    w = np.zeros(DIM, np.float64)
    for d in decoded:
        w[d.indices] += d.values
    return w


def test_a_delta_touching_most_coordinates_travels_dense_in_half_the_bytes() -> None:
    idx, val = _delta(800)
    (dense,) = encode_delta_parts(HEADER, idx, val)
    (sparse,) = encode_delta_parts(HEADER, idx, val, dense=False)
    assert dense.dense and not sparse.dense
    assert dense.ByteSize() < 0.7 * sparse.ByteSize()
    got = decode_delta(_wire(dense), DIM)
    assert got.dense and got.header == HEADER and got.key == (2, 9, 0)
    assert got.nbytes == DIM * 4
    dense.ClearField("indices")  # unset is as good as empty
    assert decode_delta(_wire(dense), DIM).indices.shape == (DIM,)
    expected = np.zeros(DIM)
    expected[idx] = val
    np.testing.assert_array_equal(_scatter([got]), expected)


def test_a_sparse_delta_stays_sparse() -> None:
    idx, val = _delta(400)  # fewer than half the coordinates
    assert not any(m.dense for m in encode_delta_parts(HEADER, idx, val))


def test_dense_parts_tile_the_coordinates() -> None:
    idx, val = _delta(900, seed=3)
    parts = encode_delta_parts(HEADER, idx, val, chunk_bytes=1024)  # 256 values per part
    assert len(parts) == 4 and all(p.dense for p in parts)
    assert [p.dense_offset for p in parts] == [0, 256, 512, 768]
    decoded = [decode_delta(_wire(p), DIM) for p in parts]
    assert all(d.nbytes <= 1024 for d in decoded)
    assert [d.header.part for d in decoded] == [0, 1, 2, 3]
    expected = np.zeros(DIM)
    expected[idx] = val
    np.testing.assert_array_equal(_scatter(decoded), expected)


def test_a_dense_delta_with_an_index_outside_the_model_is_refused_at_encoding() -> None:
    idx, val = _delta(900)
    for bad in (-1, DIM):  # numpy's scatter would wrap -1 onto the last coordinate
        idx[0] = bad
        with pytest.raises(ValueError, match="outside"):
            encode_delta_parts(HEADER, idx, val, dense=True)


def _dense_message(**changes: object) -> pb.Delta:
    idx, val = _delta(900)
    (m,) = encode_delta_parts(HEADER, idx, val, dense=True)
    for key, value in changes.items():
        setattr(m, key, value)
    return m


def test_dense_faults_are_invalid() -> None:
    with pytest.raises(InvalidMessage, match="offset"):
        decode_delta(_dense_message(dense_offset=DIM), DIM)
    with pytest.raises(InvalidMessage, match="at most"):
        decode_delta(_dense_message(dense_offset=1), DIM)  # runs one past the end
    m = _dense_message()
    m.indices.CopyFrom(encode_array(np.array([3], np.int32)))
    with pytest.raises(InvalidMessage, match="indices"):
        decode_delta(m, DIM)
    m = _dense_message()
    values = np.frombuffer(m.values.data, np.float32).copy()
    values[500] = np.inf
    m.values.data = values.tobytes()
    with pytest.raises(InvalidMessage, match="not finite"):
        decode_delta(m, DIM)


_WARM_CHECK = """
import numpy as np
from hogwild.cluster.localrun.prespawn import load_worker_kernels
load_worker_kernels()
from hogwild.model import kernels
from hogwild.cluster.wire import codec
def variants():
    return (len(codec.count_faults.signatures), len(kernels.apply_delta.signatures))
before = variants()
dim = 1001
w, snap = np.zeros(dim), np.zeros(dim)
for n in (10, 900):  # sparse, then dense on the wire
    idx = np.arange(n, dtype=np.int32)
    msg = codec.encode_delta(codec.DeltaHeader("r", 1, 1, 1, dim), idx,
                             np.ones(n, np.float32))
    d = codec.decode_delta(msg, dim)
    kernels.apply_delta(w, snap, d.indices, d.values)
    kernels.apply_delta(w, np.empty(0), d.indices, d.values)
print(*before, *variants())
"""


def test_the_warmup_loads_every_kernel_variant_a_received_delta_needs() -> None:
    # A received delta's arrays are read-only views (a type of their own to numba): a
    # variant missing from the warm-up is loaded inside the first delta's RPC instead.
    import subprocess
    import sys

    counts = subprocess.run([sys.executable, "-c", _WARM_CHECK], capture_output=True,
                            text=True, timeout=120, check=True).stdout.split()
    assert counts[:2] == counts[2:], counts
