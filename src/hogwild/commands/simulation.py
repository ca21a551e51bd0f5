"""`simulate`'s own flags (the machines and the network) and its handler; the job is hogwild.commands.simulate."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from hogwild.engine.network import DEFAULT_SPEED, LATENCIES, Network
from hogwild.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from hogwild.config import Settings


def add_simulation_flags(parser: argparse.ArgumentParser) -> None:
    """The simulated machines and network (the run's own settings come from the schema)."""
    net = Network()
    group = parser.add_argument_group("simulated machines and network")
    group.add_argument("--speed", type=float, default=DEFAULT_SPEED, metavar="NNZ_PER_S",
                       help="non-zeros one training thread processes per second")
    group.add_argument("--speeds", default="", metavar="LIST",
                       help="one speed per worker, comma-separated (overrides --speed)")
    group.add_argument("--speed-spread", type=float, default=0.0, metavar="SIGMA",
                       help="scatter the workers' speeds log-normally with this sigma "
                            "(seeded): stragglers")
    group.add_argument("--latency", type=float, default=net.latency, metavar="SECONDS",
                       help="mean time a message is in flight, per hop")
    group.add_argument("--jitter", choices=LATENCIES, default=net.jitter,
                       help="latency distribution: fixed, exponential, or uniform on "
                            "[0, 2 x latency]")
    group.add_argument("--overhead", type=float, default=net.overhead, metavar="SECONDS",
                       help="sender time per message (encoding, TLS, the RPC)")
    group.add_argument("--bandwidth", type=float, default=net.bandwidth, metavar="BYTES_PER_S",
                       help="bytes per second out of one node")
    group.add_argument("--slices", type=int, default=4, metavar="N",
                       help="steps per round between which arrived deltas are applied")
    group.add_argument("--evals-per-epoch", type=float, default=4.0, metavar="N",
                       help="validation evaluations of the coordinator's model per epoch")


def simulate(settings: Settings, args: argparse.Namespace) -> int:
    from hogwild.commands.simulate import SimOptions, simulate_job

    if settings.initial_model:  # the simulator's workers start from zeros
        raise ConfigError("initial_model", "not supported by `hogwild simulate`")

    try:
        speeds = tuple(float(x) for x in args.speeds.split(",") if x.strip())
        options = SimOptions(
            speeds=speeds, speed=args.speed, spread=args.speed_spread,
            network=Network(latency=args.latency, jitter=args.jitter,
                            overhead=args.overhead, bandwidth=args.bandwidth),
            slices=args.slices, evals_per_epoch=args.evals_per_epoch)
        if not all(math.isfinite(v) and v > 0 for v in (*speeds, args.speed)):
            raise ValueError("--speed and --speeds must be positive numbers")
        if args.speed_spread < 0 or args.slices < 1 or not args.evals_per_epoch > 0:
            raise ValueError("--speed-spread must be >= 0, --slices and --evals-per-epoch "
                             "positive")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    simulate_job(settings, options)
    return 0
