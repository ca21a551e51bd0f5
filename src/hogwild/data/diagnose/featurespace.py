"""Whether data shares a model's feature space: the model's most frequent training features
against the data's own.

Two files made with the same vocabulary or hashing have nearly the same most frequent
features; files from two spaces share almost none, whatever their ids' ranges. Measured on
the shared data sets (the training file's 256 most frequent ids against another file's 64):
0.98-1.00 of them shared between a training file and its own test file (SpamAssassin,
Reuters, RCV1 subset, SST-2; 0.78 for a 50-row slice), 0.00-0.02 between files of different
sets, RCV1 in two id schemes included.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hogwild.data.csr import CSRData
from hogwild.errors import DataError

# Kept in model.json: the training data's most frequent features (original ids).
KEPT = 256
# The data's own most frequent features looked up among them.
LOOKED_UP = 64
# Fewer shared than this share of them: another feature space (same space: 0.78 or more).
SHARED_AT_LEAST = 0.25
# Data with fewer distinct features than this says too little to judge.
MIN_FEATURES = 16
# The data's looked-up features are its frequent ones only where the least frequent of them
# is in at least this many times as many rows as a feature on average: measured 5.8-18.8 on
# the shared sets (3.9 for a 50-row slice), 1.1-1.7 on data that uses every feature evenly,
# whose most frequent features are a draw that says nothing about its space.
MIN_LEAD = 3.0


def frequent_features(new_id_of_old: npt.ArrayLike, kept: int = KEPT) -> list[int]:
    """The original ids of the ``kept`` most frequent training features, from the frequency
    renumbering (new id 0 is the most frequent)."""
    order = np.asarray(new_id_of_old)
    return [int(i) for i in np.argsort(order, kind="stable")[:kept]]


def shared_frequent(data: CSRData, frequent: list[int],
                    looked_up: int = LOOKED_UP) -> tuple[int, int]:
    """(how many of the data's ``looked_up`` most frequent features are in ``frequent``, how
    many were looked up: fewer when the data has fewer distinct features)."""
    shared, k, _ = _shared(data, frequent, looked_up)
    return shared, k


def _shared(data: CSRData, frequent: list[int], looked_up: int) -> tuple[int, int, bool]:
    """shared_frequent, and whether the features looked up stand out as the data's frequent
    ones (see MIN_LEAD; all of its features, when it has no more than ``looked_up``)."""
    df = np.bincount(data.indices, minlength=data.n_features)
    present = int(np.count_nonzero(df))
    k = min(looked_up, present)
    top = np.argsort(-df, kind="stable")[:k]
    stands_out = present <= looked_up or (
        k > 0 and float(df[top[-1]]) >= MIN_LEAD * float(data.nnz) / present)
    return int(np.isin(top, np.asarray(frequent, dtype=np.int64)).sum()), k, stands_out


def foreign_space_warning(data: CSRData, frequent: list[int], source: str) -> str | None:
    """One line when ``data`` looks like it comes from another feature space than the model
    whose training data had ``frequent`` as its most frequent features; None when it shares
    them, or says too little to judge (too few distinct features, or no frequent ones)."""
    shared, k, stands_out = _shared(data, frequent, LOOKED_UP)
    if k < MIN_FEATURES or not stands_out or shared >= SHARED_AT_LEAST * k:
        return None
    return (f"{source}: only {shared} of its {k} most frequent features are among the "
            f"{len(frequent)} most frequent of the model's training data (data from the same "
            "feature space share most of them): was it made with the same vocabulary or "
            "feature hashing?")


def check_test_space(test: CSRData, new_id_of_old: npt.ArrayLike, source: str) -> None:
    """Refuse a test file that looks like another feature space than the training rows
    ranked by ``new_id_of_old`` (their frequency order, original ids): the figures a run
    reports on it would mean nothing. DataError with the finding; nothing if it fits."""
    line = foreign_space_warning(test, frequent_features(new_id_of_old), source)
    if line is not None:
        raise DataError(f"{line} Not used as the test set: its figures would mean nothing. "
                        "Give a test file made the same way as the training data, or none "
                        "(test_fraction then holds out training rows).")
