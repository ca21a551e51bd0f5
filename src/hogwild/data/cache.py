"""A parsed-array cache for text data files: one uncompressed .npz keyed by the source's stat."""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from pathlib import Path

import numpy as np

from hogwild.artifacts import atomic_open
from hogwild.data.csr import CSRData
from hogwild.errors import DataError

log = logging.getLogger(__name__)

CACHE_SUFFIX = ".hwcache.npz"
# Bump when the stored layout or the parser's output changes: older caches are then ignored.
CACHE_VERSION = 1
_KEYS = ("indptr", "indices", "values", "labels", "meta")


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hogwild`` or ``~/.cache/hogwild`` (read at call time)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hogwild"


def cache_path(source: Path, cache_dir: Path | None = None) -> Path:
    """Where the cache of ``source`` lives.

    Beside the source as ``<name>.hwcache.npz`` when its directory is writable and no
    ``cache_dir`` is given; otherwise in ``cache_dir`` (default: the user cache dir) under a
    hash of the source's absolute path.
    """
    source = Path(source)
    if cache_dir is None and os.access(source.parent, os.W_OK):
        return source.with_name(source.name + CACHE_SUFFIX)
    root = Path(cache_dir) if cache_dir is not None else user_cache_dir()
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:20]
    return root / f"{digest}-{source.name}{CACHE_SUFFIX}"


def _key(source: Path, zero_based: bool) -> np.ndarray:
    st = source.stat()
    return np.array([CACHE_VERSION, st.st_size, st.st_mtime_ns, int(zero_based)], dtype=np.int64)


def load_cached(source: Path, where: Path, *, zero_based: bool) -> CSRData | None:
    """The cached arrays of ``source`` if ``where`` holds a fresh cache, else None.

    A stale (other size, mtime or zero_based), foreign or unreadable cache yields None.
    The arrays are checked structurally before they are handed out: a damaged cache must
    not reach a compiled kernel.
    """
    try:
        with np.load(where, allow_pickle=False) as z:
            if set(z.files) != set(_KEYS):
                return None
            meta = z["meta"]
            key = _key(source, zero_based)
            if meta.shape != (5,) or not np.array_equal(meta[:4], key):
                return None
            data = CSRData(z["indptr"], z["indices"], z["values"], z["labels"], int(meta[4]))
        data.validate()
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, DataError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.debug("ignoring unusable cache %s: %s", where, exc)
        return None
    return data


def save_cached(source: Path, where: Path, data: CSRData, *, zero_based: bool) -> bool:
    """Store ``data`` as the cache of ``source`` atomically; False (logged) if it cannot."""
    try:
        meta = np.concatenate([_key(source, zero_based), [data.n_features]]).astype(np.int64)
        with atomic_open(where) as f:
            np.savez(f, indptr=data.indptr, indices=data.indices, values=data.values,
                     labels=data.labels, meta=meta)
        return True
    except OSError as exc:
        log.warning("could not write data cache %s: %s", where, exc)
        return False
