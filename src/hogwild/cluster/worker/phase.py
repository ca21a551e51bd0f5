"""A worker's lifecycle phases and the id its own coordinator destination goes under."""

from __future__ import annotations

from enum import Enum

# The key of the coordinator among a worker's destinations (peers go under their worker ids).
COORDINATOR_ID = -1


class Phase(Enum):
    STARTING = "starting"
    REGISTERED = "registered"
    SHARD = "shard received"
    CONFIGURED = "configured"
    RUNNING = "running"
    FINISHING = "finishing"
    DONE = "done"
