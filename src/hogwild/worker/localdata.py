"""A worker's own training rows under ``shipping: local``: read, check, encode, renumber, shuffle."""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from hogwild.data.csr import CSRData
from hogwild.data.ranges import read_ranges
from hogwild.data.reorder import check_order, renumber
from hogwild.errors import DataError
from hogwild.protocol.localstream import LocalPlan

log = logging.getLogger("hogwild.worker")


def load_local_shard(plan: LocalPlan, path_override: str = "") -> CSRData:
    """The rows ``plan`` assigns to this worker, ready to train: labels mapped as the
    coordinator mapped them, features renumbered with its order, rows permuted once.

    ``path_override`` (the worker's ``local_data`` setting) reads the same file where this
    node mounts it. DataError (one line) if the file here is not the one planned."""
    t0 = time.perf_counter()
    spec = plan.spec
    if path_override:
        spec = dataclasses.replace(spec, source=path_override)
    data = read_ranges(spec, plan.ranges)
    labels = data.labels
    if plan.classes is not None:
        neg, pos = (np.float32(c) for c in plan.classes)
        bad = (labels != neg) & (labels != pos)
        if np.any(bad):
            found = float(labels[np.flatnonzero(bad)[0]])
            raise DataError(f"{spec.source}: label {found:g} is not one of the coordinator's "
                            f"classes {plan.classes[0]:g}, {plan.classes[1]:g}")
        labels = np.where(labels == pos, np.float32(1.0), np.float32(-1.0)).astype(np.float32)
    data = CSRData(data.indptr, data.indices, data.values, labels, data.n_features)
    order = check_order(plan.order, data.n_features)
    data = renumber(data, order, in_place=True)
    perm = np.random.default_rng(plan.shuffle_seed).permutation(data.n_rows)
    data = data.take(perm)
    log.info("read %s training rows (%s non-zeros) of %s from %d range(s), each checked "
             "against the coordinator's digest, in %.2fs", f"{data.n_rows:,}", f"{data.nnz:,}",
             spec.source, len(plan.ranges), time.perf_counter() - t0)
    return data
