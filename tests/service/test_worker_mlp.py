"""A real Worker server configured for the MLP: its start vector and how its deltas are built."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.model.spec import ModelSpec

from .conftest import PEER_KEY, WorkerServer
from .test_worker_service import N_FEATURES, PEER, _big_shard, _ship

SPEC = ModelSpec("mlp", N_FEATURES, (4, 3))
SEED = 11


def _configure_mlp(worker: WorkerServer, **changes: object) -> None:
    node = worker.node
    fields: dict[str, object] = {
        "protocol_version": PROTOCOL_VERSION, "run_id": node.run_id,
        "worker_id": node.worker_id,
        "peers": [pb.Peer(worker_id=PEER, address="127.0.0.1:1", receive_key=PEER_KEY)],
        "dim": SPEC.dim, "n_features": N_FEATURES, "mode": "sync", "staleness": -1,
        "threads": 2, "round_size": 100, "max_rounds": 3, "train_rows": 60_000,
        "loss": "logistic", "learning_rate": 0.1, "lr_schedule": "constant", "lr_decay": 0.9,
        "power_t": 0.5, "l2": 0.0, "fit_bias": True, "barrier_timeout": 2.0,
        "rpc_timeout": 2.0, "seed": SEED, "model": "mlp", "hidden": [4, 3],
        "deep_lr_scale": 0.5}
    fields.update(changes)
    worker.stub.Configure(pb.RunConfig(**fields), timeout=5)


def test_mlp_worker_starts_from_the_seeded_vector_and_averages_the_dense_part(
        worker_server: WorkerServer) -> None:
    _ship(worker_server, _big_shard(2000, 4))
    _configure_mlp(worker_server)
    node = worker_server.node
    assert node.plan is not None and node.plan.spec == SPEC
    assert node.plan.deep_lr_scale == 0.5
    start = SPEC.initial_weights(SEED)
    np.testing.assert_array_equal(node.w, start)  # what the coordinator starts from too
    np.testing.assert_array_equal(node.snap, start)
    assert node.hot == 0
    tail = SPEC.shared_from
    # This round's own changes: +2 on a W1 entry, +1 on b1[0] and on the output bias.
    node.w[7] += 2.0
    node.w[tail] += 1.0
    node.w[-1] += 1.0
    node.loop.exchange(node.plan, 1, final=False)
    # One live peer: the dense part's change is halved (averaged), W1's is summed; the
    # snapshot moved by what was sent.
    assert node.w[7] == pytest.approx(start[7] + 2.0)
    assert node.w[tail] == pytest.approx(start[tail] + 0.5)
    assert node.w[-1] == pytest.approx(start[-1] + 0.5)
    np.testing.assert_allclose(node.snap, node.w, atol=1e-6)


def test_mlp_run_config_with_the_linear_dim_is_refused(worker_server: WorkerServer) -> None:
    _ship(worker_server, _big_shard(2000, 4))
    with pytest.raises(grpc.RpcError) as info:
        _configure_mlp(worker_server, dim=N_FEATURES + 1)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "dim" in (info.value.details() or "")
    assert worker_server.node.plan is None
