"""Loss functions of the linear models: tiny classes with a numeric code the kernels switch on."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt

# The codes are the only thing the compiled kernels see (kernels.py mirrors them as scalar code).
HINGE = 0
LOGISTIC = 1
SQUARED = 2

FloatArray = npt.NDArray[np.float64]


class Loss:
    """A loss l(margin, y) with its derivative in the margin; vectorised, for Python-side use."""

    name: ClassVar[str] = ""
    code: ClassVar[int] = -1
    is_classifier: ClassVar[bool] = True

    def value(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        """The loss at each (margin, y) pair."""
        raise NotImplementedError

    def dloss(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        """d loss / d margin at each (margin, y) pair."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _pair(margin: npt.ArrayLike, y: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    return np.asarray(margin, dtype=np.float64), np.asarray(y, dtype=np.float64)


class Hinge(Loss):
    """max(0, 1 - y m): the SVM loss of the HOGWILD! paper; labels are +-1."""

    name = "hinge"
    code = HINGE
    is_classifier = True

    def value(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        m, t = _pair(margin, y)
        return np.maximum(0.0, 1.0 - t * m)

    def dloss(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        # The subgradient at the kink y m == 1 is taken as 0, as the kernels do.
        m, t = _pair(margin, y)
        return np.where(t * m < 1.0, -t, 0.0)


class Logistic(Loss):
    """log(1 + exp(-y m)); labels are +-1."""

    name = "logistic"
    code = LOGISTIC
    is_classifier = True

    def value(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        m, t = _pair(margin, y)
        # logaddexp(0, -z) never overflows, unlike log1p(exp(-z)) for very negative z.
        return np.logaddexp(0.0, -t * m)

    def dloss(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        m, t = _pair(margin, y)
        z = t * m
        # -y * sigmoid(-z), written so that exp() only ever sees a non-positive argument.
        e = np.exp(-np.abs(z))
        sig_neg = np.where(z >= 0.0, e / (1.0 + e), 1.0 / (1.0 + e))
        return -t * sig_neg


class Squared(Loss):
    """0.5 (m - y)^2: least-squares regression."""

    name = "squared"
    code = SQUARED
    is_classifier = False

    def value(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        m, t = _pair(margin, y)
        return 0.5 * (m - t) ** 2

    def dloss(self, margin: npt.ArrayLike, y: npt.ArrayLike) -> FloatArray:
        m, t = _pair(margin, y)
        return m - t


_BY_NAME: dict[str, type[Loss]] = {cls.name: cls for cls in (Hinge, Logistic, Squared)}

LOSS_NAMES: tuple[str, ...] = tuple(_BY_NAME)


def get_loss(name: str) -> Loss:
    """The loss called ``name`` (hinge, logistic, squared); ValueError for anything else."""
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ValueError(
            f"unknown loss {name!r}; expected one of {', '.join(LOSS_NAMES)}"
        ) from None
