"""The settings by one name (Settings, load, KEYS, BOUNDS, ...), from hogwild.settings; `python -m hogwild.config` prints settings.yaml."""

from __future__ import annotations

# The settings live in hogwild.settings (schema, rules, load, render); this module is the
# one name the rest of the package imports them by.
from hogwild.errors import ConfigError
from hogwild.settings.load import (
    ENV_PREFIX,
    default_config_path,
    env_overrides,
    load,
    read_yaml,
)
from hogwild.settings.render import render_settings_yaml
from hogwild.settings.rules import (
    BOUNDS,
    COMBINES,
    DELTA_DTYPES,
    DEVICE_FORMAT,
    DEVICE_LIST_FORMAT,
    FINAL_STATES,
    GPU_TRAINER_MODES,
    LOG_LEVELS,
    LOSSES,
    MAX_THREADS,
    MODEL_KINDS,
    MODES,
    MULTICLASS_MODES,
    SCHEDULES,
    SHIPPING,
    SIGTERM_ACTIONS,
    TOPOLOGIES,
    TRAINER_MODES,
    Bound,
    sgd_problem,
    worker_devices,
)
from hogwild.settings.schema import (
    COMMANDS,
    KEYS,
    Settings,
    check_values,
    choices,
    commands,
    default_text,
    help_text,
    is_switch,
    used_by,
)

__all__ = [
    "BOUNDS", "COMBINES", "COMMANDS", "DELTA_DTYPES", "DEVICE_FORMAT", "DEVICE_LIST_FORMAT",
    "ENV_PREFIX", "FINAL_STATES",
    "GPU_TRAINER_MODES", "KEYS", "LOG_LEVELS", "LOSSES", "MAX_THREADS", "MODEL_KINDS", "MODES",
    "MULTICLASS_MODES", "SCHEDULES", "SHIPPING", "SIGTERM_ACTIONS", "TOPOLOGIES",
    "TRAINER_MODES", "Bound", "ConfigError", "Settings", "check_values", "choices",
    "commands", "default_config_path", "default_text", "env_overrides", "help_text",
    "is_switch", "load", "read_yaml", "render_settings_yaml", "sgd_problem", "used_by",
    "worker_devices",
]

if __name__ == "__main__":
    print(render_settings_yaml(), end="")
