"""Shared checks for deployment files: command lines and HOGWILD_* variables against the CLI."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hogwild import config
from hogwild.cli import build_parser
from hogwild.config import Settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS_FILE = REPO / "settings.yaml"
ROLES = ("coordinator", "worker")


def settings() -> Settings:
    """The top-level settings.yaml, validated."""
    return config.load(SETTINGS_FILE, {}, {})


def parse_command(argv: Sequence[str]) -> Any:
    """Parse a hogwild command line (without the program name) with the real CLI parser.

    argparse exits on errors; turn that into an AssertionError that shows the command.
    """
    try:
        return build_parser().parse_args(list(argv))
    except SystemExit as exc:
        raise AssertionError(f"`hogwild {' '.join(argv)}` does not parse (exit {exc.code})") \
            from None


def hogwild_env(env: Mapping[str, str]) -> dict[str, str]:
    """The HOGWILD_* part of an environment."""
    return {k: v for k, v in env.items() if k.startswith(config.ENV_PREFIX)}


def check_env_keys(env: Mapping[str, str]) -> None:
    """Every HOGWILD_* variable names a real setting (or is HOGWILD_CONFIG)."""
    for name in hogwild_env(env):
        if name == "HOGWILD_CONFIG":
            continue
        key = name[len(config.ENV_PREFIX):].lower()
        assert key in config.KEYS, f"{name} is not a setting (known: {', '.join(config.KEYS)})"


def load_with(env: Mapping[str, str], settings_path: Path, argv: Sequence[str] = ()) -> Settings:
    """Settings exactly as the process would build them: file, then env, then flags."""
    check_env_keys(env)
    flags: dict[str, Any] = {}
    if argv:
        args = parse_command(argv)
        flags = {key: getattr(args, f"setting_{key}") for key in config.KEYS
                 if getattr(args, f"setting_{key}", None) is not None}
    clean = {k: v for k, v in hogwild_env(env).items() if k != "HOGWILD_CONFIG"}
    return config.load(settings_path, clean, flags)


def port_of(address: str) -> int:
    """The port of host:port."""
    host, sep, port = address.rpartition(":")
    assert sep and host and port.isdigit(), f"{address!r} is not host:port"
    return int(port)


_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand_k8s(value: str, defined: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values (only earlier-defined variables expand)."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in defined, f"$({name}) is used before it is defined"
        return defined[name]

    return _K8S_VAR.sub(replace, value)
