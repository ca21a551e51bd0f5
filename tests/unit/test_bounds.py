"""A setting's bounds are the schema's wherever they are checked: settings, trainer, worker plan."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hogwild import config
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import PROTOCOL_VERSION
from hogwild.cluster.worker.plan import RunPlan
from hogwild.engine.trainer import TrainParams
from hogwild.errors import ConfigError, InvalidMessage
from hogwild.model.schedule import SCHEDULES

FLOAT_KEYS = ["learning_rate", "lr_decay", "power_t", "l2", "deep_lr_scale"]
INT_KEYS = ["threads", "batch_size", "tree_fanout"]


def _probes(key: str) -> list[float]:
    """Values on and just beyond every edge of the key's bound (for a float, also those no
    bound admits)."""
    bound = config.BOUNDS[key]
    values = [bound.low, bound.high]
    for edge in (bound.low, bound.high):
        if math.isfinite(edge):
            values += [edge - 1, edge + 1]
            if key in FLOAT_KEYS:
                values += [math.nextafter(edge, -math.inf), math.nextafter(edge, math.inf)]
    if key in FLOAT_KEYS:
        return values + [math.nan, -math.inf, math.inf]
    return [int(v) for v in values if math.isfinite(v)]



def _settings_accept(key: str, value: float) -> bool:
    try:
        config.load(None, {}, {key: value})
    except ConfigError:
        return False
    return True


def _trainer_accepts(key: str, value: float) -> bool:
    try:
        TrainParams(**{key: value})
    except ValueError:
        return False
    return True


RUN_CONFIG: dict[str, Any] = {
    "protocol_version": PROTOCOL_VERSION, "run_id": "r", "worker_id": 0, "dim": 11,
    "n_features": 10, "mode": "sync", "staleness": -1, "threads": 1, "round_size": 10,
    "max_rounds": 2, "train_rows": 100, "loss": "hinge", "learning_rate": 0.1,
    "lr_schedule": "constant", "lr_decay": 0.9, "power_t": 0.5, "l2": 0.0,
    "fit_bias": True, "barrier_timeout": 1.0, "rpc_timeout": 1.0, "deep_lr_scale": 1.0,
    "topology": "tree", "tree_fanout": 2}


def _plan_accepts(key: str, value: float) -> bool:
    fields = dict(RUN_CONFIG)
    if key == "deep_lr_scale":  # a bound of the MLP's only
        fields.update(model="mlp", hidden=[2], dim=10 * 3 + 2 + 2 + 1)
    fields[key] = value
    try:
        RunPlan.from_message(pb.RunConfig(**fields))
    except InvalidMessage:
        return False
    return True


@pytest.mark.parametrize("key", FLOAT_KEYS + INT_KEYS)
def test_the_settings_check_the_schema_bound(key: str) -> None:
    bound = config.BOUNDS[key]
    for value in _probes(key):
        assert _settings_accept(key, value) == (value in bound), (key, value)


@pytest.mark.parametrize("key", ["learning_rate", "lr_decay", "power_t", "l2", "threads",
                                 "batch_size"])
def test_the_trainer_checks_the_schema_bound(key: str) -> None:
    bound = config.BOUNDS[key]
    for value in _probes(key):
        assert _trainer_accepts(key, value) == (value in bound), (key, value)


@pytest.mark.parametrize("key", ["learning_rate", "lr_decay", "power_t", "l2", "deep_lr_scale",
                                 "threads", "tree_fanout"])
def test_the_worker_plan_checks_the_schema_bound(key: str) -> None:
    bound = config.BOUNDS[key]
    for value in _probes(key):
        assert _plan_accepts(key, value) == (value in bound), (key, value)


def test_one_set_of_schedule_names() -> None:
    assert tuple(SCHEDULES) == config.SCHEDULES


@pytest.mark.parametrize("changes", [
    {"round_size": 1 << 63}, {"delta_topk": 1 << 63}, {"staleness": 0}, {"staleness": -2},
    {"rpc_timeout": math.inf}, {"barrier_timeout": 0.0}, {"delta_threshold": math.nan},
    {"delta_norm_bound": 1.5}, {"mode": "eventually"}, {"lr_schedule": ""},
    {"combine": "average", "delta_threshold": 0.1}])
def test_the_worker_plan_refuses_a_run_config_with_the_schemas_own_reason(
        changes: dict[str, Any]) -> None:
    """One source for each rule: a RunConfig field that is a setting is refused exactly when
    the schema refuses the setting, with the schema's words (the wire's -1 staleness being
    the setting's null)."""
    with pytest.raises(ConfigError) as schema:
        config.check_values(changes, "test")
    with pytest.raises(InvalidMessage) as wire:
        RunPlan.from_message(pb.RunConfig(**{**RUN_CONFIG, **changes}))
    assert str(wire.value) == f"run config {schema.value.key}: {schema.value.reason}"
