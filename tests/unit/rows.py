"""A stand-in for CSRData without its checks, so that tests can hand the model bad rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Rows:
    """The fields of hogwild.data.csr.CSRData, taken as given."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    labels: np.ndarray
    n_features: int
