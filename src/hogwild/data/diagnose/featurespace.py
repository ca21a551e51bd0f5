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

# Kept in model.json: the training data's most frequent features (original ids).
KEPT = 256
# The data's own most frequent features looked up among them.
LOOKED_UP = 64
# Fewer shared than this share of them: another feature space (same space: 0.78 or more).
SHARED_AT_LEAST = 0.25
# Data with fewer distinct features than this says too little to judge.
MIN_FEATURES = 16


def frequent_features(new_id_of_old: npt.ArrayLike, kept: int = KEPT) -> list[int]:
    """The original ids of the ``kept`` most frequent training features, from the frequency
    renumbering (new id 0 is the most frequent)."""
    order = np.asarray(new_id_of_old)
    return [int(i) for i in np.argsort(order, kind="stable")[:kept]]


def shared_frequent(data: CSRData, frequent: list[int],
                    looked_up: int = LOOKED_UP) -> tuple[int, int]:
    """(how many of the data's ``looked_up`` most frequent features are in ``frequent``, how
    many were looked up: fewer when the data has fewer distinct features)."""
    df = np.bincount(data.indices, minlength=data.n_features)
    present = int(np.count_nonzero(df))
    k = min(looked_up, present)
    top = np.argsort(-df, kind="stable")[:k]
    return int(np.isin(top, np.asarray(frequent, dtype=np.int64)).sum()), k


def foreign_space_warning(data: CSRData, frequent: list[int], source: str) -> str | None:
    """One warning line when ``data`` looks like it comes from another feature space than
    the model whose training data had ``frequent`` as its most frequent features."""
    shared, k = shared_frequent(data, frequent)
    if k < MIN_FEATURES or shared >= SHARED_AT_LEAST * k:
        return None
    return (f"{source}: only {shared} of its {k} most frequent features are among the "
            f"{len(frequent)} most frequent of the model's training data (data from the same "
            "feature space share most of them): was it made with the same vocabulary or "
            "feature hashing?")
