"""Numbers written for people: the one float format of every human line and error message."""

from __future__ import annotations

import math

# Beyond this magnitude a number is printed in scientific notation: a fixed-point loss of
# 1e300 is a 300-digit row.
FIXED_BELOW = 1e5


def number(value: float | None, digits: int = 4) -> str:
    """A float for a human line: ``digits`` decimals while short (0.0312), scientific beyond
    FIXED_BELOW (1.235e+300), ``nan`` / ``inf`` as such, ``-`` for None."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(float(value))
    if abs(value) >= FIXED_BELOW:
        return f"{value:.{max(digits - 1, 1)}e}"
    return f"{value:.{digits}f}"
