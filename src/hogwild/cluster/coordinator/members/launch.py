"""Starting the workers: the relay first (star, tree), then every live worker configured."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from hogwild.cluster.coordinator.members.links import WorkerLinks, parallel
from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.coordinator.runconfig import RunConfigs
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import StarRelay
from hogwild.cluster.coordinator.sums.tree_root import TreeRoot
from hogwild.cluster.transport.security import from_settings
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.config import Settings


def start_relay(settings: Settings, state: RunState, workers: list[WorkerRecord], dim: int,
                first_round: int) -> StarRelay | None:
    """Topology star (tree): start relaying deltas before any worker can send one. The
    tree's root relays like a star whose points are its children (the subtrees' sums)."""
    s = settings
    if s.topology not in ("star", "tree"):
        return None
    security = from_settings(s)
    points = {r.worker_id: r.address for r in workers}

    def channel(wid: int, address: str) -> grpc.Channel:
        return security.channel(address, state.roster.coordinator_key(wid))

    relay: StarRelay
    if s.topology == "tree":
        state.roster.tree_fanout = s.tree_fanout
        relay = TreeRoot(state, points, dim, s.mode, s.barrier_timeout, s.rpc_timeout,
                         s.chunk_bytes, channel, s.tree_fanout,
                         half=s.delta_dtype == "float16", first_round=first_round)
    else:
        relay = StarRelay(state, points, dim, s.mode, s.barrier_timeout, s.rpc_timeout,
                          s.chunk_bytes, channel, half=s.delta_dtype == "float16",
                          first_round=first_round)
    relay.start()
    return relay


def configure_and_start(links: WorkerLinks, configs: RunConfigs, workers: list[WorkerRecord],
                        first_round: int, load_model: bool,
                        started: Callable[[], None]) -> None:
    """Configure and start the live workers. A dead one (a resumed run that went on
    without it) is named down: mesh peers take it back if it rejoins, tree neighbours
    route around it (it comes back as a leaf of the coordinator). ``load_model``: every
    worker starts from the global model (a checkpoint's, or the warm start's).
    ``started()`` is called once the first Start may reach a worker."""
    live = [r for r in workers if not r.dead]
    named = configs.settings.topology in ("mesh", "tree")
    down = [r for r in workers if r.dead] if named else []

    def configure(record: WorkerRecord) -> None:
        links.call(record, "Configure", configs.build(
            record, live if named else workers, first_round=first_round,
            examples_base=record.examples, down=down))
        if load_model:
            links.load_model(record, configs.layout.dim)

    parallel(configure, live)
    start = pb.StartRequest(protocol_version=PROTOCOL_VERSION, run_id=configs.state.run_id)
    started()
    parallel(lambda r: links.call(r, "Start", start), live)
