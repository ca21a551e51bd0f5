"""A member's delta with huge but finite values (1e30): refused by the bound on what the run's
SGD steps can make, at a worker and at the coordinator, with the model untouched; a
legitimate delta, even one summing every worker's every round, stays well inside it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hogwild import config
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import (
    VALUE_BOUND_FACTOR,
    DeltaHeader,
    check_values,
    decode_delta,
    encode_delta,
    encode_delta_parts,
    value_bound,
)
from hogwild.cluster.worker.inbox import Inbox
from hogwild.cluster.worker.node import WorkerNode
from hogwild.cluster.worker.phase import Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.engine.round import RoundEngine
from hogwild.errors import InvalidMessage, StaleOrUnknown
from hogwild.model import kernels

N_FEATURES = 1000
DIM = N_FEATURES + 1
RUN = "run-1"
HUGE = 1e30

# The settings of the runs below (hinge, constant step 0.1, |x| <= 2, 3 workers x 2 threads).
SETTINGS: dict[str, Any] = {
    "model": "linear", "loss": "hinge", "lr_schedule": "constant", "learning_rate": 0.1,
    "lr_decay": 0.9, "l2": 1e-4, "max_abs_value": 2.0, "run_threads": 6, "round_size": 10,
    "max_rounds": 20}


def _bound(**changes: Any) -> float:
    return value_bound(**{**SETTINGS, **changes})


def _message(sender: int, values: tuple[float, ...], seq: int = 1, round_: int = 1,
             indices: tuple[int, ...] | None = None) -> pb.Delta:
    idx = np.arange(len(values), dtype=np.int32) if indices is None else np.array(indices)
    message = encode_delta(DeltaHeader(RUN, sender, round_, seq, DIM), idx.astype(np.int32),
                           np.array(values, np.float32))
    return pb.Delta.FromString(message.SerializeToString())


# ------------------------------------------------------------------------------ the bound


def test_the_bound_is_finite_where_the_gradient_is_bounded_and_inf_elsewhere() -> None:
    for loss in ("hinge", "logistic"):
        for schedule in ("inverse", "invscaling", "constant"):
            assert math.isfinite(_bound(loss=loss, lr_schedule=schedule))
            assert _bound(loss=loss, lr_schedule=schedule) < HUGE
    # The squared loss's gradient m - y has no bound; the MLP's hidden layers neither.
    assert _bound(loss="squared") == math.inf
    assert _bound(model="mlp") == math.inf
    # Unknown to the receiver (an older coordinator; shipping local): finiteness only.
    assert _bound(max_abs_value=None) == math.inf
    assert _bound(run_threads=0) == math.inf
    # Settings that void the argument: a growing step, an L2 step that flips weights.
    assert _bound(lr_decay=1.5) == math.inf
    assert math.isfinite(_bound(lr_decay=1.5, lr_schedule="inverse"))
    assert _bound(learning_rate=2.0, l2=0.6) == math.inf
    # Values the settings' bounds refuse, and a class weight that overflows the step.
    for change in ({"learning_rate": 0.0}, {"learning_rate": math.nan}, {"l2": -1e-9},
                   {"l2": math.inf}, {"learning_rate": 1e308, "class_weights": (10.0, 1.0)}):
        assert _bound(**change) == math.inf, change


def test_the_bound_grows_with_what_the_run_can_do() -> None:
    base = _bound()
    for change in ({"learning_rate": 0.2}, {"max_abs_value": 4.0}, {"run_threads": 12},
                   {"round_size": 20}, {"max_rounds": 40}, {"l2": 1e-2}):
        assert _bound(**change) > base, change
    # The bias's "feature" is 1: data with |x| < 1 bound it as |x| = 1 does.
    assert _bound(max_abs_value=0.0) == _bound(max_abs_value=1.0)


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
@pytest.mark.parametrize("schedule", ["constant", "invscaling", "inverse"])
def test_every_step_of_every_worker_summed_stays_inside_the_bound(loss: str,
                                                                  schedule: str) -> None:
    """The worst a relay can send: the sum of every worker's change over every round. Rows
    chosen to push weights one way (every feature at +-|x|max with the label's sign, all
    labels +1 for the bias); a worker's change is its own SGD from the same start, as in
    a round of sync SGD; the sum still fits without the headroom factor."""
    rng = np.random.default_rng(0)
    workers, threads, round_size, rounds, x_max = 3, 2, 10, 20, 2.0
    steps = threads * round_size * rounds
    n_rows = steps
    rows = [np.unique(rng.choice(20, 8)) for _ in range(n_rows)]  # ascending, as CSR wants
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    idx = np.concatenate(rows).astype(np.int32)
    labels = np.ones(n_rows, np.float32)
    vals = np.full(idx.shape[0], x_max, np.float32)
    lr, l2 = 0.1, 1e-4
    total = np.zeros(N_FEATURES + 1)
    for _ in range(workers):
        w = np.zeros(N_FEATURES + 1)
        code, lr0, power_t, shift = _schedule(schedule, lr, n_rows)
        kernels.sgd_range(indptr, idx, vals, labels, 0, n_rows, w, N_FEATURES,
                          {"hinge": 0, "logistic": 1}[loss], lr0, code, power_t, 1.0 + shift,
                          l2, True)
        total += w
    bound = value_bound(model="linear", loss=loss, lr_schedule=schedule, learning_rate=lr,
                        lr_decay=0.9, l2=l2, max_abs_value=x_max,
                        run_threads=workers * threads, round_size=round_size,
                        max_rounds=rounds)
    assert np.abs(total).max() > 0.5                   # the run did move the weights
    assert np.abs(total).max() <= bound / VALUE_BOUND_FACTOR


def _schedule(name: str, lr: float, rows: int) -> tuple[int, float, float, float]:
    from hogwild.model.schedule import kernel_schedule

    return kernel_schedule(name, lr, 0.9, 0.5, 0, rows)


def test_check_values_refuses_only_beyond_the_bound() -> None:
    bound = _bound()
    ok = decode_delta(_message(1, (bound, -bound, 0.0)), DIM)
    check_values(ok, bound)
    check_values(decode_delta(_message(1, (HUGE,)), DIM), math.inf)
    with pytest.raises(InvalidMessage, match="beyond what this run"):
        check_values(decode_delta(_message(1, (0.5, -HUGE)), DIM), bound)
    with pytest.raises(InvalidMessage, match="beyond what this run"):
        decode_delta(_message(1, (0.5, HUGE)), DIM, bound)
    with pytest.raises(InvalidMessage, match="not finite"):
        decode_delta(_message(1, (0.5, math.inf)), DIM, bound)
    # Dense parts and float16 values go through the same scan.
    dense = encode_delta_parts(DeltaHeader(RUN, 1, 1, 1, DIM), np.arange(DIM, dtype=np.int32),
                               np.full(DIM, 1e6, np.float32), dense=True)
    with pytest.raises(InvalidMessage, match="beyond"):
        decode_delta(dense[0], DIM, 1e5)
    half = encode_delta(DeltaHeader(RUN, 1, 1, 1, DIM), np.array([3], np.int32),
                        np.array([60000.0], np.float16))
    with pytest.raises(InvalidMessage, match="beyond"):
        decode_delta(half, DIM, 1e3)


# ---------------------------------------------------------------------------- the worker


def _config(**changes: Any) -> pb.RunConfig:
    fields: dict[str, Any] = {
        "protocol_version": PROTOCOL_VERSION, "run_id": RUN, "worker_id": 0,
        "peers": [pb.Peer(worker_id=p, address=f"127.0.0.1:{p + 1}", send_key=f"to-{p}",
                          receive_key=f"key-of-{p}") for p in (1, 2)],
        "dim": DIM, "n_features": N_FEATURES, "mode": "sync", "staleness": -1, "threads": 2,
        "round_size": 10, "max_rounds": 20, "train_rows": 100, "loss": "hinge",
        "learning_rate": 0.1, "lr_schedule": "constant", "lr_decay": 0.9, "power_t": 0.5,
        "l2": 1e-4, "fit_bias": True, "barrier_timeout": 2.0, "rpc_timeout": 2.0,
        "max_abs_value": 2.0, "run_threads": 6}
    fields.update(changes)
    return pb.RunConfig(**{k: v for k, v in fields.items() if v is not None})


def _node(**changes: Any) -> WorkerNode:
    """A worker configured in a run of 3 and running at round 3, without a shard or a
    server (what push_delta looks at)."""
    node = WorkerNode(config.load(None, {}, {"bind_host": "127.0.0.1", "workers": 3}))
    plan = RunPlan.from_message(_config(**changes))
    node.run_id, node.worker_id, node.coordinator_key = RUN, 0, "coordinator-key"
    node.plan = plan
    node.engine = RoundEngine(plan.rules, np.zeros(plan.dim))
    node.inbox = Inbox(node.senders(plan), 0)
    node.counters.rounds, node.phase = 3, Phase.RUNNING
    return node


def _push(node: WorkerNode, message: pb.Delta) -> bool:
    node.check_peer(message.worker_id, f"key-of-{message.worker_id}")
    return node.push_delta(message)


def test_the_run_config_carries_what_the_bound_needs() -> None:
    plan = RunPlan.from_message(_config())
    assert plan.max_abs_value == 2.0 and plan.run_threads == 6
    assert plan.max_delta_value == _bound()
    old = RunPlan.from_message(_config(max_abs_value=None, run_threads=None))
    assert old.max_abs_value is None and old.max_delta_value == math.inf
    for bad in ({"max_abs_value": -1.0}, {"max_abs_value": math.inf},
                {"max_abs_value": math.nan}, {"run_threads": 1}):
        with pytest.raises(InvalidMessage, match=next(iter(bad))):
            RunPlan.from_message(_config(**bad))


def test_a_members_huge_delta_is_refused_by_a_worker_and_its_sender_dropped() -> None:
    node = _node()
    with pytest.raises(InvalidMessage, match="beyond what this run"):
        _push(node, _message(1, (0.25, HUGE), round_=3))
    assert node.inbox.queued() == 0 and node.inbox.peers[1].round == 0
    assert not node.w.any()
    # Counted, and dropped: no barrier waits for it (it would never send a round-3 delta
    # the others take), and what it sends next is refused.
    assert node.inbox.refused == {1: 1} and node.inbox.peers[1].settled
    with pytest.raises(StaleOrUnknown, match="dropped"):
        _push(node, _message(1, (0.25, -0.5), round_=3))
    # Another member's delta still goes, and is applied whole.
    assert not _push(node, _message(2, (0.25, -0.5), round_=3))
    assert node.loop.apply_inbox() == 1
    assert node.w[0] == 0.25 and node.w[1] == -0.5


def test_the_coordinators_relayed_sum_is_checked_too() -> None:
    """Star: the relay's aggregate comes under the coordinator's id and key."""
    from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID

    node = _node(topology="star")
    node.check_peer(COORDINATOR_SENDER_ID, "coordinator-key")
    with pytest.raises(InvalidMessage, match="beyond"):
        node.push_delta(_message(COORDINATOR_SENDER_ID, (HUGE,), round_=3))
    assert node.inbox.queued() == 0 and not node.w.any()


def test_without_a_bound_only_finiteness_is_checked() -> None:
    """An older coordinator (no max_abs_value) and the squared loss: 1e30 goes (documented);
    infinity does not."""
    for node in (_node(max_abs_value=None), _node(loss="squared")):
        assert not _push(node, _message(1, (HUGE,), round_=3))
        with pytest.raises(InvalidMessage, match="not finite"):
            _push(node, _message(1, (math.inf,), seq=2, round_=3))


# ----------------------------------------------------------------------- the coordinator


def _state(bound: float) -> RunState:
    state = RunState(2, run_id=RUN)
    for w in range(2):
        state.roster.register(f"127.0.0.1:{9 + w}", 1)
    state.model.start_model(DIM)
    state.model.max_delta_value = bound
    return state


def test_a_members_huge_delta_is_refused_by_the_coordinator_and_nothing_is_recorded() -> None:
    state = _state(_bound())
    with pytest.raises(InvalidMessage, match="beyond what this run"):
        state.model.apply_delta(decode_delta(_message(1, (0.5, -HUGE), round_=2), DIM))
    assert not state.model.model_copy().any()
    assert state.model.deltas_received == 0 and state.roster.workers[1].round == 0
    # Its seq was not taken: the same seq with legitimate values is applied.
    assert state.model.apply_delta(decode_delta(_message(1, (0.5, -0.75), round_=2), DIM))
    assert state.model.model_copy()[1] == -0.75 and state.model.deltas_received == 1


# ------------------------------------------------------------------ what the driver sends


def test_the_coordinator_sends_the_bound_and_holds_the_same_one(tmp_path: Any) -> None:

    from hogwild.cluster.coordinator.data.worker_shares import Shipper
    from hogwild.cluster.coordinator.members.links import WorkerLinks
    from hogwild.cluster.coordinator.runconfig import Layout, RunConfigs
    from hogwild.data.csr import CSRData
    from hogwild.model.spec import ModelSpec

    settings = config.load(None, {}, {"bind_host": "127.0.0.1", "workers": 2,
                                      "out_dir": str(tmp_path), "loss": "hinge"})
    state = RunState(2, run_id=RUN)
    for w in range(2):
        state.roster.register(f"127.0.0.1:{9 + w}", 3)
    state.model.start_model(11)
    shards = [CSRData(np.array([0, 2]), np.array([1, 3]), np.array([0.5, -2.5]),
                      np.array([1.0]), 10),
              CSRData(np.array([0, 1]), np.array([4]), np.array([1.5]), np.array([-1.0]), 10)]
    shipper = Shipper(settings, state, WorkerLinks(settings, state), shards, None, print)
    configs = RunConfigs(settings, state, ModelSpec.linear(10), Layout(11, 10, 2, 20, 10, 2),
                         shipper.max_abs_value())
    message = configs.build(state.roster.workers[0], list(state.roster.workers.values()))
    assert message.max_abs_value == 2.5 and message.run_threads == 6
    plan = RunPlan.from_message(message)
    assert math.isfinite(plan.max_delta_value)
    assert state.model.max_delta_value == plan.max_delta_value
    # A worker back with more threads: its config and the coordinator's bound grow, never
    # shrink (a delta once admitted is admitted again).
    state.roster.workers[1].threads = 8
    again = configs.build(state.roster.workers[1], list(state.roster.workers.values()))
    assert again.run_threads == 16 and state.model.max_delta_value > plan.max_delta_value
    state.roster.workers[1].threads = 1
    configs.build(state.roster.workers[1], list(state.roster.workers.values()))
    assert state.model.max_delta_value == RunPlan.from_message(again).max_delta_value
