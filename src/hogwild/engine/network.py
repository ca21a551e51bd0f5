"""The simulated network: what one message costs a sender, and how long it is in flight.

Imports nothing heavy (the CLI reads its defaults for --help)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

LATENCIES = ("fixed", "exp", "uniform")
BYTES_PER_ENTRY = 8  # int32 index + float32 value on the wire
# Non-zeros one training thread processes per second: the kernel's order on one core.
DEFAULT_SPEED = 4e8


@dataclass(frozen=True)
class Network:
    """The cost of one message from one node to a neighbour."""

    latency: float = 2e-4        # seconds in flight (mean)
    jitter: str = "exp"          # fixed | exp | uniform (on [0, 2 x latency])
    overhead: float = 1e-3       # seconds of the sender's time per message
    bandwidth: float = 1.25e9    # bytes per second out of one node

    def __post_init__(self) -> None:
        if self.jitter not in LATENCIES:
            raise ValueError(f"jitter must be one of {', '.join(LATENCIES)}")
        for name in ("latency", "overhead"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0")
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise ValueError("bandwidth must be finite and > 0")

    def send_time(self, entries: int) -> float:
        return self.overhead + BYTES_PER_ENTRY * entries / self.bandwidth

    def draw_latency(self, rng: np.random.Generator) -> float:
        if self.jitter == "fixed" or self.latency == 0:
            return self.latency
        if self.jitter == "exp":
            return float(rng.exponential(self.latency))
        return float(rng.uniform(0.0, 2.0 * self.latency))
