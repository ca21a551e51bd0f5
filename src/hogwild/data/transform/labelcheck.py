"""Labels that a 32-bit float cannot hold as written, found while parsing (refused as classes).

Parsed labels are stored as float32, which keeps every integer up to 16,777,216 and every
decimal of up to 6 significant digits, but not 100000001 (it becomes 100000000, the same as
100000002): two classes would merge, or a class would be predicted under a value the data
never had. The parser reads each label as float64 first; a LabelWatch looks at those values
block by block and remembers the first one whose shortest float32 form differs from it. A
regression target loses nothing that matters that way, so only classifiers refuse it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt


def float32_as_written(value: float) -> float:
    """The shortest decimal that reads back as the float32 nearest ``value``: what a user wrote
    for a label the parser keeps as float32 (0.1, not the 0.10000000149011612 it holds)."""
    return float(str(np.float32(value)))


# Distinct inexact values looked at before the watch stops: more than a classifier's
# MAX_CLASSES means real-valued targets (refused as classes anyway), whose rounding is fine.
TRACKED = 4096


class LabelWatch:
    """The first label of a parse that float32 does not hold as written (rows in file order)."""

    def __init__(self) -> None:
        self.row: int | None = None      # 0-based data row, in file order
        self.value = 0.0
        self._seen: set[float] = set()

    def add(self, labels: npt.NDArray[np.float64], first_row: int) -> None:
        """Look at the float64 labels of data rows ``first_row, first_row + 1, ...``."""
        if self.row is not None or len(self._seen) > TRACKED or not labels.shape[0]:
            return
        narrow = labels.astype(np.float32)
        inexact = np.flatnonzero(narrow.astype(np.float64) != labels)
        if not inexact.size:  # the usual case: -1/+1, 0/1, small integers
            return
        values, first = np.unique(labels[inexact], return_index=True)
        worst: int | None = None
        for value, at in zip(values.tolist(), first.tolist(), strict=True):
            if value in self._seen:
                continue
            self._seen.add(value)
            if float32_as_written(value) != value and (worst is None or at < worst):
                worst = at
                self.value = value
            if len(self._seen) > TRACKED:
                break
        if worst is not None:
            self.row = first_row + int(inexact[worst])

    def note(self, source: str | Path) -> str | None:
        """One line naming the label and what float32 makes of it, or None."""
        if self.row is None:
            return None
        return label_note(source, self.row, self.value)


def label_note(source: str | Path, row: int, value: float) -> str:
    """``SOURCE: data row N: label X is stored as Y (32-bit float)``."""
    written = str(int(value)) if value.is_integer() else repr(value)
    stored = float(np.float32(value))
    shown = str(int(stored)) if stored.is_integer() else str(np.float32(value))
    return f"{source}: data row {row + 1:,}: label {written} is stored as {shown} (32-bit float)"


def refusal(note: str) -> str:
    """Why a classifier refuses data whose labels carry ``note``."""
    return (f"{note}: class labels must keep their value in 32 bits (integers up to "
            f"16,777,216, decimals of up to 6 significant digits), or two classes may merge; "
            f"renumber the classes (e.g. 0..K-1)")
