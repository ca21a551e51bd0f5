"""Setting values read as their declared types: YAML values, and text from the environment or flags."""

from __future__ import annotations

from typing import Any

import yaml

from hogwild.errors import ConfigError


def read_as(key: str, value: Any, source: str, kind: type, optional: bool) -> Any:
    """``value`` of setting ``key`` (from ``source``) as ``kind`` (str, int, float, bool or a
    tuple of ints), None allowed when ``optional``; text is read as YAML first."""
    if isinstance(value, str) and kind is not str:
        value = _parse_text(key, value, kind, source)
    if value is None:
        if optional:
            return None
        raise ConfigError(key, f"must be set, got null (from {source})")
    if kind is tuple:
        return _int_list(key, value, source)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r} (from {source})")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {value!r} (from {source})")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r} (from {source})")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(key, f"expected text, got {value!r} (from {source})")
    return value


def _int_list(key: str, value: Any, source: str) -> tuple[int, ...]:
    """A non-empty list of positive integers, from YAML ([64, 32]), a number, or text such as
    ``64,32`` (flags, environment)."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.strip().strip("[]").split(",")]
        try:
            value = [int(p) for p in parts if p]
        except ValueError:
            raise ConfigError(key, f"expected a list of positive integers such as [64] or "
                                   f"64,32, got {value!r} (from {source})") from None
    elif isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value):
        raise ConfigError(key, f"expected a non-empty list of positive integers such as [64], "
                               f"got {value!r} (from {source})")
    return tuple(value)


def _parse_text(key: str, text: str, kind: type, source: str) -> Any:
    """Read a typed value given as text (environment, flags). Numbers are read by Python's own
    rules first, since YAML 1.1 takes ``1e-5`` (no dot) for a string."""
    text = text.strip()
    if kind is float:
        try:
            return float(text)
        except ValueError:
            pass
    if kind is int:
        try:
            return int(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        raise ConfigError(key, f"cannot read {text!r} (from {source})") from None
