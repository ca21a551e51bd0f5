"""hogwild: sparse linear models trained with HOGWILD! lock-free SGD, locally or over gRPC."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The Python API, imported on first use: `import hogwild` stays cheap (no numba, no
# scikit-learn) for the command line.
_LAZY = {
    "HogwildClassifier": "hogwild.estimators.classes",
    "HogwildRegressor": "hogwild.estimators.classes",
    "run_cluster": "hogwild.estimators.classes",
    "SavedModel": "hogwild.model.saved",
}

__all__ = ["HogwildClassifier", "HogwildRegressor", "SavedModel", "__version__", "run_cluster"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hogwild' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
