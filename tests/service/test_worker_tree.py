"""A real Worker server in topology tree: deltas only from its parent and children; a sender
further down its heap path re-attaches around the workers in between, a cousin is refused."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.worker.phase import COORDINATOR_ID

from .conftest import PEER_KEY, WorkerServer
from .test_worker_service import DIM, N_FEATURES, _big_shard, _delta, _expect, _ship

N = 7  # fan-out 2: the coordinator -> 0, 1; 0 -> 2, 3; 1 -> 4, 5; 2 -> 6


def _configure_in_tree(worker_server: WorkerServer, down: frozenset[int] = frozenset()
                       ) -> WorkerServer:
    node = worker_server.node
    assert node.worker_id == 0
    _ship(worker_server, _big_shard(2000, 4))
    worker_server.stub.Configure(pb.RunConfig(
        protocol_version=PROTOCOL_VERSION, run_id=node.run_id, worker_id=0,
        peers=[pb.Peer(worker_id=p, address=f"127.0.0.1:{p}", receive_key=PEER_KEY,
                       down=p in down)
               for p in range(1, N)], dim=DIM, n_features=N_FEATURES,
        mode="sync", staleness=-1, threads=1, round_size=100, max_rounds=3, train_rows=2000,
        loss="hinge", learning_rate=0.1, lr_schedule="constant", lr_decay=0.9, power_t=0.5,
        fit_bias=True, barrier_timeout=2.0, rpc_timeout=2.0, topology="tree", tree_fanout=2),
        timeout=5)
    return worker_server


@pytest.fixture
def in_tree(worker_server: WorkerServer) -> WorkerServer:
    return _configure_in_tree(worker_server)


def test_a_peer_down_at_configure_is_routed_around_from_the_start(
        worker_server: WorkerServer) -> None:
    # A resumed run that went on without worker 2 (this worker's child): its children are
    # this worker's from the start, nothing is sent to it, none of its deltas is taken.
    node = _configure_in_tree(worker_server, down=frozenset({2})).node
    assert node.relay.tree is not None and node.relay.dead == {2}
    assert sorted(node.relay.tree.neighbours) == [3, 6, COORDINATOR_SENDER_ID]
    assert node.inbox.peers[2].settled and not node.inbox.peers[6].settled
    assert set(node.destinations) - {COORDINATOR_ID} == {3, 6}
    _expect(worker_server, _delta(node.run_id, worker_id=2), grpc.StatusCode.FAILED_PRECONDITION)
    assert not worker_server.peer_stub.PushDelta(_delta(node.run_id, worker_id=6),
                                                 timeout=5).duplicate
    assert node.loop.apply_inbox() == 1


def test_deltas_only_from_tree_neighbours(in_tree: WorkerServer) -> None:
    node = in_tree.node
    assert node.relay.tree is not None
    assert sorted(node.relay.tree.neighbours) == [2, 3, COORDINATOR_SENDER_ID]
    assert not in_tree.peer_stub.PushDelta(_delta(node.run_id, worker_id=2), timeout=5).duplicate
    assert node.loop.apply_inbox() == 1
    for stranger in (1, 4, 5):  # its sibling and cousins: no edge, whoever dies
        _expect(in_tree, _delta(node.run_id, worker_id=stranger),
                grpc.StatusCode.FAILED_PRECONDITION)
    # The coordinator's sender id needs the coordinator's key.
    _expect(in_tree, _delta(node.run_id, worker_id=COORDINATOR_SENDER_ID),
            grpc.StatusCode.PERMISSION_DENIED)


def test_a_grandchild_re_attaches_around_a_dead_child(in_tree: WorkerServer) -> None:
    node = in_tree.node
    assert node.relay.tree is not None
    # 6's parent is 2: a delta from 6 says 2 died, so 6 becomes this worker's child.
    assert not in_tree.peer_stub.PushDelta(_delta(node.run_id, worker_id=6), timeout=5).duplicate
    assert sorted(node.relay.tree.neighbours) == [3, 6, COORDINATOR_SENDER_ID]
    assert node.inbox.peers[2].dropped and 2 in node.relay.dead
    assert node.loop.apply_inbox() == 1
    expected = np.zeros(DIM)
    expected[[1, 50, N_FEATURES]] = [0.25, -0.5, 1.5]
    assert node.w.tobytes() == expected.tobytes()
    # The dead child is refused from now on.
    _expect(in_tree, _delta(node.run_id, worker_id=2, seq=2), grpc.StatusCode.FAILED_PRECONDITION)
