"""A worker's own training rows under ``shipping: local``: read, check, encode, renumber, shuffle."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hogwild.cluster.wire.localstream import LocalPlan
from hogwild.data.csr import CSRData, concat_rows
from hogwild.data.formats.placement import permuted
from hogwild.data.parts.ranges import LocalSpec, read_ranges
from hogwild.data.parts.rowgroups import params_of, read_pieces
from hogwild.data.spill import DiskParts
from hogwild.data.transform.reorder import check_order, renumber
from hogwild.errors import DataError

log = logging.getLogger("hogwild.worker")

# Text read per parsed block out of core: a quarter of the in-memory reader's, since each
# block is held (parsed, then sorted by bucket) beside the rest of the worker's memory.
SPILL_BLOCK_BYTES = 4 << 20


def load_local_shard(plan: LocalPlan, path_override: str = "",
                     spill_to: Path | None = None) -> CSRData:
    """The rows ``plan`` assigns to this worker, ready to train: labels mapped as the
    coordinator mapped them, features renumbered with its order, rows permuted once.

    ``path_override`` (the worker's ``local_data`` setting) reads the same file where this
    node mounts it. ``spill_to`` (out of core): the rows are written to a private directory
    under it, shuffled there (data/spill.py: a two-pass external shuffle) and
    memory-mapped, instead of permuted in memory. DataError (one line) if the file here is
    not the one planned."""
    t0 = time.perf_counter()
    spec = plan.spec
    if path_override:
        spec = dataclasses.replace(spec, source=path_override)
    order = check_order(plan.order, spec.n_features)

    def prepare(data: CSRData) -> CSRData:
        data = CSRData(data.indptr, data.indices, data.values,
                       _mapped_labels(data.labels, plan.classes, spec.source), data.n_features,
                       None, data.weights)
        return renumber(data, order, in_place=True)

    if spec.format == "parquet":
        data = _parquet_rows(spec, plan, prepare, spill_to)
        where = "in memory" if spill_to is None else \
            f"out of core (mapped from disk under {spill_to})"
    elif spill_to is None:
        data = prepare(read_ranges(spec, plan.ranges))
        data = permuted(data, plan.shuffle_seed)
        where = "in memory"
    else:
        sink = DiskParts(spill_to, spec.n_features, prepare, plan.shuffle_seed,
                         expected_nnz=sum(r.train_nnz for r in plan.ranges))
        try:
            data = read_ranges(spec, plan.ranges, block_bytes=SPILL_BLOCK_BYTES, sink=sink)
        except BaseException:
            sink.abort()
            raise
        where = f"out of core (mapped from disk under {spill_to})"
    log.info("read %s training rows (%s non-zeros) of %s from %d range(s), each checked "
             "against the coordinator's digest, in %.2fs, %s", f"{data.n_rows:,}",
             f"{data.nnz:,}", spec.source, len(plan.ranges), time.perf_counter() - t0, where)
    return data


def _parquet_rows(spec: LocalSpec, plan: LocalPlan, prepare: Callable[[CSRData], CSRData],
                  spill_to: Path | None) -> CSRData:
    """A Parquet plan's pieces, encoded with the shipped column mapping: permuted in
    memory, or (``spill_to``) shuffled on disk as the text's rows are."""
    params = params_of(spec.columns)
    expected = sum(r.train_nnz for r in plan.ranges)
    if spill_to is None:
        # Each piece copied as it is read (its rows exact, its non-zeros estimated).
        parts = (_labelled(p, spec.source) for p in read_pieces(spec.source, plan.ranges, params))
        data = prepare(concat_rows(parts, spec.n_features, sum(r.train_rows for r in plan.ranges),
                                   expected))
        return permuted(data, plan.shuffle_seed)
    sink = DiskParts(spill_to, spec.n_features, prepare, plan.shuffle_seed,
                     expected_nnz=expected)
    try:
        for p in read_pieces(spec.source, plan.ranges, params):
            p = _labelled(p, spec.source)
            if p.weights is not None:
                raise DataError(f"{spec.source}: rows with a weight column are trained in "
                                "memory only (worker out_of_core keeps no weights)")
            sink.add(p.indptr, p.indices, p.values, p.labels,
                     np.ones(p.n_rows, dtype=np.bool_))
        return sink.build(spec.n_features)
    except BaseException:
        sink.abort()
        raise


def _labelled(data: CSRData, source: str) -> CSRData:
    """``data``, DataError where a row has no label (the label column missing or null)."""
    bad = ~np.isfinite(data.labels)
    if np.any(bad):
        raise DataError(f"{source}: {int(np.count_nonzero(bad)):,} row(s) without a label "
                        "(is the label column in every file?)")
    return data


def _mapped_labels(labels: np.ndarray, classes: tuple[float, ...] | None,
                   source: str) -> np.ndarray:
    """The coordinator's two classes as -1/+1 (None: labels as read, a regression target);
    DataError naming the first label that is neither."""
    if classes is None:
        return labels
    neg, pos = (np.float32(c) for c in classes)
    bad = (labels != neg) & (labels != pos)
    if np.any(bad):
        found = float(labels[np.flatnonzero(bad)[0]])
        raise DataError(f"{source}: label {found:g} is not one of the coordinator's "
                        f"classes {classes[0]:g}, {classes[1]:g}")
    return np.where(labels == pos, np.float32(1.0), np.float32(-1.0)).astype(np.float32)
