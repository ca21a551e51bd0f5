"""Byte spans of a text file: read parsed and named by line, and their digests (per-MiB chunks, the text around a range's ends)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import xxhash

from hogwild.data._threads import Runner, run_parallel
from hogwild.data.formats.blockparse import ParsedText
from hogwild.data.formats.svmlight import parse_text
from hogwild.data.formats.textsource import TextFile
from hogwild.errors import DataFormatError

# Bytes of text per digest chunk: a worker reads at most this much more than its range on
# either side to check it; the coordinator keeps 16 bytes per chunk.
DIGEST_CHUNK = 1 << 20
# A plan from a sample checks each range by the text this many bytes either side of each
# of its two ends (what the coordinator read anyway to cut it at a line start).
END_BYTES = 4096
# Text read at a time while looking for a line start or counting lines.
_STEP = 1 << 20


def _chunk_hasher() -> Any:
    """The digest of a chunk of text, and of a range's chunk digests: xxh3-128. It only has to
    tell an accidentally different file (a worker holds its file: no digest keeps it honest),
    and at 8 GB/s here against blake2b's 0.7 it no longer costs a quarter of the scan."""
    return xxhash.xxh3_128()


class ChunkDigests:
    """xxh3-128 of each DIGEST_CHUNK bytes of a text (the last chunk may be shorter), fed
    the text in order from ``start``, a chunk start. A range's digest is the digest of the
    chunk digests it overlaps (:func:`range_digest`), so the coordinator hashes the file once,
    before it knows where the ranges will be."""

    def __init__(self, start: int = 0, chunk: int = DIGEST_CHUNK) -> None:
        if start % chunk:
            raise ValueError(f"chunk digests start at a chunk start, not {start}")
        self.chunk = chunk
        self.filled = 0
        self.hasher = _chunk_hasher()
        self.out = bytearray()

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        i, n = 0, len(view)
        while i < n:  # one step per chunk boundary (a MiB), not per byte
            take = min(n - i, self.chunk - self.filled)
            self.hasher.update(view[i:i + take])
            self.filled += take
            i += take
            if self.filled == self.chunk:
                self.out += self.hasher.digest()
                self.hasher = _chunk_hasher()
                self.filled = 0

    def finish(self) -> bytes:
        """Every chunk digest, the last (short) chunk included."""
        if self.filled:
            self.out += self.hasher.digest()
            self.hasher = _chunk_hasher()
            self.filled = 0
        return bytes(self.out)


def chunk_span(byte_start: int, byte_end: int, chunk: int = DIGEST_CHUNK) -> tuple[int, int]:
    """The chunks (first, past the last) a range of text bytes overlaps."""
    return byte_start // chunk, -(-byte_end // chunk)


def range_digest(chunk_digests: bytes) -> bytes:
    """The digest of a range: xxh3-128 over the digests of the chunks it overlaps."""
    h = _chunk_hasher()
    h.update(chunk_digests)
    return bytes(h.digest())


class _Collect:
    """A digest stand-in that keeps the bytes fed to it."""

    def __init__(self) -> None:
        self.data = bytearray()

    def update(self, view: Any) -> None:
        self.data += view


def text_at(f: TextFile, start: int, stop: int) -> bytes:
    """The text bytes ``[start, stop)`` (fewer at the end of the text)."""
    got = _Collect()
    f.skim(max(0, start), stop, got)
    return bytes(got.data)


def ends_digest(f: TextFile, byte_start: int, byte_end: int) -> bytes:
    """xxh3-128 of the text END_BYTES either side of a range's start and of its end: a
    worker given a plan from a sample checks its range by these, and by the file's size."""
    h = _chunk_hasher()
    for at in (byte_start, byte_end):
        h.update(text_at(f, at - END_BYTES, at + END_BYTES))
    return bytes(h.digest())


def line_start(f: TextFile, offset: int, size: int) -> int:
    """The first line start at or after ``offset`` (``size``, the text's length, if no line
    starts there): a byte range cut there holds whole lines."""
    if offset <= 0:
        return 0
    at = offset - 1  # a line starts at `offset` when the byte before it ends a line
    while at < size:
        chunk = np.frombuffer(text_at(f, at, min(size, at + _STEP)), dtype=np.uint8)
        if chunk.shape[0] == 0:
            break
        hits = np.flatnonzero(chunk == 10)
        if hits.shape[0]:
            return at + int(hits[0]) + 1
        at += int(chunk.shape[0])
    return size


def line_number(f: TextFile, offset: int) -> int:
    """The 1-based line of the text byte at ``offset`` (counts the newlines before it: read
    only to name a bad line)."""

    class _Count:
        lines = 0

        def update(self, view: Any) -> None:
            self.lines += int(np.count_nonzero(np.frombuffer(view, dtype=np.uint8) == 10))

    count = _Count()
    f.skim(0, offset, count)
    return count.lines + 1


def parsed_span(f: TextFile, start: int, stop: int, *, zero_based: bool, n_features: int,
                threads: int, block_bytes: int,
                run: Runner = run_parallel) -> Iterator[ParsedText]:
    """The parsed blocks of the text ``[start, stop)`` (line starts); a bad line is named by
    its line in the file (counted then: a byte range does not know where its lines are)."""
    at = start
    for block, real in f.blocks(start, stop, block_bytes):
        try:
            yield parse_text(block, zero_based=zero_based, n_features=n_features,
                             threads=threads, source=f.name, run=run)
        except DataFormatError as exc:
            message = str(exc)[len(f"{exc.path}:{exc.line}: "):]
            raise DataFormatError(f.name, line_number(f, at) + exc.line - 1, message) from None
        at += real
