"""Who may call a worker: the run id, the coordinator's key, and each peer's key checked."""

from __future__ import annotations

from typing import Protocol

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.security import same_key
from hogwild.cluster.wire.codec import check_version
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.tree_relay import TreeRelay
from hogwild.errors import NotAllowed, NotReady, StaleOrUnknown


class CallersHost(Protocol):
    """What the checks read of the worker (the node): its run, its coordinator's key, its plan."""

    run_id: str
    coordinator_key: str
    plan: RunPlan | None

    def wait_registered(self, timeout: float) -> None: ...


class Callers:
    """The checks every RPC handler makes before it touches the node's state."""

    def __init__(self, node: CallersHost, relay: TreeRelay) -> None:
        self.node = node
        self.relay = relay  # topology tree: who the neighbours are

    def check_run(self, version: int, run_id: str, what: str) -> None:
        node = self.node
        check_version(version, what)
        if not node.run_id or run_id != node.run_id:
            raise StaleOrUnknown(f"{what} for run {run_id!r}, which is not this worker's run")

    def check_coordinator(self, key: str, wait: float = 0.0) -> None:
        """NotAllowed unless ``key`` is the one this worker's coordinator presents (waits up
        to ``wait`` seconds for the registration that brings it)."""
        node = self.node
        node.wait_registered(wait)
        if not same_key(key, node.coordinator_key):
            raise NotAllowed("only this worker's coordinator may make this call")

    def check_peer(self, worker_id: int, key: str) -> None:
        """NotAllowed unless ``key`` is the one peer ``worker_id`` presents to this worker.

        The key is compared first: a caller whose key is none of those this worker knows is
        refused alike whatever it names, so that it learns nothing of the run (which ids are
        peers, the topology). Only a member of the run hears why else it is refused (a
        dropped peer must learn that it was dropped, and leaves and registers again)."""
        node = self.node
        plan = node.plan
        if plan is None:
            # This process is (re)starting: not a sign that the caller was dropped.
            raise NotReady("call from a peer before the run config")
        if not self.known_key(plan, worker_id, key):
            raise NotAllowed("the caller's key is not one this worker accepts")
        if plan.topology == "star" and worker_id != COORDINATOR_SENDER_ID:
            # The only sender of deltas is the coordinator, under its own id and key. Nobody
            # else sends in a star. A tree's worker taken back as a leaf of the coordinator
            # hears from its old neighbours until they drop it: UNAVAILABLE makes them do so
            # (FAILED_PRECONDITION would tell them they were dropped).
            raise NotReady(f"worker {worker_id}: this worker takes deltas from the "
                           "coordinator only")
        if worker_id == COORDINATOR_SENDER_ID and plan.topology != "mesh":
            if not same_key(key, node.coordinator_key):
                raise NotAllowed("the caller is not this worker's coordinator")
        else:
            expected = plan.receive_keys.get(worker_id)
            if expected is None:
                raise StaleOrUnknown(f"worker {worker_id} is not a peer of this worker")
            if not same_key(key, expected):
                raise NotAllowed(f"the caller is not worker {worker_id}")
        if plan.topology == "tree":
            # From the parent and the children only (tree_relay.py: or one that re-attached).
            self.relay.check_sender(plan, worker_id)

    def known_key(self, plan: RunPlan, worker_id: int, key: str) -> bool:
        """Whether ``key`` is one a sender presents to this worker: the named sender's (the
        usual case, compared first) or another's (a member naming a sender it is not)."""
        node = self.node
        named = (node.coordinator_key if worker_id == COORDINATOR_SENDER_ID
                 else plan.receive_keys.get(worker_id))
        if named is not None and same_key(key, named):
            return True
        return same_key(key, node.coordinator_key) or any(
            same_key(key, other) for other in plan.receive_keys.values())

