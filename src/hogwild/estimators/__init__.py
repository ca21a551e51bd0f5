"""scikit-learn estimators (HogwildClassifier, HogwildRegressor) and run_cluster, loaded on first use."""

from __future__ import annotations

from typing import Any

# Loaded on first use, so that the options and the base (no scikit-learn) import alone.
_PUBLIC = ("HogwildClassifier", "HogwildRegressor", "run_cluster")

__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'hogwild.estimators' has no attribute {name!r}")
    from hogwild.estimators import classes  # deferred: scikit-learn loads only here

    value = getattr(classes, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
