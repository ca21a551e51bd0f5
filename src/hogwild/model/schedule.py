"""The step-size schedules the settings name, as the kernels' (schedule code, lr0, power, offset)."""

from __future__ import annotations

from hogwild.config import SCHEDULES as SCHEDULE_NAMES
from hogwild.model import kernels

# The kernel code of each schedule the settings name (see kernel_schedule: only constant
# steps without a decay in t; inverse is invscaling with its own lr0, power and offset).
SCHEDULES: dict[str, int] = {name: kernels.CONSTANT if name == "constant" else kernels.INVSCALING
                             for name in SCHEDULE_NAMES}


def kernel_schedule(name: str, learning_rate: float, lr_decay: float, power_t: float,
                    epoch: int, epoch_rows: int) -> tuple[int, float, float, float]:
    """``(schedule code, lr0, power_t, t offset)`` for the kernels, whose step counter ``t``
    is 1 + the examples seen so far (+ the offset) and whose step is lr0 (constant) or
    lr0 / t ** power_t (invscaling).

    * ``inverse``: learning_rate / (1 + examples seen / epoch_rows), i.e. the rate divided by
      1 + the epochs done, decaying with every example (lr0 = learning_rate x epoch_rows over
      t offset by epoch_rows - 1, power 1). The SGD step of Bottou and of scikit-learn's
      ``optimal`` schedule, measured in epochs so that it does not depend on the data size.
    * ``constant``: learning_rate x lr_decay ** epoch, fixed within an epoch.
    * ``invscaling``: learning_rate / t ** power_t, as in scikit-learn.
    """
    if name == "constant":
        return kernels.CONSTANT, learning_rate * lr_decay ** epoch, power_t, 0.0
    if name == "invscaling":
        return kernels.INVSCALING, learning_rate, power_t, 0.0
    rows = float(max(epoch_rows, 1))
    return kernels.INVSCALING, learning_rate * rows, 1.0, rows - 1.0


# The longest horizon stream_horizon gives (l2 = 0: the rate stays learning_rate for 2^40
# examples, i.e. constant), small enough for the kernels' float64 step counter.
_LONGEST_HORIZON = 1 << 40


def stream_horizon(learning_rate: float, l2: float) -> int:
    """Rows per "epoch" of a stream whose length is unknown (partial_fit without an epoch
    length): 1 / (learning_rate * l2), so that the inverse schedule's step
    learning_rate / (1 + examples seen / horizon) is 1 / (l2 (t + t0)), t0 = 1 /
    (learning_rate * l2): the step of Bottou's SGD and of scikit-learn's ``optimal``
    schedule for an L2-regularised loss, which needs no epoch length."""
    if l2 <= 0.0 or learning_rate <= 0.0:
        return _LONGEST_HORIZON
    return int(min(max(round(1.0 / (learning_rate * l2)), 1), _LONGEST_HORIZON))
