"""What each worker is configured with: the run's layout, its round size, its RunConfig."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.codec import value_bound
from hogwild.config import Settings
from hogwild.engine.round_size import choose_round_size, fit_round_size, max_rounds, round_rule
from hogwild.model.spec import ModelSpec
from hogwild.settings.rules import resolve_combine, resolve_topology

log = logging.getLogger("hogwild.coordinator")


@dataclass
class Layout:
    """The shape of the run every worker is configured with."""

    dim: int
    n_features: int
    train_rows: int
    max_rounds: int
    round_size: int
    workers: int


@dataclass(frozen=True)
class TrainShape:
    """The size of the training set, whether the coordinator holds it or the workers read it."""

    n_rows: int
    nnz: int
    n_features: int


def round_size(settings: Settings, train: TrainShape, workers: list[WorkerRecord],
               dim: int = 0) -> int:
    """Examples per thread per round for the threads the workers registered with, on a
    model of ``dim`` weights."""
    combine = resolve_combine(settings.combine, train.n_rows, len(workers))
    threads = sum(r.threads for r in workers)
    size = choose_round_size(settings.round_size, train.n_rows, train.nnz, threads,
                             combine, len(workers), dim)
    work, at_least = round_rule(combine, len(workers), train.nnz / max(1, threads), dim)
    if settings.round_size is None:
        size = fit_round_size(size, train.n_rows, threads, settings.epochs)
        log.info("round_size auto: %d examples per thread (about %d non-zeros of work per "
                 "round, at least %d round(s) per epoch, whole rounds making %g epochs)",
                 size, work, at_least, settings.epochs)
    elif size != settings.round_size:
        log.info("round_size %d capped to %d examples per thread (at least %d round(s) per "
                 "epoch with combine %s)", settings.round_size, size, at_least, combine)
    return size


def run_max_rounds(settings: Settings, workers: list[WorkerRecord], train_rows: int,
                   size: int) -> int:
    return max_rounds(settings.epochs, train_rows, sum(r.threads for r in workers), size)


class RunConfigs:
    """Builds each worker's RunConfig, and keeps the coordinator's bound on delta values in
    step with the one each config implies."""

    def __init__(self, settings: Settings, state: RunState, spec: ModelSpec, layout: Layout,
                 max_abs_value: float | None, class_weights: tuple[float, ...] = ()) -> None:
        self.settings = settings
        self.state = state
        self.spec = spec
        self.layout = layout
        self.max_abs_value = max_abs_value  # largest |x| shipped (None: not seen here)
        self.class_weights = class_weights  # of labels -1 and +1 (empty: unweighted)

    def value_bound_fields(self, record: WorkerRecord) -> tuple[float | None, int]:
        """(max_abs_value, run_threads) for a worker's RunConfig, and the coordinator's own
        bound on delta values updated to match. Every place counted with the most threads
        any worker registered with: at least the sum, and room for a worker that comes
        back with more (the bound only grows, so no delta it once admitted is refused)."""
        most = max([record.threads, *(r.threads for r in self.state.roster.workers.values())])
        run_threads = max(self.layout.workers, len(self.state.roster.workers), 1) * most
        lay, s = self.layout, self.settings
        bound = value_bound(
            model=self.spec.kind, loss=s.loss, lr_schedule=s.lr_schedule,
            learning_rate=s.learning_rate, lr_decay=s.lr_decay, l2=s.l2,
            max_abs_value=self.max_abs_value, run_threads=run_threads,
            round_size=lay.round_size, max_rounds=lay.max_rounds,
            class_weights=self.class_weights)
        # Only ever raised (the first config sets it from inf: no bound before the run).
        held = self.state.model.max_delta_value
        if held == math.inf or bound > held:
            self.state.model.max_delta_value = bound
        return self.max_abs_value, run_threads

    def build(self, record: WorkerRecord, peers: list[WorkerRecord], first_round: int = 1,
              examples_base: int = 0, down: list[WorkerRecord] | None = None,
              topology: str | None = None) -> pb.RunConfig:
        """``down``: peers dead now, named all the same (mesh) so that the worker takes
        them back when they rejoin (its PeerJoined refuses a worker that is no peer).
        ``topology``: this worker's, if not the run's (a tree's worker taken back: star)."""
        s, lay, keys = self.settings, self.layout, self.state.roster.keys
        down_ids = {r.worker_id for r in down or []}
        replicate = s.shipping == "replicate"
        start_offset = (lay.train_rows * record.worker_id // lay.workers) if replicate else 0
        max_abs_value, run_threads = self.value_bound_fields(record)
        return pb.RunConfig(
            protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id,
            worker_id=record.worker_id,
            peers=[pb.Peer(worker_id=r.worker_id, address=r.address,
                           send_key=keys.key(record.worker_id, r.worker_id),
                           receive_key=keys.key(r.worker_id, record.worker_id),
                           down=r.worker_id in down_ids)
                   for r in [*peers, *(down or [])] if r.worker_id != record.worker_id],
            dim=lay.dim, n_features=lay.n_features, mode=s.mode,
            staleness=-1 if s.staleness is None else s.staleness, threads=record.threads,
            round_size=lay.round_size, max_rounds=lay.max_rounds, train_rows=lay.train_rows,
            start_offset=start_offset, loss=s.loss, learning_rate=s.learning_rate,
            lr_schedule=s.lr_schedule, lr_decay=s.lr_decay, power_t=s.power_t, l2=s.l2,
            fit_bias=s.fit_bias, barrier_timeout=s.barrier_timeout,
            rpc_timeout=s.rpc_timeout, seed=s.seed, thread_buffer=s.thread_buffer,
            model=self.spec.kind, hidden=list(self.spec.hidden),
            binary_features=self.spec.binary_features, deep_lr_scale=s.deep_lr_scale,
            first_round=first_round, examples_base=examples_base,
            delta_threshold=s.delta_threshold, delta_topk=s.delta_topk,
            delta_dtype=s.delta_dtype,
            topology=topology or resolve_topology(s.topology, lay.workers, s.mode),
            tree_fanout=s.tree_fanout,
            combine=resolve_combine(s.combine, lay.train_rows, lay.workers),
            max_abs_value=max_abs_value,
            run_threads=run_threads, class_weights=list(self.class_weights),
            delta_norm_bound=s.delta_norm_bound)
