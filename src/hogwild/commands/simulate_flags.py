"""`simulate`'s own flags (the machines and the network) and its handler; the job is hogwild.commands.simulate."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from hogwild.engine.network import Network
from hogwild.errors import ConfigError
from hogwild.settings.simulation import SIM_OPTIONS, read_options

if TYPE_CHECKING:
    from hogwild.config import Settings


def add_simulation_flags(parser: argparse.ArgumentParser) -> None:
    """The simulated machines and network (declared in hogwild.settings.simulation; the
    run's own settings come from the schema). Values are read as text and checked by
    read_options, so a bad one is refused naming its flag."""
    group = parser.add_argument_group("simulated machines and network")
    for option in SIM_OPTIONS:
        group.add_argument(option.flag, dest=f"sim_{option.key}", default=option.default,
                           metavar=None if option.choices else option.metavar,
                           choices=option.choices, help=option.help)
    group.add_argument("--calibrate", action="store_true",
                       help="measure this machine first (one thread's kernel speed on the "
                            "training rows, and the cost of a delta message over loopback "
                            "gRPC) and simulate with those instead of --speed, --overhead "
                            "and --bandwidth")


def simulate(settings: Settings, args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.commands.simulate import SimOptions, simulate_job

    if settings.initial_model:  # the simulator's workers start from zeros
        raise ConfigError("initial_model", "not supported by `hogwild simulate`")
    values = read_options({option.key: getattr(args, f"sim_{option.key}")
                           for option in SIM_OPTIONS})
    options = SimOptions(
        speeds=values["speeds"], speed=values["speed"], spread=values["speed_spread"],
        network=Network(latency=values["latency"], jitter=values["jitter"],
                        overhead=values["overhead"], bandwidth=values["bandwidth"]),
        slices=values["slices"], evals_per_epoch=values["evals_per_epoch"],
        max_events=values["max_events"], calibrate=bool(args.calibrate))
    simulate_job(settings, options)
    return 0
