"""scikit-learn estimators over the Hogwild trainer (HogwildClassifier, HogwildRegressor) and
run_cluster, which trains the same models with a real local coordinator and workers.

scikit-learn (>= 1.6) is needed here only: ``pip install '.[sklearn]'`` from a clone. The estimators
take scipy sparse matrices (CSR is used as it is; any other format or a dense array is
converted) and any labels ``np.unique`` can sort: two classes train one model on -1/+1, more
classes train one model per class (one-vs-rest, the class against the rest).
"""
# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    from sklearn.base import ClassifierMixin, RegressorMixin
    from sklearn.utils.metaestimators import available_if
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("hogwild's estimators need scikit-learn >= 1.6: "
                      "pip install '.[sklearn]' from a clone, or pip install scikit-learn") from exc

from hogwild import config
from hogwild.cluster.localrun.launcher import run_local
from hogwild.data.csr import CSRData
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.errors import ModelError
from hogwild.estimators.base import DTYPES, F64, SCHEMA, HogwildEstimator, csr_data
from hogwild.estimators.options import row_weights, sample_weights
from hogwild.model.saved import SavedModel, label_value, ovr_proba
from hogwild.outputs import artifacts

# The regressor's own defaults, where the schema's (made for classification) do not fit the
# squared loss: its steps grow with |x|^2 and the targets' scale, so the schema's rate 0.5
# diverges on unscaled inputs (standard normal features of 15 columns already).
_REGRESSOR_DEFAULTS: dict[str, Any] = {"loss": "squared", "learning_rate": 0.05}


class HogwildClassifier(ClassifierMixin, HogwildEstimator):
    """Linear classifier (hinge = SVM, or logistic) trained by lock-free Hogwild threads.

    Parameters are the settings of ``hogwild train``, with the same defaults (``loss``,
    ``learning_rate``, ``lr_schedule``, ``lr_decay``, ``power_t``, ``l2``, ``epochs``,
    ``threads``, ``fit_bias``, ``seed``, ``trainer``, ``thread_buffer``, ``batch_size``);
    ``shuffle`` permutes ``fit``'s rows once per call (``partial_fit`` keeps the caller's
    order). ``epoch_rows``: the rows of one pass, for the step-size schedule of
    ``partial_fit``, which counts examples (``t_``), not calls (None: the rows of the last
    ``fit``, else the stream's horizon 1 / (learning_rate x l2), model/schedule.py).
    ``warm_start``: as in scikit-learn, ``fit`` starts from the weights of the previous fit
    (or of a loaded model) instead of zeros. ``average``: averaged SGD, predicting with the
    mean of the iterates (one thread). ``class_weight``: None, "balanced" or {label: weight}
    as in scikit-learn (or the setting's text, ``1:2.0,-1:1.0``); ``fit`` and
    ``partial_fit`` also take ``sample_weight``.
    After fit: ``classes_``, ``coef_`` (1, d) or (K, d), ``intercept_``, ``n_iter_``, ``t_``,
    ``n_features_in_`` and ``weights_`` (the rows of ``w`` as saved, bias last).
    """

    _task_kind = "classifier"

    def __init__(self, *, loss: str = SCHEMA.loss,
                 learning_rate: float = SCHEMA.learning_rate,
                 lr_schedule: str = SCHEMA.lr_schedule, lr_decay: float = SCHEMA.lr_decay,
                 power_t: float = SCHEMA.power_t, l2: float = SCHEMA.l2,
                 epochs: int = SCHEMA.epochs, threads: int = SCHEMA.threads,
                 fit_bias: bool = SCHEMA.fit_bias, seed: int = SCHEMA.seed,
                 trainer: str = SCHEMA.trainer, thread_buffer: bool = SCHEMA.thread_buffer,
                 batch_size: int = SCHEMA.batch_size, shuffle: bool = True,
                 epoch_rows: int | None = None, warm_start: bool = False,
                 device: str = SCHEMA.device, average: bool = False,
                 class_weight: Any = None) -> None:
        super().__init__(loss=loss, learning_rate=learning_rate, lr_schedule=lr_schedule,
                         lr_decay=lr_decay, power_t=power_t, l2=l2, epochs=epochs,
                         threads=threads, fit_bias=fit_bias, seed=seed, trainer=trainer,
                         thread_buffer=thread_buffer, batch_size=batch_size,
                         shuffle=shuffle, epoch_rows=epoch_rows, warm_start=warm_start,
                         device=device, average=average)
        self.class_weight = class_weight

    def _row_weights(self, y: Any, sample_weight: Any, X: Any, streaming: bool) -> F64 | None:
        """Each row's weight: sample_weight times class_weight's (estimators.options)."""
        name = type(self).__name__
        return row_weights(name, self.class_weight, self.classes_, y,
                           sample_weights(name, sample_weight, X), streaming)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> HogwildClassifier:
        """Train for ``epochs`` passes: from zero weights, or with ``warm_start`` from the
        weights of the last fit (same features and classes; the step sizes start again).
        ``sample_weight``: a weight >= 0 per row (with ``class_weight``'s, multiplied),
        scaling its gradient as if the row occurred that many times."""
        warm = self._warm()
        # Warm: X must have the fitted feature count (validate_data says so otherwise).
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=DTYPES, reset=not warm)
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.shape[0] < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes; "
                             f"the data has one class only: {classes[0].item()!r}")
        fitted: npt.NDArray[Any] | None = getattr(self, "classes_", None) if warm else None
        if fitted is not None and not np.array_equal(classes, fitted):
            raise ValueError(f"warm_start: the labels' classes {classes.tolist()} differ from "
                             f"the fitted model's {fitted.tolist()}")
        epochs = self._check_epochs(self.epochs)
        previous = self.weights_.copy() if warm else None
        self._forget()
        self.classes_ = classes
        rows = self._row_weights(y, sample_weight, X, streaming=False)
        weights = (previous if previous is not None
                   else np.zeros((self._n_models(), X.shape[1] + 1), dtype=np.float64))
        self._train(csr_data(X, None, rows), self._targets(y), weights, epochs)
        self._set_weights(weights, epochs)
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None,
                    sample_weight: Any = None) -> HogwildClassifier:
        """One pass over (X, y) in their order, continuing from the current weights and
        step-size schedule; the first call needs ``classes`` (every label that will ever be
        seen). ``sample_weight`` as in :meth:`fit`."""
        first = not hasattr(self, "weights_")
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=DTYPES, reset=first)
        check_classification_targets(y)
        if first:
            if classes is None:
                raise ValueError("classes must be given on the first call to partial_fit")
            self._forget()
            self.classes_ = np.unique(np.asarray(classes))
            if self.classes_.shape[0] < 2:
                raise ValueError("partial_fit needs at least 2 classes")
            weights = np.zeros((self._n_models(), X.shape[1] + 1), dtype=np.float64)
        else:
            if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
                raise ValueError(f"classes {np.unique(classes)} differ from the first call's "
                                 f"{self.classes_}")
            weights = self.weights_.copy()
        unknown = np.setdiff1d(np.unique(y), self.classes_)
        if unknown.size:
            raise ValueError(f"labels {unknown.tolist()} are not in classes "
                             f"{self.classes_.tolist()}")
        rows = self._row_weights(y, sample_weight, X, streaming=True)
        self._train(csr_data(X, None, rows), self._targets(y), weights, None)
        self._set_weights(weights, getattr(self, "n_iter_", 0) + 1 if not first else 1)
        return self

    def _n_models(self) -> int:
        return 1 if self.classes_.shape[0] == 2 else int(self.classes_.shape[0])

    def _targets(self, y: Any) -> F64:
        index = np.searchsorted(self.classes_, y)
        if self.classes_.shape[0] == 2:
            return np.where(index == 1, 1.0, -1.0)[None, :]
        k = np.arange(self.classes_.shape[0])[:, None]
        out: F64 = np.where(index[None, :] == k, 1.0, -1.0)
        return out

    def _publish_coef(self) -> None:
        self.coef_ = self.weights_[:, :-1].copy()
        self.intercept_ = self.weights_[:, -1].copy()

    def decision_function(self, X: Any) -> F64:
        """Margins ``w.x + b``: shape (n,) for two classes (positive = ``classes_[1]``),
        (n, K) for more."""
        return self._margins(X)

    def predict(self, X: Any) -> npt.NDArray[Any]:
        """The class of each row (margin >= 0 -> ``classes_[1]``; else the largest margin)."""
        m = self._margins(X)
        if m.ndim == 1:
            picked: npt.NDArray[Any] = self.classes_[(m >= 0.0).astype(np.intp)]
        else:
            picked = self.classes_[np.argmax(m, axis=1)]
        return picked

    def _is_logistic(self) -> bool:
        return self.loss == "logistic"

    @available_if(_is_logistic)
    def predict_proba(self, X: Any) -> F64:
        """Class probabilities (n, K), columns in ``classes_`` order (logistic loss only; for
        more than two classes the one-vs-rest sigmoids normalised to sum to 1)."""
        return ovr_proba(self._margins(X))

    @available_if(_is_logistic)
    def predict_log_proba(self, X: Any) -> F64:
        """The logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            out: F64 = np.log(self.predict_proba(X))
        return out

    def to_saved(self) -> SavedModel:
        check_is_fitted(self, "weights_")
        try:
            classes = tuple(label_value(c) for c in self.classes_)
        except (TypeError, ValueError, ModelError):
            raise ModelError(f"the saved-model format stores numeric class labels; these "
                             f"are {self.classes_.tolist()!r}") from None
        binary = len(classes) == 2
        return SavedModel(w=self.weights_[0] if binary else self.weights_, loss=self.loss,
                          task="binary" if binary else "multiclass", classes=classes,
                          fit_bias=bool(self.fit_bias),
                          meta=self._meta())

    def _adopt(self, model: SavedModel) -> None:
        if not model.is_classifier or model.classes is None:
            raise ModelError(f"a {model.task} model cannot be loaded as a classifier")
        self.classes_ = np.asarray(model.classes)
        self.n_features_in_ = model.n_features
        n_iter = model.meta.get("n_iter")
        self._set_weights(np.atleast_2d(model.w),
                          n_iter if isinstance(n_iter, int) else int(self.epochs))
        self._resume_schedule(model.meta)


class HogwildRegressor(RegressorMixin, HogwildEstimator):
    """Linear least-squares regression trained by lock-free Hogwild threads.

    The same parameters and defaults as HogwildClassifier, but ``loss`` is ``squared`` and
    ``learning_rate`` 0.05 by default, since squared-loss steps grow with |x|^2 and the
    targets' scale.
    After fit: ``coef_`` (d,), ``intercept_`` (1,), ``n_iter_``, ``weights_``.
    """

    _task_kind = "regressor"

    def __init__(self, *, loss: str = _REGRESSOR_DEFAULTS["loss"],
                 learning_rate: float = _REGRESSOR_DEFAULTS["learning_rate"],
                 lr_schedule: str = SCHEMA.lr_schedule, lr_decay: float = SCHEMA.lr_decay,
                 power_t: float = SCHEMA.power_t, l2: float = SCHEMA.l2,
                 epochs: int = SCHEMA.epochs, threads: int = SCHEMA.threads,
                 fit_bias: bool = SCHEMA.fit_bias, seed: int = SCHEMA.seed,
                 trainer: str = SCHEMA.trainer, thread_buffer: bool = SCHEMA.thread_buffer,
                 batch_size: int = SCHEMA.batch_size, shuffle: bool = True,
                 epoch_rows: int | None = None, warm_start: bool = False,
                 device: str = SCHEMA.device, average: bool = False) -> None:
        super().__init__(loss=loss, learning_rate=learning_rate, lr_schedule=lr_schedule,
                         lr_decay=lr_decay, power_t=power_t, l2=l2, epochs=epochs,
                         threads=threads, fit_bias=fit_bias, seed=seed, trainer=trainer,
                         thread_buffer=thread_buffer, batch_size=batch_size,
                         shuffle=shuffle, epoch_rows=epoch_rows, warm_start=warm_start,
                         device=device, average=average)

    def _check_loss(self) -> None:
        if self.loss != "squared":
            raise ValueError(f"HogwildRegressor: loss must be 'squared', got {self.loss!r}")

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> HogwildRegressor:
        """Train for ``epochs`` passes: from zero weights, or with ``warm_start`` from the
        weights of the last fit (same features; the step sizes start again).
        ``sample_weight``: a weight >= 0 per row, scaling its gradient."""
        self._check_loss()
        warm = self._warm()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=DTYPES, y_numeric=True,
                             reset=not warm)
        epochs = self._check_epochs(self.epochs)
        previous = self.weights_.copy() if warm else None
        self._forget()
        weights = (previous if previous is not None
                   else np.zeros((1, X.shape[1] + 1), dtype=np.float64))
        self._train(csr_data(X, None, self._sample_weight(sample_weight, X)),
                    np.asarray(y, dtype=np.float64)[None, :], weights, epochs)
        self._set_weights(weights, epochs)
        return self

    def partial_fit(self, X: Any, y: Any, sample_weight: Any = None) -> HogwildRegressor:
        """One pass over (X, y) in their order, continuing from the current weights and
        step-size schedule; ``sample_weight`` as in :meth:`fit`."""
        self._check_loss()
        first = not hasattr(self, "weights_")
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=DTYPES, y_numeric=True,
                             reset=first)
        if first:
            self._forget()
            weights = np.zeros((1, X.shape[1] + 1), dtype=np.float64)
        else:
            weights = self.weights_.copy()
        self._train(csr_data(X, None, self._sample_weight(sample_weight, X)),
                    np.asarray(y, dtype=np.float64)[None, :], weights, None)
        self._set_weights(weights, 1 if first else self.n_iter_ + 1)
        return self

    def _publish_coef(self) -> None:
        self.coef_ = self.weights_[0, :-1].copy()
        self.intercept_ = self.weights_[0, -1:].copy()

    def predict(self, X: Any) -> F64:
        """``w.x + b`` for every row."""
        return self._margins(X)

    def to_saved(self) -> SavedModel:
        check_is_fitted(self, "weights_")
        return SavedModel(w=self.weights_[0], loss=self.loss, task="regression", classes=None,
                          fit_bias=bool(self.fit_bias),
                          meta=self._meta())

    def _adopt(self, model: SavedModel) -> None:
        if model.task != "regression":
            raise ModelError(f"a {model.task} model cannot be loaded as a regressor")
        self.n_features_in_ = model.n_features
        n_iter = model.meta.get("n_iter")
        self._set_weights(np.atleast_2d(model.w),
                          n_iter if isinstance(n_iter, int) else int(self.epochs))
        self._resume_schedule(model.meta)


def run_cluster(X: Any, y: Any = None, *, workers: int = 2, threads: int = 1,
                mode: str = "sync", out_dir: str | Path | None = None, verbose: bool = False,
                **settings: Any) -> HogwildClassifier | HogwildRegressor:
    """Train with a real local cluster (a coordinator and ``workers`` worker processes on
    loopback, the launcher of ``hogwild run``) and return the fitted estimator it wrote.

    ``X`` is a data source (a svmlight file path, ``bundled:NAME``, ...) or an array/sparse
    matrix with labels ``y`` (two classes, or real targets with ``loss="squared"``), written
    to a temporary svmlight file. Other keyword arguments are settings (``loss``,
    ``epochs``, ``learning_rate``, ``test_data``, ...); as in ``hogwild run``, without
    ``test_data`` a ``test_fraction`` of the rows is held out for the run's test report and
    ``val_fraction`` of the rest for validation. Outputs go to ``out_dir`` (default: a
    temporary directory removed afterwards); ``verbose`` shows the processes' output as it
    comes. RuntimeError with the run's last output lines when the run fails."""
    with tempfile.TemporaryDirectory(prefix="hogwild-cluster-") as tmp:
        flags: dict[str, Any] = dict(settings)
        classes: np.ndarray | None = None
        loss = str(settings.get("loss", "hinge"))
        if isinstance(X, (str, Path)):
            if y is not None:
                raise ValueError("y must be None when X names a data source")
            flags["data"] = str(X)
        else:
            if y is None:
                raise ValueError("y is required with an array X")
            import scipy.sparse as sp

            matrix = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else \
                sp.csr_matrix(np.asarray(X, dtype=np.float64))
            labels = np.asarray(y).ravel()
            if loss == "squared":
                targets = labels.astype(np.float64)
            else:
                classes = np.unique(labels)
                if classes.shape[0] != 2:
                    raise ValueError(f"run_cluster trains binary classifiers: y has "
                                     f"{classes.shape[0]} classes")
                targets = np.where(labels == classes[1], 1.0, -1.0)
            path = Path(tmp) / "data.svm"
            write_svmlight(CSRData.from_scipy(matrix, targets), path)
            flags["data"] = str(path)
            flags.setdefault("n_features", matrix.shape[1])
        out = Path(out_dir) if out_dir is not None else Path(tmp) / "run"
        flags.update(workers=workers, threads=threads, mode=mode, out_dir=str(out))
        run_settings = config.load(None, {}, flags)
        log = io.StringIO()
        code = run_local(run_settings, out=sys.stdout if verbose else log)
        if code != 0:
            tail = "\n".join(log.getvalue().splitlines()[-15:])
            raise RuntimeError(f"hogwild run failed with exit code {code}" +
                               (f":\n{tail}" if tail else " (its output is above)"))
        model = SavedModel.load(artifacts.published(out))  # the run's directory
    if model.task == "regression":
        return HogwildRegressor.from_saved(model)
    est = HogwildClassifier.from_saved(model)
    if classes is not None:
        # The run saw -1/+1; the caller's labels are these.
        est.classes_ = classes
    return est
