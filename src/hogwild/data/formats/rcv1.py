"""RCV1-v2 as published by Lewis et al. (2004): lyrl2004 token-vector files plus topic qrels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hogwild.data.csr import CSRData
from hogwild.data.formats import _textparse as kp
from hogwild.data.formats.svmlight import PathLike, parse_text, read_bytes
from hogwild.errors import DataError, DataFormatError

RCV1_FEATURES = 47236


def read_qrels(path: PathLike, topic: str) -> np.ndarray:
    """Sorted unique doc ids that carry ``topic`` in a ``TOPIC DOCID 1`` qrels file (.gz ok)."""
    if not topic or any(c.isspace() for c in topic):
        raise DataError(f"bad topic name {topic!r}")
    buf = read_bytes(path)
    if not buf.flags.writeable:
        buf = buf.copy()  # one compiled variant of the kernel (writable arrays) is enough
    docids, bad = kp.find_topic_docids(buf, np.frombuffer(topic.encode(), dtype=np.uint8))
    if int(bad) >= 0:
        line = int(kp.count_newlines(buf, int(bad))) + 1
        raise DataFormatError(str(path), line, f"doc id of topic {topic} is not an integer")
    return np.unique(docids)


def read_lyrl2004(vector_paths: Sequence[PathLike], qrels_path: PathLike, *,
                  topic: str = "CCAT", n_features: int = RCV1_FEATURES) -> CSRData:
    """Rows of the given ``lyrl2004_vectors_*.dat[.gz]`` files in file order; label +1 if the
    document has ``topic`` in the qrels file, else -1. Lines are ``docid  fid:val ...`` with
    1-based feature ids."""
    if not vector_paths:
        raise DataError("read_lyrl2004 needs at least one vector file")
    parts = []
    docs = []
    for path in vector_paths:
        p = parse_text(read_bytes(path), zero_based=False, n_features=n_features,
                       source=str(path))
        ids = p.labels
        bad = np.flatnonzero((ids != np.floor(ids)) | (ids < 1))
        if bad.size:
            raise DataError(f"{path}: row {int(bad[0]) + 1}: doc id {ids[bad[0]]!r} is not a "
                            f"positive integer")
        parts.append(p)
        docs.append(ids.astype(np.int64))
    nnz_offsets = np.cumsum([0] + [q.indices.shape[0] for q in parts])
    indptr = np.concatenate([np.zeros(1, dtype=np.int64)]
                            + [q.indptr[1:] + off for q, off in zip(parts, nnz_offsets)])
    indices = np.concatenate([q.indices for q in parts])
    values = np.concatenate([q.values for q in parts])
    docids = np.concatenate(docs)
    positive = read_qrels(qrels_path, topic)
    labels = np.where(np.isin(docids, positive), 1.0, -1.0).astype(np.float32)
    return CSRData(indptr, indices, values, labels, n_features)

