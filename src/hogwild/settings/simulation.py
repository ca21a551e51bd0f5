"""`hogwild simulate`'s own options (the simulated machines and network): declared once here.

They are not settings of a run (no yaml key, no HOGWILD_* variable: a cluster has real
machines), so they live beside the schema rather than in it; their ranges are in
rules.BOUNDS with every other setting's. The CLI builds its flags from SIM_OPTIONS and reads
them back with :func:`read_options`; engine.network takes its defaults from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hogwild.errors import UsageError
from hogwild.settings.rules import BOUNDS

LATENCIES = ("fixed", "exp", "uniform")
# Non-zeros one training thread processes per second: the kernel's order on one core.
DEFAULT_SPEED = 4e8
# Simulated events (message deliveries and training steps, see commands.simulate's
# estimate) above which a simulation is refused unless --max-events is raised: measured
# at 40-90 us an event on a 2-core machine, 1e7 is 7-15 minutes.
DEFAULT_MAX_EVENTS = 1e7
# Above this many, the estimate is printed as a warning before the run starts.
WARN_EVENTS = 1e6
# One speed per worker at most (the settings' bound on workers).
MAX_SPEEDS = 1024


@dataclass(frozen=True)
class SimOption:
    """One flag of `hogwild simulate`: ``--`` + key with dashes."""

    key: str
    default: Any
    metavar: str
    help: str
    parse: Callable[[str], Any] = float
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


SIM_OPTIONS: tuple[SimOption, ...] = (
    SimOption("speed", DEFAULT_SPEED, "NNZ_PER_S",
              "non-zeros one training thread processes per second"),
    SimOption("speeds", "", "LIST",
              "one speed per worker, comma-separated (overrides --speed)", parse=str),
    SimOption("speed_spread", 0.0, "SIGMA",
              "scatter the workers' speeds log-normally with this sigma (seeded): stragglers"),
    SimOption("latency", 2e-4, "SECONDS", "mean time a message is in flight, per hop"),
    SimOption("jitter", "exp", "KIND",
              "latency distribution: fixed, exponential, or uniform on [0, 2 x latency]",
              parse=str, choices=LATENCIES),
    SimOption("overhead", 1e-3, "SECONDS",
              "sender time per message (encoding, TLS, the RPC)"),
    SimOption("bandwidth", 1.25e9, "BYTES_PER_S", "bytes per second out of one node"),
    SimOption("slices", 4, "N", "steps per round between which arrived deltas are applied",
              parse=int),
    SimOption("evals_per_epoch", 4.0, "N",
              "validation evaluations of the coordinator's model per epoch of training "
              "time (on a clock, when a delta changed it)"),
    SimOption("max_events", DEFAULT_MAX_EVENTS, "N",
              "refuse a simulation estimated to take more events (message deliveries and "
              "training steps) than this; raise it to run a larger one on purpose"),
)
DEFAULTS: dict[str, Any] = {o.key: o.default for o in SIM_OPTIONS}


def check(key: str, value: float) -> None:
    """UsageError naming the flag of ``key`` when ``value`` is outside its bound."""
    bound = BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in bound:
        raise UsageError(f"{_flag(key)} {value!r}: {bound.why}")


def read_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``given`` (flag values by key, text or parsed), checked against their
    bounds: one UsageError naming the flag for the first one out of range."""
    values: dict[str, Any] = {}
    for option in SIM_OPTIONS:
        raw = given.get(option.key, option.default)
        if option.key == "speeds":
            values["speeds"] = _speeds(str(raw))
            continue
        value = _parse(option, raw)
        if option.choices is not None:
            if value not in option.choices:
                raise UsageError(f"{option.flag} {value!r}: must be one of "
                                 f"{', '.join(option.choices)}")
        else:
            check(option.key, value)
        values[option.key] = value
    return values


def _parse(option: SimOption, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return option.parse(raw.strip())
    except ValueError:
        kind = "a whole number" if option.parse is int else "a number"
        raise UsageError(f"{option.flag}: {raw[:40]!r} is not {kind}") from None


def _speeds(text: str) -> tuple[float, ...]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > MAX_SPEEDS:
        raise UsageError(f"--speeds: {len(parts)} values, at most {MAX_SPEEDS} (one per "
                         "worker)")
    speeds = []
    for i, part in enumerate(parts, 1):
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"--speeds: value {i} ({part[:40]!r}) is not a number") from None
        if not math.isfinite(value) or value not in BOUNDS["speed"]:
            raise UsageError(f"--speeds: value {i} ({part[:40]}) {BOUNDS['speed'].why}")
        speeds.append(value)
    return tuple(speeds)


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")
