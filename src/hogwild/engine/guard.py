"""Acting on a validation curve that swings: a tighter staleness bound and a smaller step.

A cluster run whose validation accuracy falls well below the best it reached is not
converging the way it should: summed deltas overshoot (too many workers stepping from too
old a point) or fast workers run ahead of slow ones. The best model is kept whatever
happens (StopRules), but the rest of the run would be spent wandering. The guard watches
the curve the coordinator (or the simulator) evaluates and, on a swing, answers with an
:class:`Adjustment` every worker applies from its next round on:

* async with a staleness bound above 1 (or none): the bound drops to 1, so no worker
  trains on a model more than one round behind its peers';
* every time: the step size is halved (cumulatively), which shrinks the overshoot of a
  sum of W deltas as averaging would, but without switching every worker's combine rule
  at the same round, which no message can guarantee.

A drop counts as a swing only when it is larger than ``tolerance`` accuracy points and
than three standard errors of the validation accuracy (a small validation set moves by a
few points between two evaluations of nearly the same model); without an accuracy (a
regression loss) a validation loss 25% above the best one is. After an adjustment the next
``cooldown`` evaluations are only watched: the change needs rounds to show. At most
``max_adjustments`` are made (the step is then 1/16 of the configured one).

Transport-free: the coordinator sends what it returns to the workers (RPC Adjust); the
simulator applies it to its virtual workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hogwild.settings.rules import RULES

LOSS_RISE = 0.25      # without an accuracy: a validation loss this far above the best
STANDARD_ERRORS = 3.0


@dataclass(frozen=True)
class Adjustment:
    """What every worker changes from its next round on (cumulative, not relative)."""

    number: int                # 1 for the run's first adjustment, 2 for the next, ...
    epoch: float               # the epochs trained when the swing was seen
    lr_scale: float            # every worker's step size is the configured one times this
    staleness: int | None      # async: the new staleness bound; None: unchanged
    reason: str                # what was seen, in words

    def describe(self) -> str:
        """One line for the log: what was seen and what the workers do now."""
        changes = [f"step size x{self.lr_scale:g} of the configured one"]
        if self.staleness is not None:
            changes.append(f"staleness bound {self.staleness}")
        return f"{self.reason}: the workers go on with {' and '.join(changes)}"

    def as_dict(self) -> dict[str, Any]:
        return {"number": self.number, "epoch": self.epoch, "lr_scale": self.lr_scale,
                "staleness": self.staleness, "reason": self.reason}


class SwingGuard:
    """Watches one run's validation curve; :meth:`observe` returns an Adjustment on a swing."""

    def __init__(self, mode: str, staleness: int | None, tolerance: float,
                 val_rows: int = 0, cooldown: int = 2, max_adjustments: int = 4) -> None:
        allowed, why = RULES["swing_tolerance"]
        if not allowed(tolerance):
            raise ValueError(f"swing_tolerance {why}")
        self.mode = mode
        self.staleness = staleness
        self.tolerance = tolerance
        self.val_rows = val_rows
        self.cooldown = cooldown
        self.max_adjustments = max_adjustments
        self.best_accuracy: float | None = None
        self.best_loss: float | None = None
        self.lr_scale = 1.0
        self.adjustments: list[Adjustment] = []
        self._quiet = 0   # evaluations still to watch only, after an adjustment

    def observe(self, epoch: float, val_loss: float | None,
                val_accuracy: float | None) -> Adjustment | None:
        """Take one evaluation of the global model; an Adjustment if it is a swing."""
        if val_loss is None or not math.isfinite(val_loss):
            return None  # nothing to judge (a non-finite model is the divergence check's)
        swing = self._swing(val_loss, val_accuracy)
        if val_accuracy is not None:
            self.best_accuracy = (val_accuracy if self.best_accuracy is None
                                  else max(val_accuracy, self.best_accuracy))
        self.best_loss = val_loss if self.best_loss is None else min(val_loss, self.best_loss)
        if self._quiet > 0:
            self._quiet -= 1
            return None
        if swing is None or len(self.adjustments) >= self.max_adjustments:
            return None
        self.lr_scale /= 2
        staleness = None
        if self.mode == "async" and (self.staleness is None or self.staleness > 1):
            staleness = self.staleness = 1
        adjustment = Adjustment(len(self.adjustments) + 1, epoch, self.lr_scale, staleness,
                                f"{swing} at epoch {epoch:.2f}")
        self.adjustments.append(adjustment)
        self._quiet = self.cooldown
        return adjustment

    def _swing(self, val_loss: float, val_accuracy: float | None) -> str | None:
        """What makes this evaluation a swing, in words; None if it is not one."""
        best = self.best_accuracy
        if val_accuracy is not None and best is not None:
            drop = best - val_accuracy
            noise = (STANDARD_ERRORS * math.sqrt(best * (1 - best) / self.val_rows)
                     if self.val_rows > 0 else 0.0)
            if drop > max(self.tolerance, noise):
                return (f"validation accuracy {val_accuracy:.4f} swung {100 * drop:.1f} "
                        f"points below the best {best:.4f}")
            return None
        if (val_accuracy is None and self.best_loss is not None and self.best_loss > 0
                and val_loss > (1 + LOSS_RISE) * self.best_loss):
            return (f"validation loss {val_loss:.4g} rose {val_loss / self.best_loss:.2f}x "
                        f"above the best {self.best_loss:.4g}")
        return None
