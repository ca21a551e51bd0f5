"""The coordinator's data: loaded (or planned, shipping local), described, fingerprinted."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.checkpoints import fingerprint
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint
from hogwild.cluster.coordinator.data.localplan import load_local
from hogwild.cluster.coordinator.runconfig import TrainShape
from hogwild.config import Settings
from hogwild.data.sources import data_lines
from hogwild.data.transform.labels import MULTICLASS
from hogwild.engine.runstart import load_splits, model_spec, warm_start_weights
from hogwild.errors import ClusterError, ConfigError, DataError
from hogwild.model.spec import ModelSpec

if TYPE_CHECKING:
    from hogwild.cluster.coordinator.data.localplan import LocalShipping


def load_data(s: Settings) -> tuple[Any, LocalShipping | None, TrainShape]:
    """The splits, the plan of ranges (shipping local: the workers read the training rows
    themselves) and the training set's size."""
    if s.shipping == "local":
        if s.initial_model:
            raise ConfigError("initial_model", "not with shipping local (the coordinator "
                              "fits the warm start's feature space to the data it loads)")

        splits, local = load_local(s)
        train = TrainShape(local.plan.train_rows, local.plan.train_nnz, splits.val.n_features)
    else:

        splits, local = load_splits(s), None
        if (splits.hashing or {}).get("weight"):
            # The shards travel as four arrays: a weight column would be dropped on the way,
            # and the run would train a model the data did not ask for.
            raise ConfigError("data", f"{s.data}: a weight column (weight=) is used by "
                              "`hogwild train` only; cluster runs do not ship row weights: "
                              "drop weight= or train in one process (class_weight works in "
                              "both)")
        train = TrainShape(splits.train.n_rows, splits.train.nnz, splits.train.n_features)
        if splits.initial is not None:

            # A warm start that is not this run's model (another loss, implausible weights)
            # is refused now, not after the workers have registered.
            warm_start_weights(s, splits, model_spec(s, splits.train.n_features))
    if splits.labels.task == MULTICLASS:
        classes = ", ".join(f"{v:g}" for v in splits.labels.classes or ())
        raise DataError(f"{s.data}: labels {{{classes}}} are {splits.labels.n_classes} "
                        "classes; the cluster trains binary and regression models only "
                        "(`hogwild train` trains multiclass one-vs-rest)")
    return splits, local, train


def say_data(splits: Any, local: LocalShipping | None, say: Callable[[str], None]) -> None:
    """The data's lines on the console."""

    for line in data_lines(splits, local.describe() if local else None):
        say(line)


def data_fingerprint(s: Settings, splits: Any, local: LocalShipping | None,
                     resume: Checkpoint | None) -> str:
    """Fingerprint the rows the checkpoints will be taken on ("" where none will be); a
    resume refuses other ones (another file, seed, fraction, hashing...) before any worker
    is waited for."""
    if not s.checkpoint_interval and s.on_sigterm != "checkpoint" and resume is None:
        return ""
    taken = (fingerprint.of_plan(local.plan, splits.val) if local is not None
             else fingerprint.of_splits(splits.train, splits.val))
    taken_on = resume.data if resume is not None else ""
    if taken_on and taken_on != taken:
        raise ConfigError("resume", f"the checkpoint in {s.resume} was taken on other "
                          "training or validation rows than these (another data file, "
                          "seed, val_fraction, test_fraction, shipping or feature hashing): "
                          "resume with the run's own data and settings, or start anew "
                          "without resume")
    return taken


def starting_weights(s: Settings, splits: Any, spec: ModelSpec, resume: Checkpoint | None
                     ) -> tuple[npt.NDArray[np.float64] | None, bool]:
    """The model every worker starts from (None: zeros), and whether it is the warm start's
    (the initial_model setting's: then sent to every worker)."""
    initial = spec.initial_weights(s.seed) if spec.is_mlp else None
    warm_started = False
    if splits.initial is not None and resume is None:  # warm start

        initial = warm_start_weights(s, splits, spec)
        warm_started = True
    if resume is not None:
        if resume.w.shape != (spec.dim,):
            raise ClusterError(f"the checkpoint's model has {resume.w.shape[0]} "
                               f"weights, this data set's {spec.dim}: not the same run")
        initial = resume.w
    return initial, warm_started
