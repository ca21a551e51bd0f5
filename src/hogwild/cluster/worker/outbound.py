"""Where a worker's messages go: one sender (sender.py) per peer and one to the coordinator."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import grpc

from hogwild.cluster.transport.security import Security
from hogwild.cluster.transport.sender import Destination, Encoder
from hogwild.cluster.transport.timing import Timers
from hogwild.cluster.wire import pb_grpc
from hogwild.cluster.worker.phase import COORDINATOR_ID
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.shared import Signals
from hogwild.engine.tree import TreeLinks


class OutboundHost(Protocol):
    """What opening the destinations reads and sets on the worker (the node)."""

    worker_key: str
    peer_addresses: dict[int, str]
    destinations: dict[int, Destination]


class Outbound:
    """Opens the node's destinations, each with the sender key and batching its receiver needs."""

    def __init__(self, node: OutboundHost, signals: Signals, coordinator_address: str,
                 security: Security, timers: Timers, encoder: Encoder,
                 on_down: Callable[[int, str], None],
                 on_rejected: Callable[[int, str, grpc.StatusCode, str], None]) -> None:
        self.node = node
        self.signals = signals
        self.coordinator_address = coordinator_address
        self.security = security
        self.timers = timers
        self.encoder = encoder
        self.on_down = on_down          # a destination gave up (liveness)
        self.on_rejected = on_rejected  # a receiver no longer counts this worker (liveness)

    def open_destinations(self, plan: RunPlan, tree: TreeLinks | None) -> None:
        """One destination per peer (a tree's: per neighbour of ``tree``) and the
        coordinator's."""
        node = self.node
        give_up = max(plan.barrier_timeout, plan.rpc_timeout)
        destinations = {}
        with self.signals.cond:
            for pid, address in sorted(plan.peers.items()):
                if plan.topology == "star":
                    break  # deltas go to the coordinator only
                if tree is not None and pid not in tree.neighbours:
                    continue  # tree: parent and children only
                if pid in plan.down:
                    continue  # opened by PeerJoined when it is back
                address = node.peer_addresses.get(pid, address)
                destinations[pid] = self.peer_destination(plan, pid, address)
            destinations[COORDINATOR_ID] = Destination(
                "coordinator", COORDINATOR_ID, self.coordinator_address,
                pb_grpc.CoordinatorStub, plan.rpc_timeout, give_up,
                self.on_down, self.timers, coalesce=True,
                encoder=self.encoder,
                half=plan.compression.half,
                open_channel=functools.partial(self.security.channel,
                                               sender_key=node.worker_key),
                on_rejected=self.on_rejected)
            node.destinations = destinations

    def peer_destination(self, plan: RunPlan, pid: int, address: str) -> Destination:
        # Queued deltas are summed (bounded queues, one send to drain) wherever the order of
        # rounds does not matter: to the coordinator (it only sums), and to peers in async mode.
        # In sync mode a peer's barrier needs each round's delta on its own.
        return Destination(
            f"peer {pid}", pid, address, pb_grpc.WorkerStub, plan.rpc_timeout,
            max(plan.barrier_timeout, plan.rpc_timeout), self.on_down,
            self.timers, coalesce=plan.mode == "async", encoder=self.encoder,
            half=plan.compression.half,
            open_channel=functools.partial(self.security.channel,
                                           sender_key=plan.send_keys.get(pid, "")),
            on_rejected=self.on_rejected)
