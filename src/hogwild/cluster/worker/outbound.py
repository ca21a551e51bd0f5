"""Where a worker's messages go: one sender (sender.py) per peer and one to the coordinator."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from hogwild.cluster.transport.sender import Destination
from hogwild.cluster.wire import pb_grpc
from hogwild.cluster.worker.phase import COORDINATOR_ID
from hogwild.cluster.worker.plan import RunPlan

if TYPE_CHECKING:
    from hogwild.cluster.worker.node import WorkerNode


class Outbound:
    """Opens the node's destinations, each with the sender key and batching its receiver needs."""

    def __init__(self, node: WorkerNode) -> None:
        self.node = node

    def open_destinations(self, plan: RunPlan) -> None:
        node = self.node
        give_up = max(plan.barrier_timeout, plan.rpc_timeout)
        destinations = {}
        with node.cond:
            for pid, address in sorted(plan.peers.items()):
                if plan.topology == "star":
                    break  # deltas go to the coordinator only
                if node.tree is not None and pid not in node.tree.neighbours:
                    continue  # tree: parent and children only
                if pid in plan.down:
                    continue  # opened by PeerJoined when it is back
                address = node.peer_addresses.get(pid, address)
                destinations[pid] = self.peer_destination(plan, pid, address)
            destinations[COORDINATOR_ID] = Destination(
                "coordinator", COORDINATOR_ID, node.settings.coordinator_address,
                pb_grpc.CoordinatorStub, plan.rpc_timeout, give_up,
                node.liveness.on_destination_down, node.timers, coalesce=True,
                encoder=node.loop.encode_delta,
                half=plan.compression.half,
                open_channel=functools.partial(node.security.channel,
                                               sender_key=node.worker_key),
                on_rejected=node.liveness.on_rejected)
            node.destinations = destinations

    def peer_destination(self, plan: RunPlan, pid: int, address: str) -> Destination:
        node = self.node
        # Queued deltas are summed (bounded queues, one send to drain) wherever the order of
        # rounds does not matter: to the coordinator (it only sums), and to peers in async mode.
        # In sync mode a peer's barrier needs each round's delta on its own.
        return Destination(
            f"peer {pid}", pid, address, pb_grpc.WorkerStub, plan.rpc_timeout,
            max(plan.barrier_timeout, plan.rpc_timeout), node.liveness.on_destination_down,
            node.timers, coalesce=plan.mode == "async", encoder=node.loop.encode_delta,
            half=plan.compression.half,
            open_channel=functools.partial(node.security.channel,
                                           sender_key=plan.send_keys.get(pid, "")),
            on_rejected=node.liveness.on_rejected)
