"""Read docker-compose.yml the way `docker compose` does: YAML, merge keys, ${VAR} interpolation.

Used by the deploy checks and by the multi-host test, which starts the compose services'
commands with their environment on network-namespace hosts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"

# $$ | ${NAME} | ${NAME:-default} | ${NAME-default} | ${NAME:?err} | ${NAME?err}
#    | ${NAME:+alt} | ${NAME+alt} | $NAME
_VAR = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)"
                  r"(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


class InterpolationError(Exception):
    """A required variable (${NAME:?...}) is unset, or the syntax is not understood."""


def interpolate_text(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution in one string."""
    def replace(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("braced") or match.group("bare")
        op, arg = match.group("op"), match.group("arg") or ""
        value = env.get(name)
        if op and op.startswith(":") and value == "":
            value = None
        if op in (":+", "+"):
            return interpolate_text(arg, env) if value is not None else ""
        if value is not None:
            return value
        if op in (":-", "-"):
            return interpolate_text(arg, env)
        if op in (":?", "?"):
            raise InterpolationError(f"{name}: {arg or 'required variable is not set'}")
        return ""

    if "$" in _VAR.sub("", text):
        raise InterpolationError(f"cannot interpolate {text!r} (a lone $ or unknown syntax)")
    return _VAR.sub(replace, text)


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    """``node`` with every string value interpolated (keys are left alone, as in compose)."""
    if isinstance(node, str):
        return interpolate_text(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    return node


def variables(node: Any) -> set[str]:
    """Names of every variable the file interpolates."""
    found: set[str] = set()
    if isinstance(node, str):
        for match in _VAR.finditer(node):
            name = match.group("braced") or match.group("bare")
            if name:
                found.add(name)
    elif isinstance(node, list):
        for item in node:
            found |= variables(item)
    elif isinstance(node, dict):
        for value in node.values():
            found |= variables(value)
    return found


def load_raw(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The file as YAML (merge keys `<<:` resolved by the loader), not interpolated."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise TypeError(f"{path} is not a mapping")
    return data


def load(env: Mapping[str, str], path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The file interpolated with ``env`` (what `docker compose config` would resolve)."""
    return interpolate(load_raw(path), env)  # type: ignore[no-any-return]


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's `environment:` as a dict of strings (map or NAME=value list form)."""
    raw = service.get("environment", {})
    if isinstance(raw, list):
        pairs = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
        return {str(k): str(v) for k, v in pairs.items()}
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in raw.items()}


def mounts(service: Mapping[str, Any], base: Path = REPO) -> list[tuple[Path | str, str, bool]]:
    """(host path or volume name, container path, read_only) for each of a service's volumes."""
    out: list[tuple[Path | str, str, bool]] = []
    for entry in service.get("volumes", []):
        if isinstance(entry, str):
            parts = entry.split(":")
            source, target = parts[0], parts[1]
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        else:
            source, target = entry.get("source", ""), entry["target"]
            read_only = bool(entry.get("read_only", False))
            kind = entry.get("type", "volume")
        host: Path | str = (base / source).resolve() if kind == "bind" else source
        out.append((host, target, read_only))
    return out


def host_path(service: Mapping[str, Any], container_path: str, base: Path = REPO) -> Path:
    """The host path behind a container path, through the service's bind mounts."""
    best: tuple[int, Path] | None = None
    for host, target, _ in mounts(service, base):
        if not isinstance(host, Path):
            continue
        target = target.rstrip("/")
        inside = container_path == target or container_path.startswith(target + "/")
        if inside and (best is None or len(target) > best[0]):
            rest = container_path[len(target):].lstrip("/")
            best = (len(target), host / rest if rest else host)
    if best is None:
        raise KeyError(f"{container_path} is not under any bind mount of the service")
    return best[1]
