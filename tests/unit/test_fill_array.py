"""Arrays filled into a message's own field travel exactly as a finished Array would."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.cluster.wire import pb
from hogwild.cluster.wire.arrays import ZLIB, decode_array, encode_array, fill_array
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts


@pytest.mark.parametrize("array", [np.arange(7, dtype=np.int32), np.zeros(0, np.float32),
                                   np.arange(5, dtype=">f8"), np.ones(3, np.float16)])
def test_a_filled_field_is_the_encoded_array(array: np.ndarray) -> None:
    delta = pb.Delta()
    stored = fill_array(delta.values, array)
    assert delta.values.SerializeToString() == encode_array(array).SerializeToString()
    assert stored == delta.values.data
    back = decode_array(delta.values, array.dtype.newbyteorder("<"), "values")
    np.testing.assert_array_equal(back, array)


def test_a_filled_field_takes_the_codec_and_refuses_what_cannot_travel() -> None:
    delta = pb.Delta()
    fill_array(delta.values, np.arange(100, dtype=np.float32), ZLIB)
    assert delta.values.encoding == ZLIB.encoding
    with pytest.raises(ValueError, match="1-D"):
        fill_array(pb.Delta().values, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="no wire type"):
        fill_array(pb.Delta().values, np.zeros(2, np.complex64))


@pytest.mark.parametrize("entries", [0, 40, 1000])
def test_dense_and_sparse_deltas_decode_to_what_was_encoded(entries: int) -> None:
    dim = 1000
    rng = np.random.default_rng(entries)
    idx = np.sort(rng.choice(dim, size=entries, replace=False)).astype(np.int32)
    val = rng.normal(size=entries).astype(np.float32) + 2.0  # never 0: dense keeps them all
    header = DeltaHeader("run", 1, 2, 3, dim, final=True, examples=9)
    full = np.zeros(dim, np.float32)
    for message in encode_delta_parts(header, idx, val, chunk_bytes=1024):
        got = decode_delta(pb.Delta.FromString(message.SerializeToString()), dim)
        assert got.header.final and got.header.examples == 9 and got.header.covers == ()
        full[got.indices] += got.values
    expected = np.zeros(dim, np.float32)
    expected[idx] = val
    np.testing.assert_array_equal(full, expected)
