"""The estimators' own options, checked and applied: sample and class weights, partial_fit's
epoch length, and the mean of the iterates of averaged SGD."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.validation import _check_sample_weight

from hogwild.model.kernels import averaged
from hogwild.model.schedule import stream_horizon
from hogwild.settings.rules import BALANCED, parse_class_weight

F64 = npt.NDArray[np.float64]


def sample_weights(name: str, sample_weight: Any, X: Any) -> F64 | None:
    """``sample_weight`` as one float64 per row of X (None: unweighted); ValueError naming
    it when it has another length or a value that is not finite and >= 0."""
    if sample_weight is None:
        return None
    # scikit-learn's check: one number per row (NaN and inf refused there).
    sw: F64 = _check_sample_weight(sample_weight, X, dtype=np.float64)
    bad = ~np.isfinite(sw) | (sw < 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{name}: sample_weight must be finite and >= 0; row {row} has "
                         f"{sw[row]}")
    return sw


def row_weights(name: str, class_weight: Any, classes: npt.NDArray[Any], y: Any,
                sw: F64 | None, streaming: bool) -> F64 | None:
    """Each row's weight: its sample weight ``sw`` times its class's weight (class_weight as
    scikit-learn defines it: None, "balanced" or {label: weight}; the setting's text form
    ``1:2.0,-1:1.0`` is read too). None when neither is given."""
    spec = class_weight
    if isinstance(spec, str) and spec != BALANCED:
        try:
            spec = parse_class_weight(spec)
        except ValueError as exc:
            raise ValueError(f"{name}: class_weight {exc}, got {spec!r}") from None
    if spec is None:
        return sw
    if spec == BALANCED and streaming:
        raise ValueError(f"{name}: class_weight='balanced' needs the class counts of all the "
                         "data, which partial_fit does not see: give class_weight="
                         "compute_class_weight('balanced', classes=..., y=...) of "
                         "scikit-learn as a dict")
    try:
        per_class = compute_class_weight(spec, classes=classes, y=y)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: class_weight {spec!r}: {exc}") from None
    rows: F64 = per_class[np.searchsorted(classes, y)]
    return rows if sw is None else rows * sw


def stream_epoch_rows(name: str, epoch_rows: Any, fitted_rows: int, learning_rate: float,
                      l2: float) -> int:
    """Rows per epoch of partial_fit's schedule: ``epoch_rows``, else the rows of the last
    fit (``fitted_rows``, 0: none), else the stream's horizon (schedule.stream_horizon)."""
    if epoch_rows is None:
        return fitted_rows or stream_horizon(learning_rate, l2)
    if isinstance(epoch_rows, bool) or not isinstance(epoch_rows, (int, np.integer)) or \
            epoch_rows < 1:
        raise ValueError(f"{name}: epoch_rows must be an integer >= 1 or None, got "
                         f"{epoch_rows!r}")
    return int(epoch_rows)


def check_average(name: str, average: Any, trainer: str, batch_size: int, device: str) -> bool:
    """Whether averaged SGD is on; ValueError when ``average`` is not a bool or the steps
    are not per example on the CPU."""
    if not isinstance(average, (bool, np.bool_)):
        # ValueError, as scikit-learn's parameter checks (and the others here) raise.
        raise ValueError(  # noqa: TRY004
            f"{name}: average must be True or False, got {average!r}")
    if average and (trainer == "syncsgd" or batch_size != 1 or device != "cpu"):
        raise ValueError(f"{name}: average=True needs per-example steps on the CPU "
                         f"(batch_size 1, trainer not syncsgd, device cpu)")
    return bool(average)


def mean_of_iterates(w: F64, w0: F64, sums: F64, first_t: float, end_t: float) -> F64:
    """The mean of the iterates of steps ``first_t`` .. ``end_t - 1`` (step counters) from
    ``w0``, given the last iterate ``w`` and the kernels' averaging sum (each change times
    its step counter, which is its index in the average plus ``first_t - 1``)."""
    shift = first_t - 1.0
    return averaged(w, w0, sums - shift * (w - w0), end_t - first_t)
