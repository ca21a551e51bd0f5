"""A coordinator's tree root over 4 workers (fan-out 2), its sends captured, for the tree tests."""

from __future__ import annotations

from typing import Any

import grpc

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.tree_root import TreeRoot
from hogwild.cluster.transport.sender import Destination, OutgoingDelta

DIM = 10


def root_of_four(monkeypatch: Any, mode: str, n: int = 4
                 ) -> tuple[RunState, TreeRoot, dict[int, list[OutgoingDelta]]]:
    """4 workers (or ``n``), fan-out 2: the root's children are 0 and 1; 2 and 3 are 0's
    (and 6 is 2's, of 7). Returns the run state, the started root and what it sent each
    worker (nothing goes on the wire)."""
    sent: dict[int, list[OutgoingDelta]] = {w: [] for w in range(n)}

    def capture(self: Destination, delta: OutgoingDelta) -> None:
        sent[self.dest_id].append(delta)

    monkeypatch.setattr(Destination, "put_delta", capture)
    state = RunState(n)
    for w in range(n):
        state.roster.register(f"127.0.0.1:{9 + w}", 1)
    state.model.start_model(DIM)
    state.roster.tree_fanout = 2
    root = TreeRoot(state, {w: f"127.0.0.1:{9 + w}" for w in range(n)}, DIM, mode,
                    barrier_timeout=30.0, rpc_timeout=1.0, chunk_bytes=1 << 20,
                    open_channel=lambda wid, address: grpc.insecure_channel(address), fanout=2)
    root.start()
    return state, root, sent
