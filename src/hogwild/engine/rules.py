"""What a round may do: the exchange rules of a run, the barrier and the staleness gate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hogwild.errors import ConfigError
from hogwild.model.compression import Compression
from hogwild.settings.rules import COMBINES, TOPOLOGIES
from hogwild.settings.schema import check_values


class PeerView(Protocol):
    """What the gates need to know of a peer (the worker's inbox keeps more)."""

    @property
    def round(self) -> int:
        """The highest round whose delta from this peer has arrived complete."""

    @property
    def settled(self) -> bool:
        """Never to be waited for again (finished or dropped)."""


@dataclass(frozen=True)
class ExchangeRules:
    """How the workers of a run exchange their deltas (a worker's view of the run config)."""

    mode: str = "sync"
    staleness: int | None = None   # async: rounds a peer may lag before this worker waits
    combine: str = "sum"           # sum | average
    topology: str = "mesh"
    averaged_from: int = 0         # first weight of the averaged part (the bias at least)
    n_peers: int = 0               # the other workers of the run
    compression: Compression = field(default_factory=Compression)

    def __post_init__(self) -> None:
        try:
            check_values({"mode": self.mode, "staleness": self.staleness}, "exchange rules")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        # A run's topology and combine: the settings' values with auto resolved.
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}")
        if self.combine not in COMBINES:
            raise ValueError(f"combine must be one of {', '.join(COMBINES)}")

    @property
    def defers(self) -> bool:
        """Whether the averaged part of own changes is settled late (async mesh only; block
        momentum filters the whole change at once in every mode)."""
        return self.mode == "async" and self.topology == "mesh" and self.combine != "momentum"


def contributing(rules: ExchangeRules, peers: Mapping[int, PeerView]) -> int:
    """This worker and the peers still sending deltas (a finished or dropped one sends no
    more)."""
    count = 1 + sum(1 for p in peers.values() if not p.settled)
    if rules.topology in ("star", "tree"):
        # The relay (the tree) hides the peers: count them all (after a drop this
        # under-corrects, which is stable, where over-counting would overshoot).
        count = 1 + rules.n_peers if count > 1 else 1
    return count


def barrier_ready(round_: int, peers: Mapping[int, PeerView]) -> bool:
    """Sync: every live peer's delta of ``round_`` is in."""
    return all(p.settled or p.round >= round_ for p in peers.values())


def may_start(rules: ExchangeRules, round_: int, peers: Mapping[int, PeerView]) -> bool:
    """Async: round ``round_`` may start now. Once it is done this worker is ``round_``
    rounds in; a peer more than ``staleness`` rounds behind that holds it back."""
    if rules.staleness is None:
        return True
    return all(p.settled or p.round >= round_ - rules.staleness for p in peers.values())


def lag(round_: int, peers: Mapping[int, PeerView]) -> int:
    """How many rounds the slowest live peer's deltas trail ``round_`` (0 when none lags)."""
    live = [p.round for p in peers.values() if not p.settled]
    return max(0, round_ - min(live)) if live else 0
