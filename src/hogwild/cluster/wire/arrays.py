"""numpy <-> protobuf arrays: little-endian byte buffers (raw or zlib), chunked streams, checksums.

Encoding copies each array once into a ``bytes`` field; decoding is zero-copy
(``np.frombuffer`` over the message's bytes) and checks dtype and declared length against the
buffer. The byte layout of one array is chosen by an :class:`ArrayCodec` (``RAW`` buffers, or
``ZLIB`` compressed ones); new codecs register under a new ``Encoding`` value in the .proto.
Large arrays travel as chunks, each with its crc32, reassembled in order
(:class:`ArrayAssembler`) under a whole-stream checksum (:class:`StreamChecksum`).
"""

from __future__ import annotations

import hashlib
import struct
import sys
import zlib
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from hogwild.base.regions import rows_array
from hogwild.cluster.wire import pb
from hogwild.errors import InvalidMessage

MAX_CHUNK_BYTES = 1 << 20

_DTYPES: dict[int, np.dtype[Any]] = {
    pb.DTYPE_INT32: np.dtype("<i4"),
    pb.DTYPE_INT64: np.dtype("<i8"),
    pb.DTYPE_FLOAT32: np.dtype("<f4"),
    pb.DTYPE_FLOAT64: np.dtype("<f8"),
    pb.DTYPE_FLOAT16: np.dtype("<f2"),
}
_CODES: dict[str, int] = {dt.str: code for code, dt in _DTYPES.items()}
_LITTLE = sys.byteorder == "little"


# ------------------------------------------------------------------------- array codecs


class ArrayCodec:
    """How one array's bytes are stored in ``Array.data``; subclasses set ``encoding``."""

    encoding: ClassVar[int] = pb.ENCODING_RAW

    def pack(self, buffer: bytes) -> bytes:
        """The stored form of a little-endian buffer."""
        return buffer

    def unpack(self, data: bytes, expected_bytes: int) -> bytes:
        """The buffer back from its stored form; InvalidMessage if it cannot be."""
        return data


class RawCodec(ArrayCodec):
    """The buffer itself: fastest on a LAN or loopback."""

    encoding = pb.ENCODING_RAW


class ZlibCodec(ArrayCodec):
    """zlib level 1 on top of the buffer: fewer bytes on slow links, more CPU."""

    encoding = pb.ENCODING_ZLIB

    def __init__(self, level: int = 1) -> None:
        self.level = level

    def pack(self, buffer: bytes) -> bytes:
        return zlib.compress(buffer, self.level)

    def unpack(self, data: bytes, expected_bytes: int) -> bytes:
        inflater = zlib.decompressobj()
        try:
            # max_length bounds the memory a hostile payload can make us allocate.
            out = inflater.decompress(data, expected_bytes + 1)
        except zlib.error as exc:
            raise InvalidMessage(f"corrupt zlib payload: {exc}") from None
        if len(out) != expected_bytes or inflater.unconsumed_tail:
            raise InvalidMessage(
                f"zlib payload inflates past the declared {expected_bytes} bytes"
                if len(out) > expected_bytes or inflater.unconsumed_tail
                else f"zlib payload inflates to {len(out)} bytes, declared {expected_bytes}")
        return out


RAW = RawCodec()
ZLIB = ZlibCodec()
_CODECS: dict[int, ArrayCodec] = {RAW.encoding: RAW, ZLIB.encoding: ZLIB}


def register_codec(codec: ArrayCodec) -> None:
    """Make ``codec`` available to :func:`decode_array` under its ``encoding`` value."""
    _CODECS[codec.encoding] = codec


def encode_array(array: npt.NDArray[Any], codec: ArrayCodec = RAW) -> pb.Array:
    """A 1-D numpy array as an ``Array`` message (little-endian; one copy into bytes)."""
    return _encode_array(array, codec)[0]


def _encode_array(array: npt.NDArray[Any], codec: ArrayCodec) -> tuple[pb.Array, bytes]:
    """(message, the stored bytes): callers that checksum the bytes avoid re-reading them."""
    message = pb.Array()
    return message, fill_array(message, array, codec)


def fill_array(message: pb.Array, array: npt.NDArray[Any], codec: ArrayCodec = RAW) -> bytes:
    """Set ``message`` (an empty Array, e.g. a field of the message that carries it) to
    ``array``; returns the stored bytes. Filling a field in place spares the copy of the
    whole payload that assigning a finished Array to it makes."""
    arr = np.asarray(array)
    if arr.ndim != 1:
        raise ValueError(f"only 1-D arrays travel, got shape {arr.shape}")
    le = arr.dtype if arr.dtype.isnative and _LITTLE else arr.dtype.newbyteorder("<")
    code = _CODES.get(le.str)
    if code is None:
        raise ValueError(f"dtype {arr.dtype} has no wire type")
    stored = codec.pack(np.ascontiguousarray(arr, dtype=le).tobytes())
    message.dtype = code  # type: ignore[assignment]
    message.length = arr.shape[0]
    message.data = stored
    message.encoding = codec.encoding  # type: ignore[assignment]
    return stored


def decode_array(message: pb.Array, dtype: npt.DTypeLike, what: str,
                 max_length: int | None = None, data: bytes | None = None) -> npt.NDArray[Any]:
    """The numpy view of an ``Array`` of the expected ``dtype`` (read-only, zero-copy for RAW).

    InvalidMessage if the declared dtype differs, the codec is unknown, the length exceeds
    ``max_length``, or the buffer is not exactly ``length * itemsize`` bytes. ``data`` is
    ``message.data`` if the caller already has it (each access to it copies the bytes).
    """
    expected = np.dtype(dtype).newbyteorder("<")
    declared = _DTYPES.get(message.dtype)
    if declared is None or declared != expected:
        name = pb.DType.Name(message.dtype) if message.dtype in pb.DType.values() else message.dtype
        raise InvalidMessage(f"{what}: dtype {name}, expected {expected.name}")
    length = int(message.length)
    if max_length is not None and length > max_length:
        raise InvalidMessage(f"{what}: {length} elements, at most {max_length} allowed")
    codec = _CODECS.get(message.encoding)
    if codec is None:
        raise InvalidMessage(f"{what}: unknown encoding {message.encoding}")
    expected_bytes = length * expected.itemsize
    if data is None:
        data = message.data
    if codec is not RAW:
        data = codec.unpack(data, expected_bytes)
    if len(data) != expected_bytes:
        raise InvalidMessage(
            f"{what}: {len(data)} bytes for {length} declared {expected.name} elements "
            f"({expected_bytes} bytes expected)")
    return np.frombuffer(data, dtype=expected)


# ------------------------------------------------------------------------------ chunking


def _check_chunk_bytes(chunk_bytes: int) -> int:
    if not 8 <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise ValueError(f"chunk_bytes must be in [8, {MAX_CHUNK_BYTES}], got {chunk_bytes}")
    return chunk_bytes


def iter_array_chunks(array: npt.NDArray[Any], chunk_bytes: int,
                      codec: ArrayCodec = RAW) -> Iterator[tuple[int, pb.Array, int, bytes]]:
    """(element offset, Array, crc32 of the stored data, the stored data) for consecutive
    slices of at most ``chunk_bytes`` bytes; an empty array yields one empty chunk."""
    arr = np.asarray(array)
    per = max(1, _check_chunk_bytes(chunk_bytes) // arr.dtype.itemsize)
    n = arr.shape[0]
    for lo in range(0, max(n, 1), per):
        message, stored = _encode_array(arr[lo:lo + per], codec)
        yield lo, message, zlib.crc32(stored), stored


def alloc_array(length: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """An uninitialised 1-D array for a shard's rows as they arrive: a large one in a
    private region of small pages (base.regions.rows_array). Not a shared mapping: filling
    a fresh 120 MB one took 74 ms against 7.5 ms in a private one of huge pages
    (bench/NOTES.md)."""
    return rows_array(length, dtype)


class ArrayAssembler:
    """Rebuilds one array from chunks arriving in offset order, checking each chunk's crc32,
    dtype, and that they tile [0, length) exactly."""

    def __init__(self, name: str, dtype: npt.DTypeLike, length: int) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self.array = alloc_array(length, self.dtype)
        self.filled = 0

    def add(self, offset: int, message: pb.Array, crc: int, data: bytes | None = None) -> None:
        """Copy one chunk into place; InvalidMessage on a checksum, order or size fault.
        ``data`` is ``message.data`` if the caller already read it."""
        if data is None:
            data = message.data
        if zlib.crc32(data) != crc:
            raise InvalidMessage(f"{self.name}: chunk at offset {offset} fails its crc32")
        if offset != self.filled:
            raise InvalidMessage(
                f"{self.name}: chunk at offset {offset}, expected offset {self.filled}")
        part = decode_array(message, self.dtype, self.name,
                            max_length=self.array.shape[0] - offset, data=data)
        self.array[offset:offset + part.shape[0]] = part
        self.filled += part.shape[0]

    @property
    def complete(self) -> bool:
        return bool(self.filled == self.array.shape[0])


class StreamChecksum:
    """Whole-stream checksum over the sequence of (array, offset, length, chunk crc32).

    Each chunk's data is covered by its own crc32 (checked on receipt); this digest chains
    those crcs in stream order, so a missing, reordered, duplicated or altered chunk (even one
    whose own crc was recomputed) changes it, without a second pass over the bytes (a
    blake2b pass measured ~0.8 GB/s here, which would cap shard shipping).
    """

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.nbytes = 0

    def update(self, part: int, offset: int, length: int, crc: int) -> None:
        self._hash.update(struct.pack("<IQQI", part, offset, length, crc))
        self.nbytes += length

    def digest(self) -> bytes:
        return self._hash.digest() + struct.pack("<Q", self.nbytes)


def new_digest() -> StreamChecksum:
    """A fresh whole-stream checksum."""
    return StreamChecksum()
