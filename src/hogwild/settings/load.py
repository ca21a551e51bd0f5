"""Where settings come from: defaults < settings.yaml < HOGWILD_* environment < command-line flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from hogwild.errors import ConfigError
from hogwild.settings.schema import FIELDS, KEYS, Settings, build, coerce

ENV_PREFIX = "HOGWILD_"


class _DuplicateKey(yaml.YAMLError):
    """A key given twice in one mapping of a settings file."""

    def __init__(self, key: str, first: int, again: int) -> None:
        super().__init__(f"{key!r} given twice")
        self.key, self.first, self.again = key, first, again


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    silently, so a setting added at the top of a full settings.yaml would be overridden by the
    default further down."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # "<<: *base" merges another mapping in: later keys override it
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.setdefault(key, line)
        except TypeError:
            continue  # an unhashable key: construct_mapping names that error itself
        if first != line:
            raise _DuplicateKey(str(key), first, line)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where the parser stopped and why (PyYAML's own text spans several lines and
    quotes the document as "<unicode string>")."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return " ".join(str(exc).split())


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a settings file; a missing file or a non-mapping is a ConfigError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except _DuplicateKey as exc:
        raise ConfigError(exc.key, f"given twice in {path} (lines {exc.first} and "
                                   f"{exc.again}); the file must say it once") from None
    except yaml.YAMLError as exc:
        raise ConfigError("config", f"{path} is not valid YAML: {_yaml_problem(exc)}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError("config", f"{path} must hold a mapping of settings")
    for key in loaded:
        if not isinstance(key, str) or key not in FIELDS:
            raise ConfigError(str(key), f"unknown setting in {path}; known: {', '.join(KEYS)}")
    return loaded


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """Settings named by HOGWILD_<KEY> variables; an unknown HOGWILD_ variable is an error."""
    found: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == "HOGWILD_CONFIG":
            continue
        key = name[len(ENV_PREFIX):].lower()
        if key not in FIELDS:
            raise ConfigError(key, f"unknown setting from environment variable {name}")
        found[key] = value
    return found


def load(path: str | Path | None = None,
         environ: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> Settings:
    """Defaults, then the YAML file, then ``environ`` (HOGWILD_*), then ``flags``; validated.

    ``environ`` is passed explicitly (the CLI passes ``os.environ``) so nothing reads the
    environment behind the caller's back.
    """
    values: dict[str, Any] = {f.name: f.default for f in fields(Settings)}
    if path is not None:
        values.update(read_yaml(path))
        build(values, source=str(path))
    if environ:
        env = env_overrides(environ)
        for key, text in env.items():
            values[key] = coerce(key, text, f"{ENV_PREFIX}{key.upper()}")
    if flags:
        for key, value in flags.items():
            if value is not None:
                values[key] = coerce(key, value, f"--{key.replace('_', '-')}")
    return build(values, source="settings")


def default_config_path(environ: Mapping[str, str]) -> str | None:
    """HOGWILD_CONFIG if set, else ./settings.yaml if present, else None (defaults only)."""
    explicit = environ.get("HOGWILD_CONFIG")
    if explicit:
        return explicit
    return "settings.yaml" if os.path.exists("settings.yaml") else None

