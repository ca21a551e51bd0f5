"""`hogwild train --out-of-core true`: train on a text file larger than memory, from its cache.

The file is parsed once into the parsed-array cache (hogwild.data.formats.cache: .npy files under the
user cache dir), a block at a time, without keeping the rows. Every epoch then reads the cache
back a block of about ``BLOCK_NNZ`` non-zeros at a time: the blocks in a random order, the
training rows of a block shuffled, and handed to the same trainer in the file's own feature
ids. (The in-memory job renumbers its rows once, by frequency, for the kernel's cache; here
that would be every block of every epoch, and it cost more than it saved: 1M RCV1-shaped
rows 3.9 s against 2.6 s for 3 epochs, 2M rows hashed to 2^22 features 25.8 s against 8.0 s,
the same accuracy. The frequencies are still counted, in one extra pass, for the model's
``frequent_features``.) Memory is a few
blocks plus the model and 9 bytes per row (its role and the shuffle), whatever the file size.
Validation and test rows are held out per row exactly as the in-memory split does
(``shuffle_order``) and scored by streaming the blocks again; a ``test_data`` file is
loaded into memory (it is expected to be small).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.data.diagnose.featurespace import check_test_space
from hogwild.data.formats.cache import CachedArrays, CacheWriter, cache_path, find_cached
from hogwild.data.formats.cacheblocks import cached_blocks, parse_to_cache, read_cached_indptr
from hogwild.data.sources import load_source
from hogwild.data.transform.classweights import untrained_classes
from hogwild.data.transform.labels import MULTICLASS, LabelMap
from hogwild.data.transform.reorder import count_features, order_from_counts
from hogwild.data.transform.split import shuffle_order, split_sizes
from hogwild.engine.job import (
    check_feature_memory,
    test_quality,
    train_params,
)
from hogwild.engine.trainer import EpochStats, Trainer
from hogwild.errors import ConfigError, DataError
from hogwild.model.evaluation import Metrics, evaluate
from hogwild.model.losses import get_loss
from hogwild.outputs.artifacts import RunDir
from hogwild.outputs.console import QUIET, Console
from hogwild.outputs.plotter import BackgroundPlot
from hogwild.outputs.results import finish_run
from hogwild.outputs.trainlog import TrainLog

log = logging.getLogger("hogwild.train")

TRAIN, VAL, TEST = 0, 1, 2
BLOCK_NNZ = 4 << 20  # 32 MB of indices and values per block


def ensure_cache(settings: Settings, out: TextIO) -> CachedArrays:
    """The fresh cache of the data file, parsing the text into it first if needed."""
    path = Path(settings.data).expanduser()
    if not path.is_file():
        raise ConfigError("out_of_core", f"needs a svmlight file as data, got {settings.data!r}")
    where = cache_path(path)
    found = find_cached(path, where, zero_based=settings.zero_based)
    if found is None:
        t0 = time.perf_counter()
        writer = CacheWriter(path, where, zero_based=settings.zero_based)
        try:
            rows = parse_to_cache(path, writer, zero_based=settings.zero_based)
        except BaseException:
            writer.abort()
            raise
        if writer.commit() is None:
            raise DataError(f"{path}: could not write the parsed-array cache {where}")
        print(f"parsed {rows:,} rows of {path} into the cache {where} in "
              f"{time.perf_counter() - t0:.2f}s", file=out, flush=True)
        found = find_cached(path, where, zero_based=settings.zero_based)
        if found is None:  # pragma: no cover - just written
            raise DataError(f"{path}: the cache {where} cannot be read back")
    else:
        print(f"training from the cache {where}", file=out, flush=True)
    return found


class BlockSource:
    """The cached rows, block by block, with every row's role and the features' frequency
    ranking."""

    def __init__(self, found: CachedArrays, settings: Settings, test_held_out: bool) -> None:
        self.found = found
        self.indptr = read_cached_indptr(found)
        n = found.n_rows
        self.n_features = found.max_index + 1
        if settings.n_features is not None:
            if found.max_index >= settings.n_features:
                raise DataError(f"{settings.data}: feature id {found.max_index} does not fit "
                                f"n_features={settings.n_features}")
            self.n_features = settings.n_features
        # Out of core the rows stream, but the arrays per feature id are still whole.
        check_feature_memory(settings, self.n_features)
        n_val, n_test = split_sizes(n, settings.val_fraction,
                                    settings.test_fraction if test_held_out else 0.0)
        order = shuffle_order(n, settings.seed)
        self.role = np.zeros(n, dtype=np.uint8)
        self.role[order[:n_test]] = TEST
        self.role[order[n_test:n_test + n_val]] = VAL
        del order
        self.counts = {r: int(np.count_nonzero(self.role == r)) for r in (TRAIN, VAL, TEST)}
        # The label map of the in-memory job (fitted on every label of the file, 4 bytes a row)
        with found.open("labels") as f:
            f.seek(found.offsets["labels"])
            all_labels = np.fromfile(f, dtype=np.float32, count=n)
        self.source = str(settings.data)
        self.labels = LabelMap.fit(all_labels, classifier=get_loss(settings.loss).is_classifier,
                                   source=self.source, label_note=found.label_note)
        if self.labels.classes:
            targets = self.labels.encode(all_labels, self.source)
            note = untrained_classes(self.labels.classes, targets[self.role == TRAIN], targets)
            if note is not None:
                log.warning("%s: %s", self.source, note)
            del targets
        del all_labels
        if self.labels.task == MULTICLASS:
            raise ConfigError("out_of_core", "trains binary classifiers and regression only; "
                              f"{settings.data} has {self.labels.n_classes} classes")
        self.blocks = self._block_starts()
        df = np.zeros(self.n_features, dtype=np.int64)
        for _, block, _ in self.rows_of(TRAIN):
            count_features(block.indices, df)  # in place: no model-sized array per block
        self.frequency = order_from_counts(df)  # new_id_of_old by frequency, for the model

    def _block_starts(self) -> list[int]:
        starts = [0]
        while starts[-1] < self.found.n_rows:
            r0 = starts[-1]
            r1 = int(np.searchsorted(self.indptr, self.indptr[r0] + BLOCK_NNZ,
                                     side="right")) - 1
            starts.append(min(self.found.n_rows, max(r1, r0 + 1)))
        return starts

    def rows_of(self, role: int, *, rng: np.random.Generator | None = None
                ) -> Iterator[tuple[int, CSRData, int]]:
        """(block index, rows of ``role`` in it, rows) per block, blocks in file order or, with
        ``rng``, in a random order with the rows of each block shuffled."""
        n_blocks = len(self.blocks) - 1
        ids = rng.permutation(n_blocks) if rng is not None else range(n_blocks)
        for b in ids:
            r0, r1 = self.blocks[b], self.blocks[b + 1]
            block = self._read(r0, r1)
            rows = np.flatnonzero(self.role[r0:r1] == role)
            if rng is not None:
                rng.shuffle(rows)
            part = block.take(rows)
            del block
            part = replace(part, labels=self.labels.encode(part.labels, self.source))
            yield int(b), part, int(rows.shape[0])

    def _read(self, r0: int, r1: int) -> CSRData:
        """Rows r0:r1 of the cache (one block), checked."""
        nnz = int(self.indptr[r1] - self.indptr[r0])
        for _, block in cached_blocks(self.found, nnz + 1, self.indptr, r0, r1):
            return block.with_n_features(self.n_features)
        raise DataError(f"cache {self.found.where}: rows {r0}:{r1} missing")  # pragma: no cover

    def evaluate(self, role: int, w: np.ndarray, loss: str) -> Metrics:
        """Loss and accuracy of ``w`` over every row of ``role``, streamed block by block."""
        n = 0
        loss_sum = 0.0
        correct = 0.0
        scored = 0
        for _, part, rows in self.rows_of(role):
            if not rows:
                continue
            m = evaluate(part, w, loss)
            n += m.n
            loss_sum += m.loss * m.n
            if m.accuracy is not None:
                correct += m.accuracy * m.n
                scored += m.n
        return Metrics(loss=loss_sum / n if n else 0.0,
                       accuracy=correct / scored if scored else None, n=n)


def open_data(settings: Settings, out: TextIO) -> tuple[BlockSource, CSRData | None]:
    """The cache as a block source, and the test file's rows if one is given."""
    found = ensure_cache(settings, out)
    test = None
    if settings.test_data:
        test = load_source(settings.test_data, n_features=settings.n_features,
                           zero_based=settings.zero_based, cache=settings.data_cache)
    source = BlockSource(found, settings, test_held_out=test is None)
    if test is not None:
        if test.n_features > source.n_features:
            if settings.n_features is not None:
                raise DataError(f"test data has {test.n_features} features, training data "
                                f"{source.n_features}")
            # features only the test file has never get a weight update: ranked last
            source.n_features = test.n_features
            source.frequency = np.concatenate([source.frequency, np.arange(
                source.frequency.shape[0], test.n_features, dtype=np.int32)])
        test = replace(test, labels=source.labels.encode(test.labels, str(settings.test_data)))
        test = test.with_n_features(source.n_features)
        check_test_space(test, source.frequency, str(settings.test_data))
    if source.counts[TRAIN] == 0:
        raise DataError(f"no training rows left in {settings.data!r} after the split")
    return source, test


def train_job(settings: Settings, console: Console, started: float,
              plot: BackgroundPlot, run: RunDir) -> dict[str, Any]:
    """`hogwild train` with ``out_of_core: true``: the same rows, outputs and stopping rules
    as the in-memory job, the data streamed from the cache every epoch; the outputs go to
    ``run``'s directory, published once they are all written."""
    if settings.model != "linear":
        raise ConfigError("out_of_core", f"trains the linear model only, not {settings.model!r}")
    # (-q: the cache's own lines are not the result either)
    source, test_rows = open_data(settings, console.out if console.level > QUIET
                                  else io.StringIO())
    loaded = time.perf_counter()
    c = source.counts
    console.say(f"data: {source.found.n_rows:,} rows x {source.n_features:,} features, "
          f"{source.found.nnz:,} non-zeros, out of core: {len(source.blocks) - 1} block(s) of "
          f"<= {BLOCK_NNZ:,} non-zeros; train {c[TRAIN]:,} rows, validation {c[VAL]:,}, "
          f"test {test_rows.n_rows if test_rows is not None else c[TEST]:,}")
    console.say(f"loaded in {loaded - started:.2f}s; training {settings.loss} with "
                f"{settings.threads} {settings.trainer} thread(s) for up to {settings.epochs} "
                "epochs")
    trainer = Trainer(source.n_features, train_params(settings))
    # The same epochs and end as the in-memory job: epoch-0 row, divergence check, history
    # on disk, TensorBoard, progress rows, stop rules, the model kept and the outputs.
    record = TrainLog(settings, console, run.path, run.name, c[TRAIN])
    loop = record.fit_loop(trainer.w, lambda w: source.evaluate(VAL, w, settings.loss)
                           if c[VAL] else None)
    loop.begin()
    loop.run(lambda epoch: run_epoch(source, trainer, epoch, settings.seed))
    return finish_run(
        settings, loop, record, run, plot,
        test=lambda w: (evaluate(test_rows, w, settings.loss) if test_rows is not None
                        else source.evaluate(TEST, w, settings.loss)),
        quality=lambda w: ({} if test_rows is None or not test_rows.n_rows else test_quality(
            test_rows, w, settings.loss, None, source.labels.task, source.labels.classes)),
        fields={"train_rows": c[TRAIN], "test_rows": (c[TEST] if test_rows is None
                                                      else test_rows.n_rows),
                "n_features": source.n_features, "out_of_core": True},
        labels=source.labels, feature_order=None, frequent_order=source.frequency,
        started=started, loaded=loaded,
        title=f"hogwild train (out of core): {settings.data}")


def run_epoch(source: BlockSource, trainer: Trainer, epoch: int, seed: int) -> EpochStats:
    """One pass over the training rows, block by block (blocks in a random order)."""
    rng = np.random.default_rng([seed, epoch])
    began = time.perf_counter()
    loss_sum = 0.0
    examples = 0
    for _, part, rows in source.rows_of(TRAIN, rng=rng):
        if not rows:
            continue
        stats = trainer.fit_epoch(part, epoch)
        loss_sum += stats.train_loss * stats.examples
        examples += stats.examples
    return EpochStats(epoch=epoch, seconds=time.perf_counter() - began,
                      train_loss=loss_sum / examples if examples else 0.0, examples=examples)
