"""``shipping: local`` on the coordinator: plan the training file's ranges, keep only held-out rows.

The coordinator scans the file (hogwild.data.parts.ranges.plan_file), maps the labels, computes the
feature order from the training rows' document frequencies (so the workers renumber exactly
as the partition mode's coordinator would), and hands each worker a
:class:`pb.LocalSource` naming its ranges. Validation (and test, without ``test_data``) rows
are the rows the split hash holds out; the coordinator evaluates on them.
"""

from __future__ import annotations

import logging
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hogwild.cluster.wire import pb
from hogwild.cluster.wire.localstream import MAX_COLUMNS_JSON, local_source
from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.featurespace import check_test_space
from hogwild.data.formats.textsource import (
    TextFile,
    bundled_features,
    canonical,
    local_source_error,
)
from hogwild.data.parts.ranges import FilePlan, LocalSpec, deal, plan_file
from hogwild.data.parts.rowgroups import ParquetPlan, is_parquet, params_json, plan_groups
from hogwild.data.parts.sampleplan import (
    AUTO_SAMPLE_BYTES,
    HOLDOUT_BYTES,
    deal_by_bytes,
    plan_sampled,
)
from hogwild.data.sources import default_test_source, load_source_hashed
from hogwild.data.transform.classweights import class_counts, untrained_note
from hogwild.data.transform.labels import REGRESSION, LabelMap, label_summary
from hogwild.data.transform.reorder import order_from_counts, renumber
from hogwild.engine.job import feature_memory
from hogwild.engine.runstart import Splits
from hogwild.errors import ConfigError, DataError
from hogwild.model.losses import get_loss

log = logging.getLogger("hogwild.coordinator")


@dataclass
class LocalShipping:
    """The plan of a local-shipping run: what each worker reads, and the order it renumbers
    its features with."""

    plan: FilePlan
    spec: LocalSpec
    order: np.ndarray
    labels: LabelMap
    seed: int
    # A sampled plan: per worker place, the (rows, non-zeros) its first shipment counted;
    # until then its counts are the sample's estimates, and after it a place shipped again
    # (a rejoin) must count the same.
    counted: dict[int, tuple[int, int]] = field(default_factory=dict)

    def source(self, worker_id: int) -> pb.LocalSource:
        """The message telling ``worker_id`` what to read."""
        classes = None if self.labels.task == REGRESSION else self.labels.classes
        seeds = np.random.SeedSequence(self.seed).spawn(worker_id + 2)
        shuffle_seed = int(seeds[worker_id + 1].generate_state(1, np.uint64)[0] >> np.uint64(1))
        return local_source(self.spec, self.plan.worker_ranges(worker_id), classes=classes,
                            total_rows=self.plan.total_rows, gzip=self.plan.gzip,
                            shuffle_seed=shuffle_seed)

    def engage(self, workers: int) -> None:
        """Deal the planned ranges to ``workers`` workers instead (``engage: auto`` trains on
        fewer than were planned for): every range is read by one of them, each gets within one
        range of the others' count."""
        if workers != len(self.plan.assignment):
            dealt = (deal_by_bytes(self.plan.ranges, workers, self.seed) if self.plan.sampled
                     else deal(len(self.plan.ranges), workers, self.seed))
            self.plan = replace(self.plan, assignment=dealt)

    def train_rows(self, worker_id: int) -> int:
        if worker_id in self.counted:
            return self.counted[worker_id][0]
        return sum(r.train_rows for r in self.plan.worker_ranges(worker_id))

    def train_nnz(self, worker_id: int) -> int:
        if worker_id in self.counted:
            return self.counted[worker_id][1]
        return sum(r.train_nnz for r in self.plan.worker_ranges(worker_id))

    def count(self, worker_id: int, rows: int, nnz: int) -> None:
        """A sampled plan: what a worker place's first shipment counted."""
        self.counted.setdefault(worker_id, (rows, nnz))

    def train_shape(self) -> tuple[int, int]:
        """(rows, non-zeros) of every place's part: as counted where it was shipped, else
        as planned (a sampled plan's estimate)."""
        places = range(len(self.plan.assignment))
        return sum(self.train_rows(w) for w in places), sum(self.train_nnz(w) for w in places)

    def text_bytes(self, worker_id: int) -> int:
        """Text bytes the worker reads (gzip: inflates up to the end of its last range)."""
        ranges = self.plan.worker_ranges(worker_id)
        if self.plan.gzip:
            return max(r.byte_end for r in ranges)
        return sum(r.byte_end - r.byte_start for r in ranges)

    def describe(self) -> str:
        """The training set in one line (as hogwild.data.sources.describe)."""
        rows, nnz = self.plan.train_rows, self.plan.train_nnz
        if self.labels.task == REGRESSION or self.labels.classes is None:
            # (the scan keeps no distinct values of a real-valued target)
            labels = f"{self.plan.positive_train / max(rows, 1):.3f} of the labels above 0"
        else:
            labels = label_summary(self.plan.labels, self.plan.label_counts)
        about = "about " if self.plan.sampled else ""
        how = ("; counts estimated from a sample of its text until the workers count them"
               if self.plan.sampled else "")
        where = self.spec.source
        if self.spec.format == "parquet":  # rows from the footers: exact
            how = "; non-zeros estimated from a sample until the workers count them"
            where = f"{len({r.file for r in self.plan.ranges})} Parquet file(s) under {where}"
        return (f"{'' if self.spec.format else about}{rows:,} rows x "
                f"{int(self.order.shape[0]):,} features, {about}"
                f"{nnz:,} non-zeros ({nnz / max(rows, 1):.1f} per row), {labels} "
                f"(read by the workers from {where}; none held here{how})")

    def ranges_report(self, workers: int) -> dict[str, Any]:
        """The plan for metrics.json: the file, its row counts, and per worker its ranges as
        [first_row, rows, byte_start, byte_end] with its training rows and non-zeros (a
        sampled plan: byte ranges, their row fields 0, the rows as the workers counted)."""
        plan = self.plan
        rows, _ = self.train_shape()  # (a sampled plan: as the workers counted them)
        total = rows + plan.val.n_rows + plan.test.n_rows if plan.sampled else plan.total_rows
        return {"source": self.spec.source, "file_bytes": plan.file_size,
                "text_bytes": plan.text_bytes, "gzip": plan.gzip,
                "total_rows": total, "train_rows": rows,
                "val_rows": plan.val.n_rows, "test_rows": plan.test.n_rows,
                "holdout": self.spec.holdout, "plan_seconds": plan.seconds,
                "plan": ("footers" if self.spec.format == "parquet" else "sample") if plan.sampled else "scan",
                "sample_rows": plan.sample_rows, "windows": [list(w) for w in plan.windows],
                "format": self.spec.format or "svmlight",
                "workers": [{"worker_id": w,
                             "ranges": [[r.first_row, r.rows, r.byte_start, r.byte_end]
                                        for r in plan.worker_ranges(w)],
                             **({"row_groups": [[r.file, r.group, r.group_row, r.rows]
                                                for r in plan.worker_ranges(w)]}
                                if self.spec.format == "parquet" else {}),
                             "train_rows": self.train_rows(w), "train_nnz": self.train_nnz(w)}
                            for w in range(workers)]}


def load_local(settings: Settings) -> tuple[Splits, LocalShipping]:
    """Plan the training data for ``settings.workers`` workers and load the data the
    coordinator evaluates on. ConfigError (key ``shipping``) for a source that cannot be read
    in parts; DataError as for any load."""
    s = settings
    parquet = is_parquet(s.data)
    why = None if parquet else local_source_error(s.data)
    if why is not None:
        raise ConfigError("shipping", f"local needs `data` to be a svmlight file: {why}")
    test_spec = s.test_data or (None if parquet else default_test_source(s.data))
    test_fraction = 0.0 if test_spec else s.test_fraction
    classifier = get_loss(s.loss).is_classifier
    hashing: dict[str, Any] | None = None
    if parquet:
        planned = _plan_parquet(s, test_fraction, classifier)
        plan, hashing = planned.plan, planned.params
        source, form, columns = planned.root, "parquet", params_json(planned.params)
    else:
        source, form, columns = canonical(s.data), "", ""
        plan = _plan_text(s, source, test_fraction, classifier)
    # plan.labels are float32 values (as the rows hold them): fitted as such, the classes
    # are kept as written.
    labels = LabelMap.fit(plan.labels.astype(np.float32), classifier=classifier,
                          source=s.data, label_note=plan.label_note)
    if plan.train_rows == 0:
        raise DataError(f"no training rows left in {s.data!r} after the split")
    for w in range(s.workers):
        if not plan.worker_ranges(w) or sum(r.train_rows for r in plan.worker_ranges(w)) == 0:
            raise DataError(f"{s.data}: too few rows for {s.workers} workers (worker {w} would "
                            "get no training row)")
    val = replace(plan.val, labels=labels.encode(plan.val.labels, s.data))
    width = val.n_features
    if test_spec:
        test, _ = load_source_hashed(test_spec, n_features=s.n_features,
                                     zero_based=s.zero_based, cache=s.data_cache,
                                     hashing=hashing)
        test = replace(test, labels=labels.encode(test.labels, str(test_spec)))
        if test.n_features != width:
            if s.n_features is not None:
                raise DataError(f"test data has {test.n_features} features, training data "
                                f"{width}")
            if test.n_features > width:
                log.warning("test data %s has %d features but training data %s has %d: the "
                            "extra features get weight 0 (is the test file from the same "
                            "feature space?)", test_spec, test.n_features, s.data, width)
            width = max(width, test.n_features)
            test = test.with_n_features(width)
            val = val.with_n_features(width)
    else:
        test = replace(plan.test, labels=labels.encode(plan.test.labels, s.data))
    if test.n_rows == 0:
        raise DataError("the test set is empty: give test_data or a positive test_fraction")
    if not plan.sampled and labels.classes:  # a classifier's (regression has none)
        # A scan counted each label's training rows: a class with none is told of, as a
        # split in memory tells of it (a sample's counts are estimates, and say nothing).
        _tell_untrained(s.data, labels, plan, val, None if test_spec else test)
    df = np.zeros(width, dtype=np.int64)
    df[:plan.df.shape[0]] = plan.df
    order = order_from_counts(df)
    if test_spec:
        check_test_space(test, order, str(test_spec))
    val = renumber(val, order, in_place=True)
    test = renumber(test, order, in_place=True)
    # A sampled plan's workers train on every row of their ranges: the held-out rows are
    # the windows', which no range holds.
    spec = LocalSpec(source=source, file_size=plan.file_size, n_features=width,
                     zero_based=s.zero_based, split_seed=s.seed,
                     holdout=0.0 if plan.sampled else s.val_fraction + test_fraction,
                     text_bytes=plan.text_bytes, sampled=plan.sampled, format=form,
                     columns=columns)
    if plan.sampled and not parquet:
        _say_sample(plan, s.val_fraction + test_fraction)
    empty = CSRData(np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
                    np.zeros(0, np.float32), width)
    # The training rows stay in the file: Splits.train is empty here (see LocalShipping).
    splits = Splits(train=empty, val=val, test=test, feature_order=order, hashing=hashing,
                    labels=labels)
    return splits, LocalShipping(plan, spec, order, labels, s.seed)


def _tell_untrained(source: str, labels: LabelMap, plan: FilePlan, val: CSRData,
                    test: CSRData | None) -> None:
    """Warn of the classes a scanned plan leaves without a training row (``test``: the
    split's own test rows, None when they come from a test file)."""
    assert labels.classes is not None
    k = len(labels.classes)
    trained = np.zeros(k, dtype=np.int64)
    # as fitted: the rows' float32 values
    np.add.at(trained, labels.class_index(plan.labels.astype(np.float32), source),
              plan.label_counts)
    held = class_counts(val.labels, k)
    if test is not None:
        held = held + class_counts(test.labels, k)
    note = untrained_note(labels.classes, trained, held)
    if note is not None:
        log.warning("%s: %s", source, note)


def _plan_text(s: Settings, source: str, test_fraction: float, classifier: bool) -> FilePlan:
    """A svmlight file's plan: a scan, or a bounded sample (``local_plan``)."""
    n_features = s.n_features if s.n_features is not None else bundled_features(s.data)
    try:
        if _sampled(s, source, n_features):
            assert n_features is not None
            return plan_sampled(source, workers=s.workers, seed=s.seed,
                                val_fraction=s.val_fraction, test_fraction=test_fraction,
                                n_features=n_features, zero_based=s.zero_based,
                                classifier=classifier)
        return plan_file(source, workers=s.workers, seed=s.seed,
                         val_fraction=s.val_fraction, test_fraction=test_fraction,
                         zero_based=s.zero_based, n_features=n_features,
                         classifier=classifier, bytes_per_id=feature_memory(s, 1, 1))
    except ValueError as exc:
        key = "local_plan" if "gzip" in str(exc) else "workers"
        raise ConfigError(key, str(exc)) from None


def _plan_parquet(s: Settings, test_fraction: float, classifier: bool) -> ParquetPlan:
    """A Parquet source's plan, from its footers and a bounded sample (whatever
    ``local_plan`` says: reading every row is what the plan avoids)."""
    if s.local_plan == "scan":
        log.info("local_plan scan reads text whole; a parquet: source is planned from its "
                 "footers and a sample")
    planned = plan_groups(s.data, workers=s.workers, seed=s.seed,
                          val_fraction=s.val_fraction, test_fraction=test_fraction,
                          classifier=classifier)
    size = len(params_json(planned.params).encode())
    if size > MAX_COLUMNS_JSON:
        raise ConfigError("shipping", f"local: the column mapping fitted on the sample is "
                          f"{size:,} bytes, more than a plan carries ({MAX_COLUMNS_JSON:,}): "
                          "hash the categorical columns (a lower onehot_max) or use "
                          "shipping: partition")
    plan = planned.plan
    log.info("plan from the footers and a sample: %s held-out row(s) from the head of %d "
             "row group(s) (val_fraction + test_fraction ask %.2f%% of %s rows; at most %d "
             "MiB of them is read, so that the plan does not grow with the data); the column "
             "mapping fitted on them (one-hot values a worker meets that the sample did not "
             "store nothing)", f"{plan.val.n_rows + plan.test.n_rows:,}", len(plan.windows),
             100 * (s.val_fraction + test_fraction), f"{plan.total_rows:,}",
             HOLDOUT_BYTES >> 20)
    return planned


def _sampled(s: Settings, source: str, n_features: int | None) -> bool:
    """Whether the plan reads a bounded sample (data/parts/sampleplan.py) rather than the whole
    file (``local_plan``); ConfigError when a sample is asked for without the width."""
    if s.local_plan == "scan":
        return False
    if s.local_plan == "sample":
        if n_features is None:
            raise ConfigError("local_plan", "sample needs n_features, the width of the file's "
                              "feature space: a sample cannot see the largest feature id")
        return True
    with closing(TextFile(source)) as f:
        large = not f.gzip and f.size >= AUTO_SAMPLE_BYTES
        size = f.size
    if large and n_features is None:
        log.warning("%s: %s bytes, scanned whole to plan the workers' ranges; set n_features "
                    "(the width of its feature space) for a plan from a sample, whose cost "
                    "does not grow with the file (local_plan)", source, f"{size:,}")
    return large and n_features is not None


def _say_sample(plan: FilePlan, holdout: float) -> None:
    """The log's account of what a sampled plan holds out and estimates."""
    held = sum(b - a for a, b in plan.windows)
    if plan.windows:
        log.info("plan from a sample: %s held-out row(s) from %d window(s) of the text, %.2f%% "
                 "of its bytes (val_fraction + test_fraction ask %.2f%%; at most %d MiB is "
                 "read, so that the plan does not grow with the file); training rows "
                 "estimated at %s until the workers count them", f"{plan.sample_rows:,}",
                 len(plan.windows), 100 * held / max(plan.file_size, 1), 100 * holdout,
                 HOLDOUT_BYTES >> 20, f"{plan.train_rows:,}")
    else:
        log.info("plan from a sample of %s row(s), none held out; training rows estimated at "
                 "%s until the workers count them", f"{plan.sample_rows:,}",
                 f"{plan.train_rows:,}")
