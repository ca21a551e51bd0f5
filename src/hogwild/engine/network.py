"""The simulated network: what one message costs a sender, and how long it is in flight.

Imports nothing heavy (the CLI reads its defaults for --help)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hogwild.settings.rules import BOUNDS
from hogwild.settings.simulation import DEFAULT_SPEED, DEFAULTS, LATENCIES

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_SPEED", "LATENCIES", "Network"]


@dataclass(frozen=True)
class Network:
    """The cost of one message from one node to a neighbour (defaults and ranges: the
    simulate options of hogwild.settings)."""

    latency: float = DEFAULTS["latency"]      # seconds in flight (mean)
    jitter: str = DEFAULTS["jitter"]          # fixed | exp | uniform (on [0, 2 x latency])
    overhead: float = DEFAULTS["overhead"]    # seconds of the sender's time per message
    bandwidth: float = DEFAULTS["bandwidth"]  # bytes per second out of one node

    def __post_init__(self) -> None:
        if self.jitter not in LATENCIES:
            raise ValueError(f"jitter must be one of {', '.join(LATENCIES)}")
        for name in ("latency", "overhead", "bandwidth"):
            if getattr(self, name) not in BOUNDS[name]:
                raise ValueError(f"{name} {BOUNDS[name].why}")

    def send_time(self, nbytes: int) -> float:
        """The sender's time for a message of ``nbytes`` of payload (model.compression's
        wire_bytes: dense or sparse, float32 or float16, as the cluster's codec sends it)."""
        return self.overhead + nbytes / self.bandwidth

    def draw_latency(self, rng: np.random.Generator) -> float:
        if self.jitter == "fixed" or self.latency == 0:
            return self.latency
        if self.jitter == "exp":
            return float(rng.exponential(self.latency))
        return float(rng.uniform(0.0, 2.0 * self.latency))
