"""The shared base of the scikit-learn estimators: parameters, the fit loop, scoring, save/load."""
# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

try:
    from sklearn.base import BaseEstimator
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("hogwild's estimators need scikit-learn >= 1.6: "
                      "pip install '.[sklearn]' from a clone, or pip install scikit-learn") from exc

from hogwild.config import DEVICE_FORMAT, Settings, check_values
from hogwild.data.csr import CSRData
from hogwild.data.transform.reorder import frequency_order, renumber, restore_weights, to_internal
from hogwild.engine.fit import FitLoop
from hogwild.engine.gpu import GPUTrainer
from hogwild.engine.gpu_device import cuda_device
from hogwild.engine.trainer import Trainer, TrainParams
from hogwild.errors import ConfigError, TrainingDiverged
from hogwild.estimators.options import (
    check_average,
    mean_of_iterates,
    sample_weights,
    stream_epoch_rows,
)
from hogwild.model.hot import RENUMBERED_HOT_FEATURES
from hogwild.model.saved import SavedModel
from hogwild.model.scoring import margins

if TYPE_CHECKING:
    from typing_extensions import Self

F64 = npt.NDArray[np.float64]

# The estimators' defaults are the settings' (``hogwild train``'s): one schema, read here.
SCHEMA = Settings()

# X is converted to these dtypes; the kernels read float32 values (the project's CSR contract).
DTYPES = (np.float64, np.float32)


def csr_data(X: Any, labels: npt.ArrayLike | None = None,
             weights: npt.ArrayLike | None = None) -> CSRData:
    """A validated array or sparse matrix as CSRData (float32 values, int32 ids), with the
    rows' weights when given."""
    n = X.shape[0]
    y = np.zeros(n, dtype=np.float32) if labels is None else labels
    return CSRData.from_scipy(X, y, weights)


class HogwildEstimator(BaseEstimator):
    """What both estimators share: parameters, the training loop, scoring, save/load."""

    _task_kind = ""

    def __init__(self, *, loss: str = SCHEMA.loss,
                 learning_rate: float = SCHEMA.learning_rate,
                 lr_schedule: str = SCHEMA.lr_schedule, lr_decay: float = SCHEMA.lr_decay,
                 power_t: float = SCHEMA.power_t, l2: float = SCHEMA.l2,
                 epochs: int = SCHEMA.epochs, threads: int = SCHEMA.threads,
                 fit_bias: bool = SCHEMA.fit_bias, seed: int = SCHEMA.seed,
                 trainer: str = SCHEMA.trainer, thread_buffer: bool = SCHEMA.thread_buffer,
                 batch_size: int = SCHEMA.batch_size, shuffle: bool = True,
                 epoch_rows: int | None = None, warm_start: bool = False,
                 device: str = SCHEMA.device, average: bool = False) -> None:
        self.loss = loss
        self.learning_rate = learning_rate
        self.lr_schedule = lr_schedule
        self.lr_decay = lr_decay
        self.power_t = power_t
        self.l2 = l2
        self.epochs = epochs
        self.threads = threads
        self.fit_bias = fit_bias
        self.seed = seed
        self.trainer = trainer
        self.thread_buffer = thread_buffer
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.epoch_rows = epoch_rows
        self.warm_start = warm_start
        self.device = device
        self.average = average

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # Lock-free threads race by design: only one thread gives repeatable weights.
        tags.non_deterministic = self.threads != 1 or self.device != "cpu"
        return tags

    # --- training ------------------------------------------------------------------------
    def _params(self, n_features: int, renumbered: bool) -> Any:

        hot = RENUMBERED_HOT_FEATURES if renumbered else 0
        # The mean of the iterates weighs each step by its position in the sequence, which
        # racing threads do not keep (one runs ahead of another): averaging uses one thread.
        threads = 1 if self.average else int(self.threads)
        try:
            return TrainParams(loss=self.loss, learning_rate=float(self.learning_rate),
                               lr_schedule=self.lr_schedule, lr_decay=float(self.lr_decay),
                               power_t=float(self.power_t), l2=float(self.l2),
                               fit_bias=bool(self.fit_bias), threads=threads,
                               mode=self.trainer, batch_size=self.batch_size,
                               hot_features=hot)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{type(self).__name__}: bad parameter {exc}") from None

    def _gpu(self, n_features: int, params: Any, w: F64) -> Any:
        """The GPU trainer of ``device`` (cuda or cuda:N, the gpu extra installed); a
        ValueError naming the parameter when the device or a setting does not fit."""

        name = type(self).__name__
        if not isinstance(self.device, str) or DEVICE_FORMAT.fullmatch(self.device) is None:
            raise ValueError(f"{name}: device must be cpu, cuda or cuda:N, got {self.device!r}")
        try:
            return GPUTrainer(n_features, params, w=w, device=cuda_device(self.device))
        except ConfigError as exc:
            raise ValueError(f"{name}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{name}: bad parameter for device {self.device}: {exc}") from None

    def _check_epochs(self, epochs: Any) -> int:
        name = type(self).__name__
        try:  # the setting's rules; numpy's integers are integers here, text is not
            if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)):
                raise ConfigError("epochs", f"expected an integer, got {epochs!r}")
            return int(check_values({"epochs": int(epochs)}, name)["epochs"])
        except ConfigError as exc:
            raise ValueError(f"{name}: epochs {exc.reason}") from None

    def _horizon(self) -> int:
        """Rows per epoch of partial_fit's schedule (options.stream_epoch_rows)."""
        return stream_epoch_rows(type(self).__name__, self.epoch_rows,
                                 int(getattr(self, "_epoch_rows", 0)),
                                 float(self.learning_rate), float(self.l2))

    def _train(self, data: CSRData, targets: F64, weights: F64, epochs: int | None) -> None:
        """``epochs`` passes of the Hogwild trainer from the first step (fit), or None: one
        pass in the rows' order continuing the step-size schedule after the examples seen
        before (partial_fit), for each row of ``targets`` (one label vector per model),
        updating ``weights`` (K, d + 1) in the data's feature ids: the raw iterate, or with
        ``average`` the mean of the iterates (the raw one is kept for the next call)."""

        average = check_average(type(self).__name__, self.average, self.trainer,
                                self.batch_size, self.device)
        calls = int(getattr(self, "_calls", 0))
        stream = epochs is None
        t = float(getattr(self, "t_", 1.0)) if stream else 1.0
        if self.shuffle and not stream and data.n_rows > 1:
            # fit streams rows in one fixed random order (permuted once per call):
            # sequential memory access, and the order still varies with the seed. partial_fit
            # keeps the caller's order: a stream in any chunking is then one pass of it.
            rng = np.random.default_rng([int(self.seed), calls])
            perm = rng.permutation(data.n_rows)
            data = data.take(perm)
            targets = targets[:, perm]
        d = data.n_features
        # Threads buffer the hottest weights only on ids ranked by frequency (see trainer).
        renumbered = (self.trainer == "hogwild" and int(self.threads) > 1 and self.thread_buffer
                      and not average)
        order = frequency_order(data) if renumbered else None
        if order is not None:
            data = renumber(data, order)
        params = self._params(d, renumbered)
        horizon = self._horizon() if stream else None
        raw_before: F64 | None = getattr(self, "_iterate", None)
        if stream and not average and raw_before is not None:
            # Averaging was turned off: go on from the raw iterate, not from its mean.
            weights[:] = raw_before
            self._forget_average()
        # Averaging state per model: the raw iterate, where averaging began, its sum.
        iterate = getattr(self, "_iterate", None) if stream else None
        start = getattr(self, "_avg_start", None) if stream else None
        sums = getattr(self, "_avg_sum", None) if stream else None
        if average and (iterate is None or start is None or sums is None):
            iterate, start, sums = weights.copy(), weights.copy(), np.zeros_like(weights)
            self._avg_from = t
        for k in range(targets.shape[0]):
            rows = CSRData(data.indptr, data.indices, data.values, targets[k], d,
                           weights=data.weights)
            raw = iterate[k] if average and iterate is not None else weights[k]
            w = to_internal(raw, order) if order is not None else raw.copy()
            model = Trainer(d, params, w=w) if self.device == "cpu" else self._gpu(d, params, w)
            model.t = t
            model.epoch_rows = horizon
            if average and sums is not None:
                model.average_sum = (to_internal(sums[k], order) if order is not None
                                     else sums[k].copy())
            first = (int(t - 1.0) // horizon) if horizon is not None else 0
            self._fit_model(model, rows, first, epochs or 1)
            out = restore_weights(model.w, order) if order is not None else model.w
            if average and iterate is not None and start is not None and sums is not None:
                total = model.average_sum
                assert total is not None
                sums[k] = restore_weights(total, order) if order is not None else total
                iterate[k] = out
                weights[k] = mean_of_iterates(out, start[k], sums[k], float(self._avg_from),
                                              model.t)
            else:
                weights[k] = out
        self._calls = calls + 1
        self.t_ = t + (epochs or 1) * data.n_rows
        if average:
            self._iterate, self._avg_start, self._avg_sum = iterate, start, sums
        if not stream:
            self._epoch_rows = data.n_rows

    def _fit_model(self, model: Any, rows: CSRData, first: int, epochs: int) -> None:
        """``epochs`` passes of one model (the schedule's epochs counted from ``first``) in the
        engine's fit loop; the last model is kept: there are no validation rows to pick one."""
        fit = FitLoop(model.w, epochs=epochs, learning_rate=float(self.learning_rate),
                      keep_best=False)
        fit.begin()
        try:
            fit.run(lambda e: model.fit_epoch(rows, first + e))
        except TrainingDiverged:
            raise ValueError(f"{type(self).__name__}: training diverged (weights are not "
                             f"finite); lower learning_rate (now {self.learning_rate})") from None

    def _sample_weight(self, sample_weight: Any, X: Any) -> F64 | None:
        return sample_weights(type(self).__name__, sample_weight, X)

    def _warm(self) -> bool:
        """Whether fit starts from the current weights: warm_start and a fitted model."""
        return bool(self.warm_start) and hasattr(self, "weights_")

    def _forget_average(self) -> None:
        for name in ("_iterate", "_avg_start", "_avg_sum", "_avg_from"):
            if hasattr(self, name):
                delattr(self, name)

    def _forget(self) -> None:
        for name in ("_calls", "t_", "_epoch_rows", "_iterate", "_avg_start", "_avg_sum",
                     "_avg_from"):
            if hasattr(self, name):
                delattr(self, name)

    def _set_weights(self, weights: F64, n_iter: int) -> None:
        self.weights_ = np.ascontiguousarray(weights, dtype=np.float64)
        self.n_iter_ = int(n_iter)
        self._publish_coef()

    def _publish_coef(self) -> None:
        raise NotImplementedError

    # --- scoring -------------------------------------------------------------------------
    def _margins(self, X: Any) -> F64:

        check_is_fitted(self, "weights_")
        X = validate_data(self, X, accept_sparse="csr", dtype=DTYPES, reset=False)
        w = self.weights_[0] if self.weights_.shape[0] == 1 else self.weights_
        return margins(w, csr_data(X), int(self.threads))

    # --- files ---------------------------------------------------------------------------
    def to_saved(self) -> SavedModel:
        """The fitted model as a SavedModel (format 2)."""
        raise NotImplementedError

    def save(self, path: str | Path) -> Path:
        """Write model.npz + model.json (the saved-model format) into the directory ``path``."""
        return self.to_saved().save(path)

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """An estimator fitted from a saved model (a run directory or its model files);
        its parameters are taken from the model's settings where they have one."""
        return cls.from_saved(SavedModel.load(path))

    @classmethod
    def from_saved(cls, model: SavedModel) -> Self:
        """An estimator holding ``model``'s weights (ready to predict or to continue with
        partial_fit)."""
        known = set(cls().get_params())
        params: dict[str, Any] = {}
        for source in (model.meta.get("settings"), model.meta.get("params")):
            if isinstance(source, Mapping):
                params.update({k: v for k, v in source.items() if k in known})
        params["loss"] = model.loss
        params["fit_bias"] = model.fit_bias
        est = cls(**params)
        cls._adopt(est, model)  # the class's own hook (cls: the concrete estimator class)
        return est

    def _adopt(self, model: SavedModel) -> None:
        raise NotImplementedError

    def _meta(self) -> dict[str, Any]:
        """model.json's own keys: the estimator, its parameters, and where the step-size
        schedule stands (so that partial_fit after load continues it)."""
        params = self.get_params()
        weights = params.get("class_weight")
        if isinstance(weights, Mapping):
            # JSON keys are text: kept in the setting's form LABEL:WEIGHT, which load reads.
            params["class_weight"] = ",".join(f"{float(k)!r}:{float(v)!r}"
                                              for k, v in weights.items())
        meta: dict[str, Any] = {"estimator": type(self).__name__, "params": params,
                                "n_iter": self.n_iter_}
        if hasattr(self, "t_"):
            meta["examples_seen"] = int(self.t_) - 1
        if hasattr(self, "_epoch_rows"):
            meta["epoch_rows_fitted"] = int(self._epoch_rows)
        return meta

    def _resume_schedule(self, meta: Mapping[str, Any]) -> None:
        """Where a saved model's schedule stood: this estimator's keys, or for a model of
        ``hogwild train`` its epochs over its training rows."""
        seen, rows = meta.get("examples_seen"), meta.get("epoch_rows_fitted")
        metrics = meta.get("metrics")
        if seen is None and isinstance(metrics, Mapping):
            rows, epochs = metrics.get("train_rows"), metrics.get("epochs")
            if isinstance(rows, int) and isinstance(epochs, int):
                seen = rows * epochs
        self._forget()
        if isinstance(seen, int) and seen >= 0:
            self.t_ = float(seen + 1)
        if isinstance(rows, int) and rows > 0:
            self._epoch_rows = rows
