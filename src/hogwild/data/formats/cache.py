"""The parsed-array cache of text data files: .npy files in the user cache dir, keyed by the source.

One directory per source file, ``<cache root>/<hash of the absolute path>-<name>.hwcache/``,
holding ``indptr.npy``, ``indices.npy``, ``values.npy``, ``labels.npy`` (the rows in file
order) and ``meta.json`` (absolute path, size, mtime, zero_based, layout version, and an xxh3
checksum of each array's data). The cache root is ``cache_dir`` when given, else
``$XDG_CACHE_HOME/hogwild`` or ``~/.cache/hogwild``: nothing is written beside the user's data.
A cache whose key does not match its source (another size, mtime or zero_based, or an older
layout) is ignored and replaced; so is one whose arrays no longer match their checksums (a
flipped label or a scaled value that would still pass every structural check), with a warning
naming the file: the text is parsed again. The arrays are written while the text is parsed
(appended block by block, never held twice, hashed as they are written) and read back block by
block, so neither direction needs more memory than the result.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import xxhash

log = logging.getLogger(__name__)

CACHE_SUFFIX = ".hwcache"
# Bump when the stored layout or the parser's output changes: older caches are then ignored.
CACHE_VERSION = 4  # 3: meta.json says whether a label did not survive float32; 4: checksums
ARRAYS: dict[str, Any] = {"indptr": np.int64, "indices": np.int32, "values": np.float32,
                          "labels": np.float32}
# Every .npy header is padded to this many bytes, so the data offset is known before the
# final length is (the header is rewritten with the real length at the end).
_HEADER_BYTES = 128
# The checksum of each array's data (after its header), as meta.json names it. xxh3 hashes
# several GB/s, against the parse's tens to hundreds of MB/s of text (bench/NOTES.md).
CHECKSUM = "xxh3_64"
_HASH_CHUNK = 8 << 20


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hogwild`` or ``~/.cache/hogwild`` (read at call time)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hogwild"


def cache_path(source: Path, cache_dir: Path | None = None) -> Path:
    """The cache directory of ``source``: in ``cache_dir`` (default: the user cache dir),
    named after a hash of the source's absolute path and its file name."""
    source = Path(source)
    root = Path(cache_dir) if cache_dir is not None else user_cache_dir()
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:20]
    return root / f"{digest}-{source.name}{CACHE_SUFFIX}"


def source_key(source: Path, zero_based: bool) -> dict[str, Any]:
    """What a cache must match to stand for ``source``: path, size, mtime, id base, layout."""
    st = Path(source).stat()
    return {"version": CACHE_VERSION, "path": str(Path(source).resolve()),
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "zero_based": bool(zero_based)}


def _npy_header(dtype: Any, length: int) -> bytes:
    """A version 1.0 .npy header of exactly _HEADER_BYTES bytes for a 1-D array."""
    text = f"{{'descr': '{np.dtype(dtype).str}', 'fortran_order': False, 'shape': ({length},), }}"
    body = text.encode("latin1")
    pad = _HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:  # pragma: no cover - a 1-D header is far shorter
        raise ValueError("npy header too long")
    body += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


@dataclass(frozen=True)
class CachedArrays:
    """A fresh cache found on disk: where each array's data starts, and the sizes."""

    where: Path
    n_rows: int
    nnz: int
    max_index: int
    offsets: dict[str, int]
    label_note: str | None = None  # see hogwild.data.transform.labelcheck
    # Each array's checksum in meta.json, when find_cached left checking them to the reader
    # (empty: they were checked already).
    unchecked: Mapping[str, str] = field(default_factory=dict)

    def open(self, name: str) -> io.BufferedReader:
        return open(self.where / f"{name}.npy", "rb")


def find_cached(source: Path, where: Path, *, zero_based: bool,
                check_content: bool = True) -> CachedArrays | None:
    """The cache in ``where`` if it is complete and matches ``source`` now, else None (a
    stale, foreign or damaged cache is ignored; the rows themselves are checked as they are
    read, see hogwild.data.formats.cacheblocks). ``check_content`` False: the arrays' checksums are
    not computed here but handed on in ``unchecked``, for a reader that reads every array
    once anyway and hashes it as it goes (hogwild.data.formats.cacheblocks.load_cached): checking
    here first read the whole cache twice."""
    try:
        meta = json.loads((where / "meta.json").read_text())
        key = meta.get("key") if isinstance(meta, dict) else None
        if key != source_key(source, zero_based):
            if isinstance(key, dict) and key.get("version") != CACHE_VERSION:
                log.info("the data cache %s is of an older layout (%s, without content "
                         "checksums): parsing %s again", where, key.get("version"), source)
            return None
        checksums = meta["checksums"]
        if meta["checksum"] != CHECKSUM or not isinstance(checksums, dict):
            return None
        n_rows, nnz, max_index = int(meta["n_rows"]), int(meta["nnz"]), int(meta["max_index"])
        label_note = meta["label_note"]
        if label_note is not None and not isinstance(label_note, str):
            return None
        offsets = {}
        for name, dtype in ARRAYS.items():
            with open(where / f"{name}.npy", "rb") as f:
                version = np.lib.format.read_magic(f)
                if version != (1, 0):
                    return None
                shape, fortran, got = np.lib.format.read_array_header_1_0(f)
                length = n_rows + 1 if name == "indptr" else n_rows if name == "labels" else nnz
                if shape != (length,) or fortran or got != np.dtype(dtype):
                    return None
                offsets[name] = f.tell()
                if os.fstat(f.fileno()).st_size != offsets[name] + length * got.itemsize:
                    return None
                # The content itself: damage that keeps the shape (a label flipped, values
                # scaled) passes every check of the rows and would train silently.
                if check_content and hash_rest(f) != checksums.get(name):
                    warn_damaged(where, name, source)
                    return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.debug("ignoring unusable cache %s: %s", where, exc)
        return None
    unchecked = {} if check_content else {name: str(checksums.get(name)) for name in ARRAYS}
    return CachedArrays(where, n_rows, nnz, max_index, offsets, label_note, unchecked)


def warn_damaged(where: Path, name: str, source: Path | str) -> None:
    """Say that the array ``name`` of the cache in ``where`` does not match its checksum."""
    log.warning("the data cache %s is damaged (its data does not match the checksum in %s): "
                "parsing %s again", where / f"{name}.npy", where / "meta.json", source)


def new_hasher() -> Any:
    """A hasher of the kind meta.json's checksums are."""
    return xxhash.xxh3_64()


def hash_rest(f: io.BufferedReader) -> str:
    """The checksum of what is left in ``f`` from where it stands."""
    hasher = xxhash.xxh3_64()
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    while n := f.readinto(view):
        hasher.update(view[:n])
    return hasher.hexdigest()


class CacheWriter:
    """Appends parsed blocks (rows in file order) to a new cache; ``commit`` puts it in place
    atomically, ``abort`` (or an error) leaves nothing behind. Failing to write is logged
    and turns the writer off: a cache is an optimisation, never a reason to fail a load."""

    def __init__(self, source: Path, where: Path, *, zero_based: bool) -> None:
        self.where = where
        self.ok = True
        self.max_index = -1  # largest feature id written (set by the loader)
        self.label_note: str | None = None  # set by the loader, see hogwild.data.transform.labelcheck
        self._files: dict[str, BinaryIO] = {}
        self._hashers = {name: xxhash.xxh3_64() for name in ARRAYS}
        self._nnz = 0
        self._rows = 0
        self._tmp: Path | None = None
        try:
            self._key = source_key(source, zero_based)
            where.parent.mkdir(parents=True, exist_ok=True)
            self._tmp = Path(tempfile.mkdtemp(dir=where.parent, prefix=f".{where.name}."))
            for name in ARRAYS:
                f = open(self._tmp / f"{name}.npy", "wb")  # noqa: SIM115 - closed in commit/abort
                self._files[name] = f
                f.write(b"\0" * _HEADER_BYTES)
            self._write("indptr", np.zeros(1, dtype=np.int64))
        except OSError as exc:
            self._fail(exc)

    def _write(self, name: str, array: np.ndarray) -> None:
        """Append ``array``'s bytes to the file of ``name`` and to its checksum."""
        self._files[name].write(array.data)
        self._hashers[name].update(array.data)

    def _fail(self, exc: OSError) -> None:
        log.warning("could not write data cache %s: %s", self.where, exc)
        self.abort()

    def append(self, lengths: np.ndarray, indices: np.ndarray, values: np.ndarray,
               labels: np.ndarray) -> None:
        """Rows with these lengths, non-zeros and labels, following the rows so far."""
        if not self.ok:
            return
        try:
            ends = np.cumsum(lengths, dtype=np.int64)
            ends += self._nnz
            self._write("indptr", ends)
            self._write("indices", np.ascontiguousarray(indices, np.int32))
            self._write("values", np.ascontiguousarray(values, np.float32))
            self._write("labels", np.ascontiguousarray(labels, np.float32))
            self._nnz += int(indices.shape[0])
            self._rows += int(lengths.shape[0])
        except OSError as exc:
            self._fail(exc)

    def commit(self) -> Path | None:
        """Finish the files and move the cache into place; its path, or None if it failed."""
        if not self.ok or self._tmp is None:
            return None
        try:
            lengths = {"indptr": self._rows + 1, "indices": self._nnz, "values": self._nnz,
                       "labels": self._rows}
            for name, f in self._files.items():
                f.seek(0)
                f.write(_npy_header(ARRAYS[name], lengths[name]))
                f.flush()
                os.fsync(f.fileno())
                f.close()
            meta = {"key": self._key, "n_rows": self._rows, "nnz": self._nnz,
                    "max_index": int(self.max_index), "label_note": self.label_note,
                    "checksum": CHECKSUM,
                    "checksums": {name: h.hexdigest() for name, h in self._hashers.items()}}
            (self._tmp / "meta.json").write_text(json.dumps(meta, indent=1, allow_nan=False)
                                                 + "\n")
            # A directory cannot replace a non-empty one: move the old cache aside first.
            old = None
            if self.where.exists():
                old = Path(tempfile.mkdtemp(dir=self.where.parent, prefix=".old-"))
                os.replace(self.where, old / "cache")
            os.replace(self._tmp, self.where)
            self._tmp = None
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            return self.where
        except OSError as exc:
            self._fail(exc)
            return None

    def abort(self) -> None:
        """Drop the partial cache."""
        self.ok = False
        for f in self._files.values():
            with contextlib.suppress(OSError):
                f.close()
        self._files = {}
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
