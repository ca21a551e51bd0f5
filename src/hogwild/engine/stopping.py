"""Stop criteria on a stream of validation losses (target loss, patience), keeping the best model."""

from __future__ import annotations

import math

import numpy as np


def better(loss: float, accuracy: float | None, kept_loss: float,
           kept_accuracy: float | None) -> bool:
    """Whether a model scored (``loss``, ``accuracy``) beats the kept one: the definition of
    "the best model" every trainer saves (train, run, simulate, the estimators).

    A classifier (both accuracies known): the more accurate, the lower loss breaking a tie;
    what a user compares classifiers by, and a model several points less accurate than one
    the run had is a worse answer whatever its loss (a swinging run's lower-loss models were
    the less accurate ones). Otherwise (a regression, no validation set): the lower loss.
    """
    if accuracy is not None and kept_accuracy is not None and accuracy != kept_accuracy:
        return accuracy > kept_accuracy
    return loss < kept_loss


class EarlyStopping:
    """Feed it one validation loss per evaluation; it says when to stop and keeps the best weights.

    ``patience`` evaluations in a row without a decrease of at least ``min_delta`` stop the run
    (0 disables it); reaching ``target_loss`` stops it too. A non-finite loss stops at once: the
    model has diverged and more steps cannot help.

    The model kept is the best one evaluated, as :func:`better` defines it (a classifier's
    most accurate, else the lowest loss). Patience still counts on the loss, the smoother of
    the two.
    """

    def __init__(self, patience: int = 0, min_delta: float = 0.0,
                 target_loss: float | None = None) -> None:
        self.patience = patience
        self.min_delta = min_delta
        self.target_loss = target_loss
        self.best_loss = math.inf          # the lowest loss (patience counts from it)
        # The kept model's evaluation (-1: the model training started from, see start_from).
        self.best_index: int | None = None
        self.best_weights: np.ndarray | None = None
        self.kept_loss = math.inf          # the kept model's loss and accuracy
        self.kept_accuracy: float | None = None
        self.evaluations = 0
        self._since_best = 0

    def state(self) -> dict[str, float | int | None]:
        """The counters, for a checkpoint (the best weights travel apart)."""
        return {"best_loss": self.best_loss if math.isfinite(self.best_loss) else None,
                "best_index": self.best_index, "evaluations": self.evaluations,
                "since_best": self._since_best,
                "kept_loss": self.kept_loss if math.isfinite(self.kept_loss) else None,
                "kept_accuracy": self.kept_accuracy}

    def restore(self, state: dict[str, float | int | None],
                best_weights: np.ndarray | None) -> None:
        """Go on from a checkpoint's counters and best weights (what ``state`` returned)."""
        best_loss, best_index = state.get("best_loss"), state.get("best_index")
        self.best_loss = math.inf if best_loss is None else float(best_loss)
        self.best_index = None if best_index is None else int(best_index)
        self.evaluations = int(state.get("evaluations") or 0)
        self._since_best = int(state.get("since_best") or 0)
        self.best_weights = None if best_weights is None else np.array(best_weights, copy=True)
        # A checkpoint from before the kept model was told apart: it was the lowest loss's.
        kept_loss, kept_accuracy = state.get("kept_loss", best_loss), state.get("kept_accuracy")
        self.kept_loss = math.inf if kept_loss is None else float(kept_loss)
        self.kept_accuracy = None if kept_accuracy is None else float(kept_accuracy)

    def start_from(self, loss: float | None, w: np.ndarray,
                   accuracy: float | None = None) -> None:
        """Make the model training starts from (a warm start's: a model the user gave, with
        its validation ``loss`` and ``accuracy``) a candidate for the model kept, at index -1:
        a run that only made it worse saves it unchanged. It is no evaluation of training:
        patience and the target loss count from the first one."""
        if loss is None or not math.isfinite(loss):
            return
        self.best_index = -1
        self.kept_loss, self.kept_accuracy = loss, accuracy
        self.best_weights = np.array(w, copy=True)

    def update(self, loss: float, w: np.ndarray | None = None,
               accuracy: float | None = None, owned: bool = False) -> str | None:
        """Record one evaluation (its validation ``accuracy`` where there is one); return why
        to stop ("target loss", "early stopping", "diverged") or None to go on. ``owned``:
        ``w`` is a copy nobody writes any more, kept as it is rather than copied again (a
        model-sized copy: 8 bytes per feature)."""
        index = self.evaluations
        self.evaluations += 1
        if not math.isfinite(loss):
            return "diverged"
        if loss < self.best_loss - self.min_delta or not math.isfinite(self.best_loss):
            self.best_loss = loss
            self._since_best = 0
        else:
            self._since_best += 1
        if self._better(loss, accuracy):
            self.best_index = index
            self.kept_loss, self.kept_accuracy = loss, accuracy
            if w is not None:
                self.best_weights = w if owned else np.array(w, copy=True)
        if self.target_loss is not None and loss <= self.target_loss:
            return "target loss"
        if self.patience and self._since_best >= self.patience:
            return "early stopping"
        return None

    def _better(self, loss: float, accuracy: float | None) -> bool:
        """Whether this evaluation's model beats the kept one (see the class docstring)."""
        return self.best_index is None or better(loss, accuracy, self.kept_loss,
                                                 self.kept_accuracy)
