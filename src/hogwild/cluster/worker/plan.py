"""RunPlan: the run configuration a worker receives (a validated copy of the RunConfig message)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import check_version, value_bound
from hogwild.config import check_values
from hogwild.engine.rules import ExchangeRules
from hogwild.errors import ConfigError, InvalidMessage
from hogwild.model.compression import Compression
from hogwild.model.losses import get_loss
from hogwild.model.schedule import SCHEDULES
from hogwild.model.spec import ModelSpec
from hogwild.settings.schema import default


@dataclass(frozen=True)
class RunPlan:
    """Everything a worker needs to train its shard and talk to its peers."""

    run_id: str
    worker_id: int
    peers: dict[int, str]
    dim: int
    n_features: int
    mode: str
    staleness: int | None
    threads: int
    round_size: int
    max_rounds: int
    train_rows: int
    start_offset: int
    loss: str
    learning_rate: float
    lr_schedule: str
    lr_decay: float
    power_t: float
    l2: float
    fit_bias: bool
    barrier_timeout: float
    rpc_timeout: float
    seed: int
    thread_buffer: bool = False
    model: str = "linear"
    hidden: tuple[int, ...] = ()
    binary_features: bool = False
    deep_lr_scale: float = 1.0  # mlp: the deep part's step over the wide part's
    send_keys: dict[int, str] = field(default_factory=dict)     # peer -> key we present
    receive_keys: dict[int, str] = field(default_factory=dict)  # peer -> key it presents
    first_round: int = 1        # > 1: joining a run under way (see LoadModel)
    examples_base: int = 0      # examples trained before (an earlier incarnation's)
    compression: Compression = field(default_factory=Compression)
    topology: str = "mesh"
    tree_fanout: int = default("tree_fanout")  # topology tree: children per node
    combine: str = "sum"        # sum | average: how the workers' deltas of a round add up
    # Peers dead at configure time: a mesh takes them back by PeerJoined, a tree routes around.
    down: frozenset[int] = frozenset()
    # What bounds a legitimate delta's values (RunConfig max_abs_value, run_threads): the
    # largest |x| of the run's training rows (None: not known) and every worker's threads.
    max_abs_value: float | None = None
    run_threads: int = 0
    # The weights of the rows labelled -1 and +1 (empty: every row weighs 1).
    class_weights: tuple[float, ...] = ()
    # A peer's delta norm per round against the median of recent ones (protocol/deltanorms).
    delta_norm_bound: float = 0.0

    @property
    def max_delta_value(self) -> float:
        """The largest |value| a legitimate delta of this run may carry (inf: no bound; see
        codec.value_bound)."""
        return value_bound(
            model=self.model, loss=self.loss, lr_schedule=self.lr_schedule,
            learning_rate=self.learning_rate, lr_decay=self.lr_decay, l2=self.l2,
            max_abs_value=self.max_abs_value, run_threads=self.run_threads,
            round_size=self.round_size, max_rounds=self.max_rounds,
            class_weights=self.class_weights)

    @property
    def spec(self) -> ModelSpec:
        """The model's kind and layout (validated when the plan was built)."""
        return ModelSpec(self.model, self.n_features, self.hidden, self.binary_features)

    @property
    def rules(self) -> ExchangeRules:
        """The exchange rules the round engine follows (engine/rules.py)."""
        return ExchangeRules(
            mode=self.mode, staleness=self.staleness, combine=self.combine,
            topology=self.topology,
            averaged_from=0 if self.combine == "average" else self.spec.shared_from,
            n_peers=len(self.peers), compression=self.compression)

    @property
    def loss_code(self) -> int:
        return get_loss(self.loss).code

    @property
    def schedule_code(self) -> int:
        return SCHEDULES[self.lr_schedule]

    @classmethod
    def from_message(cls, m: pb.RunConfig) -> RunPlan:
        """Validate a RunConfig; InvalidMessage names the first bad field."""
        check_version(m.protocol_version, "run config")

        def bad(name: str, why: str) -> InvalidMessage:
            return InvalidMessage(f"run config {name}: {why} (got {getattr(m, name)!r})")

        if not m.run_id:
            raise bad("run_id", "must be set")
        try:
            spec = ModelSpec(m.model or "linear", int(m.n_features), tuple(m.hidden),
                             bool(m.binary_features))
        except ValueError as exc:
            raise bad("model", str(exc)) from None
        if m.dim != spec.dim or m.dim > 2**31 - 1:
            raise bad("dim", f"must be {spec.dim} for this {spec.kind} model and fit int32")
        _check_settings(m, spec)
        # What follows is the wire's own: fields no setting holds, or holds in another form.
        if m.max_rounds < 1:
            raise bad("max_rounds", "must be >= 1")
        if m.first_round > m.max_rounds + 1:
            raise bad("first_round", "must be at most max_rounds + 1")
        for name in ("combine", "topology"):
            if getattr(m, name) == "auto":  # the settings' auto, which the coordinator resolves
                raise bad(name, "must be resolved by the coordinator, not auto")
        peers = {int(p.worker_id): p.address for p in m.peers}
        if len(peers) != len(m.peers) or m.worker_id in peers:
            raise bad("peers", "peer ids must be unique and differ from this worker's")
        max_abs_value = m.max_abs_value if m.HasField("max_abs_value") else None
        if max_abs_value is not None and not (0 <= max_abs_value < math.inf):
            raise bad("max_abs_value", "must be finite and non-negative")
        if m.run_threads and m.run_threads < m.threads:
            raise bad("run_threads", "must be 0 (not known) or at least this worker's threads")
        if len(m.class_weights) not in (0, 2) or not all(
                0 <= w < math.inf for w in m.class_weights):
            raise bad("class_weights", "must be empty or the weights of labels -1 and +1, "
                                       "finite and >= 0")
        if m.class_weights and (m.loss == "squared" or spec.is_mlp):
            raise bad("class_weights", "weigh a linear classifier's classes only")
        down = frozenset(int(p.worker_id) for p in m.peers if p.down)
        if down and m.topology not in ("", "mesh", "tree"):
            raise bad("peers", "only a mesh or a tree names peers that are down")
        return cls(
            run_id=m.run_id, worker_id=int(m.worker_id), peers=peers, dim=int(m.dim),
            n_features=int(m.n_features), mode=m.mode,
            staleness=None if m.staleness < 0 else int(m.staleness), threads=int(m.threads),
            round_size=int(m.round_size), max_rounds=int(m.max_rounds),
            train_rows=int(m.train_rows), start_offset=int(m.start_offset), loss=m.loss,
            learning_rate=float(m.learning_rate), lr_schedule=m.lr_schedule,
            lr_decay=float(m.lr_decay), power_t=float(m.power_t), l2=float(m.l2),
            fit_bias=bool(m.fit_bias), barrier_timeout=float(m.barrier_timeout),
            rpc_timeout=float(m.rpc_timeout), seed=int(m.seed),
            thread_buffer=bool(m.thread_buffer), model=spec.kind, hidden=spec.hidden,
            binary_features=spec.binary_features,
            deep_lr_scale=float(m.deep_lr_scale) if spec.is_mlp else 1.0,
            send_keys={int(p.worker_id): p.send_key for p in m.peers},
            receive_keys={int(p.worker_id): p.receive_key for p in m.peers},
            first_round=max(1, int(m.first_round)), examples_base=int(m.examples_base),
            compression=Compression(float(m.delta_threshold), int(m.delta_topk),
                                    m.delta_dtype == "float16"),
            topology=m.topology or "mesh", tree_fanout=int(m.tree_fanout) or default("tree_fanout"),
            combine=m.combine or "sum", down=down, max_abs_value=max_abs_value,
            run_threads=int(m.run_threads),
            class_weights=tuple(float(w) for w in m.class_weights),
            delta_norm_bound=float(m.delta_norm_bound))


# The RunConfig fields that are settings under the same names, checked by the schema's own
# rules, as the coordinator's settings were.
_SETTINGS = ("mode", "threads", "round_size", "loss", "learning_rate", "lr_schedule",
             "lr_decay", "power_t", "l2", "fit_bias", "barrier_timeout", "rpc_timeout", "seed",
             "thread_buffer", "delta_threshold", "delta_topk", "delta_norm_bound")


def _check_settings(m: pb.RunConfig, spec: ModelSpec) -> None:
    """InvalidMessage naming the first of ``m``'s settings that the schema refuses."""
    values = {key: getattr(m, key) for key in _SETTINGS}
    values["staleness"] = None if m.staleness == -1 else m.staleness  # -1: null, unbounded
    # proto3 sends "" for a text not set: the plan reads it as the default.
    values.update({key: getattr(m, key) for key in ("delta_dtype", "combine", "topology")
                   if getattr(m, key)})
    if spec.is_mlp:  # only the MLP reads deep_lr_scale (0 from a linear run's coordinator)
        values["deep_lr_scale"] = m.deep_lr_scale
    if m.topology == "tree":  # only a tree reads tree_fanout
        values["tree_fanout"] = m.tree_fanout
    try:
        check_values(values, "run config")
    except ConfigError as exc:
        raise InvalidMessage(f"run config {exc.key}: {exc.reason}") from None
