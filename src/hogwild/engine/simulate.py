"""W virtual workers in one process: the round engine driven by a discrete-event clock.

Each virtual worker is what a cluster worker is, minus the transport: its shard, its T
training threads' cursors (engine/threads.py, the same kernel), a RoundEngine (the same
averaging, delta building and compression) sequenced by the same RoundDriver (driver.py:
the barrier, the staleness gate, the final), whose inbox and outbox are this module's
simulated network. Time is
simulated, so 64 workers behave on 2 cores as they would on 64 machines:

* a worker trains a round in ``slices`` steps; a step of R rows per thread takes
  R x (its shard's non-zeros per row) / ``speed`` seconds (its T threads run side by side),
  and what arrived meanwhile is applied between steps (async), as the worker's RPC threads
  apply it while its training threads run;
* every node (worker, coordinator) sends through one sender: a message costs ``overhead``
  seconds plus 8 bytes per entry over ``bandwidth``, then arrives after a latency drawn
  from ``Network``; while the sender is busy, what queues for one neighbour is summed into
  one message (as the real senders coalesce), so a flooded worker falls behind and its
  peers see old deltas, the staleness that many cores produce and two cores hide;
* mesh: a worker sends to every peer and the coordinator; star and tree: to its tree
  neighbours (star: the coordinator alone). As the cluster's relays do, a sync node sends
  each neighbour one sum a round, once its own round and every other neighbour's are in
  (:class:`_Edges`); an async one floods what it hears on at once;
* calibrated runs add a worker's own arithmetic a round (``round_cost``, before it sends)
  and one machine's cores shared by every node (``shared_cores``: a message's CPU slows the
  training threads once they fill them), as `hogwild run` here has them;
* the coordinator's model is the sum of everything it received; as the coordinator does,
  it is evaluated on a clock, if a delta changed it since the last evaluation: every
  ``1 / evals_per_epoch`` of the time an epoch of training takes the W workers at their
  speeds (the same share of an epoch at every W), before training and once at the end.

Deterministic for a seed: one random stream (latencies), events ordered by (time, order of
scheduling). Hogwild threads inside one worker run one after another here, so their own
(small) interference is not simulated; everything between workers is.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.engine.driver import Next, RoundDriver
from hogwild.engine.guard import SwingGuard
from hogwild.engine.network import DEFAULT_SPEED, Network
from hogwild.engine.round import ModelNotFinite, RoundEngine
from hogwild.engine.rules import ExchangeRules
from hogwild.engine.simclock import CoordinatorClock, Evaluate
from hogwild.engine.sparse import sum_sparse
from hogwild.engine.threads import KernelPlan, ThreadCursor, make_cursors, train_round
from hogwild.engine.treeshape import COORDINATOR, neighbours
from hogwild.model import kernels
from hogwild.model.arrays import CSRArrays
from hogwild.model.compression import wire_bytes
from hogwild.settings.rules import BOUNDS
from hogwild.settings.schema import default

_TICK_LAST = 1 << 62


@dataclass(frozen=True)
class Scenario:
    """A run to simulate: W workers, the exchange rules, their speeds and the network."""

    workers: int
    kernel: KernelPlan
    rules: ExchangeRules                 # n_peers and averaged_from are filled in per run
    max_rounds: int
    speeds: tuple[float, ...] = ()       # non-zeros per second per thread, one per worker
    network: Network = field(default_factory=Network)
    tree_fanout: int = default("tree_fanout")
    slices: int = 4
    evals_per_epoch: float = 4.0
    seed: int = 0
    # 0: a machine per node, a core to spare for its messages; C: one machine of C cores.
    shared_cores: int = 0
    # Seconds of a worker's own arithmetic a round (its delta built, the arrived ones
    # applied) before it sends: calibrated runs measure it, the default model counts it free.
    round_cost: float = 0.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.speeds and len(self.speeds) != self.workers:
            raise ValueError(f"speeds: {len(self.speeds)} given for {self.workers} workers")
        if any(s not in BOUNDS["speed"] for s in self.speeds):
            raise ValueError(f"speeds: each {BOUNDS['speed'].why}")
        if self.max_rounds < 1:
            raise ValueError("max_rounds must be positive")
        for name in ("slices", "evals_per_epoch"):
            if getattr(self, name) not in BOUNDS[name]:
                raise ValueError(f"{name} {BOUNDS[name].why}")
        if self.tree_fanout not in BOUNDS["tree_fanout"]:
            raise ValueError(f"tree_fanout {BOUNDS['tree_fanout'].why}")
        if self.shared_cores < 0:
            raise ValueError("shared_cores must be >= 0")
        if not 0.0 <= self.round_cost < math.inf:
            raise ValueError("round_cost must be finite and >= 0")


def worker_rules(scenario: Scenario) -> ExchangeRules:
    """The exchange rules each virtual worker runs: the scenario's, with its peers counted
    and the averaged part of the model placed."""
    spec, rules = scenario.kernel.spec, scenario.rules
    return dataclasses.replace(
        rules, n_peers=scenario.workers - 1,
        averaged_from=0 if rules.combine == "average" else spec.shared_from)


@dataclass
class SimResult:
    """What a simulated run produced."""

    weights: npt.NDArray[np.float64]            # the coordinator's model at the end
    best_weights: npt.NDArray[np.float64]       # the best validated one (final without val)
    history: list[dict[str, Any]]
    best: dict[str, Any] | None                  # the history row of best_weights
    seconds: float                               # simulated time to the last delivery
    rounds: int
    examples: int
    messages: int
    bytes: int
    max_staleness: int
    waited: float                                # worker-seconds spent at barriers/gates
    trained: float = 0.0                         # worker-seconds spent training
    sending: float = 0.0                         # worker-seconds their senders were busy
    diverged: bool = False
    adjustments: list[dict[str, Any]] = field(default_factory=list)  # the guard's (in order)


@dataclass
class _Peer:
    """What one node knows of one worker's deltas (engine.rules.PeerView)."""

    round: int = 0
    final: bool = False

    @property
    def settled(self) -> bool:
        return self.final


Part = tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]


@dataclass
class _Packet:
    """A message on its way to one neighbour: the deltas it sums, whose rounds it carries."""

    parts: list[Part]
    rounds: dict[int, int]
    finals: set[int]
    label: int = 0          # sync relays: the edge's round this message completes
    last: bool = False      # ... and whether it is the edge's final message

    def merge(self, other: _Packet) -> None:
        self.parts.extend(other.parts)  # summed once, when it is sent
        for wid, r in other.rounds.items():
            self.rounds[wid] = max(r, self.rounds.get(wid, 0))
        self.finals |= other.finals
        self.label = max(self.label, other.label)
        self.last = self.last or other.last

    def seal(self) -> Part:
        """The one delta this message carries, in the wire's float32."""
        if not self.parts:  # a relay's round with nothing to pass on still goes
            part: Part = (np.zeros(0, np.int32), np.zeros(0, np.float32))
            self.parts = [part]
            return part
        idx, val = sum_sparse(self.parts)
        part = (idx, val.astype(np.float32))
        self.parts = [part]
        return part


@dataclass
class _Sender:
    """One node's sender: busy until a time, and what waits per neighbour."""

    busy_until: float = 0.0
    busy_from: float = 0.0
    pending: dict[int, _Packet] = field(default_factory=dict)  # insertion order = FIFO


@dataclass
class _Edges:
    """Sync star and tree: what one node owes each neighbour, sent once a round, as the
    cluster's relays do (engine/tree.py, coordinator/sums/relay.py): the message of round R to j
    goes once this node's own round R is in and every other neighbour's round R arrived, and
    the final one once this node and every other neighbour have finished."""

    owed: dict[int, _Packet]
    heard: dict[int, int]                # per neighbour: the highest round label arrived
    ended: set[int] = field(default_factory=set)   # neighbours whose final arrived
    sent: dict[int, int] = field(default_factory=dict)
    closed: set[int] = field(default_factory=set)  # neighbours sent the final message
    own_round: int = 0
    own_final: bool = False


@dataclass
class _Inbox:
    """A virtual worker's inbox (its driver's): the peers' rounds, what arrived."""

    table: dict[int, _Peer]
    queued: list[Part] = field(default_factory=list)

    def peers(self) -> dict[int, _Peer]:
        return self.table

    def take(self) -> list[Part]:
        items, self.queued = self.queued, []
        return items


@dataclass
class _Worker:
    wid: int
    rows: CSRArrays
    cursors: list[ThreadCursor]
    speed: float
    nnz_per_row: float
    inbox: _Inbox
    driver: RoundDriver
    finished: bool = False
    waiting_since: float | None = None
    training_since: float | None = None  # when its current round's training began
    debt: float = 0.0       # seconds its training owes to messages on a shared machine

    @property
    def engine(self) -> RoundEngine:
        return self.driver.engine

    @property
    def round(self) -> int:
        return self.driver.round


class Simulation:
    """One simulated run (call :meth:`run` once)."""

    def __init__(self, scenario: Scenario, shards: list[CSRArrays],
                 evaluate: Evaluate | None = None, guard: SwingGuard | None = None) -> None:
        if len(shards) != scenario.workers:
            raise ValueError(f"{len(shards)} shards for {scenario.workers} workers")
        self.sc = scenario
        # The guard acts on the evaluations as the coordinator's does; its adjustments reach
        # every virtual worker at once (the cluster's take one RPC).
        self.guard = guard
        self.lr_scale = 1.0
        w0 = scenario.kernel.spec.initial_weights(scenario.seed)
        rules = worker_rules(scenario)
        self.rules = rules
        self.rng = np.random.default_rng(scenario.seed)
        self.global_w = w0.copy()
        self.total_rows = sum(s.n_rows for s in shards)
        self.workers: list[_Worker] = []
        for wid, rows in enumerate(shards):
            speed = scenario.speeds[wid] if scenario.speeds else DEFAULT_SPEED
            nnz = float(rows.indptr[-1]) / max(1, rows.n_rows)
            inbox = _Inbox({p: _Peer() for p in range(scenario.workers) if p != wid})
            driver = RoundDriver(RoundEngine(rules, w0.copy()), inbox,
                                 functools.partial(self.send_own, wid), 1, scenario.max_rounds)
            self.workers.append(_Worker(wid, rows, make_cursors(rows.n_rows,
                                                                scenario.kernel.threads),
                                        speed, max(nnz, 1.0), inbox, driver))
        self.senders: dict[int, _Sender] = {n: _Sender() for n in self._nodes()}
        # Sync star and tree relay a round's sums once they are complete; async ones (and
        # mesh workers) send each delta as it comes.
        self.batched = rules.mode == "sync" and rules.topology != "mesh"
        self.edges = {n: _Edges({j: _Packet([], {}, set()) for j in self.neighbours(n)},
                                {j: 0 for j in self.neighbours(n)})
                      for n in self._nodes()} if self.batched else {}
        self.events: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self.order = 0
        self.now = 0.0
        self.messages = 0
        self.bytes = 0
        self.examples = 0
        self.waited = 0.0
        self.trained = 0.0
        self.sending = 0.0
        self.loss_sum = 0.0
        self.loss_rows = 0
        # The coordinator's clock ticks evals_per_epoch times in the time an epoch of
        # training takes the workers at their speeds.
        nnz = sum(float(s.indptr[-1]) for s in shards)
        pace = sum(wk.speed for wk in self.workers) * max(1, scenario.kernel.threads)
        self.clock = CoordinatorClock(
            evaluate, w0, nnz / max(pace, 1e-12) / scenario.evals_per_epoch, guard,
            self.total_rows / scenario.evals_per_epoch)
        self.diverged = False

    # ------------------------------------------------------------------ layout

    def _nodes(self) -> list[int]:
        return [COORDINATOR, *range(self.sc.workers)]

    def neighbours(self, node: int) -> list[int]:
        return neighbours(node, self.sc.workers, self.rules.topology, self.sc.tree_fanout)

    # ------------------------------------------------------------------ events

    def _at(self, when: float, kind: str, *args: Any) -> None:
        self.order += 1
        # An evaluation tick comes after every other event of its instant, however late it
        # was scheduled: the coordinator scores what it holds at that time (with one worker
        # a slice's end falls on a tick, and which came first changed the run).
        order = self.order + (_TICK_LAST if kind == "tick" else 0)
        heapq.heappush(self.events, (when, order, kind, args))

    def run(self) -> SimResult:
        self._evaluate()  # the starting point, before any training
        for wk in self.workers:
            self._start_round(wk)
        while self.events and not self.diverged:
            when, _, kind, args = heapq.heappop(self.events)
            if kind == "tick" and not self.events:
                break  # nothing left to happen: the end's evaluation scores the model
            self.now = when
            getattr(self, "_on_" + kind)(*args)
        if not self.diverged and not all(wk.finished for wk in self.workers):
            raise RuntimeError("simulation stalled with workers waiting (a bug)")
        self._evaluate()
        clock = self.clock
        best_w = clock.best_w if clock.best is not None else self.global_w
        return SimResult(
            weights=self.global_w, best_weights=best_w, history=clock.history,
            best=clock.best, seconds=self.now, rounds=max(wk.round for wk in self.workers),
            examples=self.examples, messages=self.messages, bytes=self.bytes,
            max_staleness=max(wk.driver.max_staleness for wk in self.workers),
            waited=self.waited, trained=self.trained,
            sending=self.sending, diverged=self.diverged,
            adjustments=[a.as_dict() for a in self.guard.adjustments] if self.guard else [])

    def _start_round(self, wk: _Worker) -> None:
        if wk.waiting_since is not None:
            self.waited += self.now - wk.waiting_since
            wk.waiting_since = None
        wk.training_since = self.now
        self._at(self.now, "slice", wk.wid, wk.round + 1, 0)

    def _repaid(self, wk: _Worker, kind: str, *args: Any) -> bool:
        """Shared cores: the step's end comes later by what messages took (True: postponed)."""
        if wk.debt <= 0.0:
            return False
        self.trained += wk.debt
        self._at(self.now + wk.debt, kind, *args)
        wk.debt = 0.0
        return True

    def _steal(self, began: float) -> None:
        """A message sent from ``began`` until now, on a machine of C cores shared with the
        training threads: while both ran, N = k + 1 runnable threads shared the cores
        evenly, so each of the k training threads lost the work it would have done beyond
        its share (its round ends that much later)."""
        cores = self.sc.shared_cores
        training = [wk for wk in self.workers if wk.training_since is not None]
        k = len(training) * self.sc.kernel.threads
        if not k:
            return
        n = k + 1
        alone, shared = min(1.0, cores / k), min(1.0, cores / n)
        for wk in training:
            assert wk.training_since is not None
            overlap = self.now - max(began, wk.training_since)
            if overlap > 0:
                # the thread's lost work, in core-seconds, made up at its own pace
                wk.debt += overlap * n / cores * (alone - shared) / alone

    def _on_slice(self, wid: int, round_: int, s: int) -> None:
        wk = self.workers[wid]
        if self._repaid(wk, "slice", wid, round_, s):
            return
        kernel, slices = self.sc.kernel, self.sc.slices
        size = kernel.round_size * (s + 1) // slices - kernel.round_size * s // slices
        rows = 0
        if size > 0:
            plan = dataclasses.replace(kernel, round_size=size,
                                       learning_rate=kernel.learning_rate * self.lr_scale)
            for cursor in wk.cursors:
                loss, n = train_round(wk.rows, wk.engine.w, plan, cursor)
                self.loss_sum += loss
                self.loss_rows += n
                rows += n
        self.examples += rows
        per_thread = rows / max(1, kernel.threads)
        duration = per_thread * wk.nnz_per_row / wk.speed
        self.trained += duration
        if s + 1 == slices:
            duration += self.sc.round_cost
        if s + 1 < slices:
            self._at(self.now + duration, "slice", wid, round_, s + 1)
        else:
            self._at(self.now + duration, "round_end", wid, round_)

    def _on_round_end(self, wid: int, round_: int) -> None:
        wk = self.workers[wid]
        if self._repaid(wk, "round_end", wid, round_):
            return
        wk.training_since = None
        # The driver's on_round_trained in its two steps (end, then advance).
        try:
            wk.driver.end_round(round_)
        except ModelNotFinite:
            self.diverged = True
        if not self.diverged:
            self._act(wk, wk.driver.advance())

    def _act(self, wk: _Worker, step: Next) -> None:
        """Do what the driver says: start the next round, finish, or wait."""
        if wk.finished or self.diverged:
            return
        if step is Next.FINISH:
            try:
                wk.driver.finish()
            except ModelNotFinite:
                self.diverged = True
            wk.finished = True
        elif step.waiting:
            if wk.waiting_since is None:
                wk.waiting_since = self.now
        else:
            self._start_round(wk)

    def send_own(self, wid: int, round_: int, final: bool, idx: npt.NDArray[np.int32],
                 val: npt.NDArray[np.float32]) -> None:
        """A worker's own delta onto the network (its driver's outbox)."""
        wk = self.workers[wid]
        packet = _Packet([(idx.copy(), val.copy())], {wk.wid: round_},
                         {wk.wid} if final else set())
        if self.batched:
            edges = self.edges[wk.wid]
            edges.own_round, edges.own_final = round_, final
            for n in self.neighbours(wk.wid):
                edges.owed[n].merge(packet)
            self._relay(wk.wid)
            return
        for n in self.neighbours(wk.wid):
            self._queue(wk.wid, n, packet)

    def _relay(self, node: int) -> None:
        """Sync star/tree: send every neighbour the message that has become due."""
        edges = self.edges[node]
        own = node == COORDINATOR or edges.own_final
        # The lowest round heard from the neighbours other than j, for every j at once: the
        # lowest of all unless j alone holds it, then the second lowest (a star's coordinator
        # has W neighbours: no W x W scan per arrival).
        heard = sorted(edges.heard.values())
        lowest = heard[0] if heard else 0
        second = heard[1] if len(heard) > 1 else None
        alone = heard.count(lowest) == 1
        ended = len(edges.ended)
        for j in self.neighbours(node):
            if j in edges.closed:
                continue
            n_others = len(edges.heard) - 1
            if own and ended - (j in edges.ended) == n_others:
                due, last = max(edges.sent.get(j, 0), edges.own_round), True
            else:
                if n_others == 0:
                    others_low = None
                elif alone and edges.heard[j] == lowest:
                    others_low = second
                else:
                    others_low = lowest
                bounds = [] if others_low is None else [others_low]
                if node != COORDINATOR:
                    bounds.append(edges.own_round)
                due, last = (min(bounds) if bounds else 0), False
                if node == COORDINATOR and n_others == 0:
                    due = 0
                if due <= edges.sent.get(j, 0):
                    continue
            packet = edges.owed[j]
            packet.label, packet.last = due, last
            edges.owed[j] = _Packet([], {}, set())
            edges.sent[j] = due
            if last:
                edges.closed.add(j)
            self._queue(node, j, packet)

    def _queue(self, node: int, to: int, packet: _Packet) -> None:
        sender = self.senders[node]
        waiting = sender.pending.get(to)
        if waiting is None:
            sender.pending[to] = _Packet(list(packet.parts), dict(packet.rounds),
                                         set(packet.finals), packet.label, packet.last)
        else:
            waiting.merge(packet)
        if sender.busy_until <= self.now:
            self._send_next(node)

    def _send_next(self, node: int) -> None:
        sender = self.senders[node]
        if not sender.pending or sender.busy_until > self.now:
            return
        to = next(iter(sender.pending))
        packet = sender.pending.pop(to)
        idx, _ = packet.seal()
        nbytes = wire_bytes(idx.size, self.global_w.shape[0], self.rules.compression.half)
        took = self.sc.network.send_time(nbytes)
        sender.busy_until = self.now + took
        if node != COORDINATOR:
            self.sending += took
        sender.busy_from = self.now
        self.messages += 1
        self.bytes += nbytes
        self._at(sender.busy_until, "sent", node)
        self._at(sender.busy_until + self.sc.network.draw_latency(self.rng), "arrive", to,
                 node, packet)

    def _on_sent(self, node: int) -> None:
        if self.sc.shared_cores:
            self._steal(self.senders[node].busy_from)
        self._send_next(node)

    def _on_arrive(self, node: int, came_from: int, packet: _Packet) -> None:
        idx, val = packet.parts[0]
        if node == COORDINATOR:
            if kernels.apply_delta(self.global_w, np.zeros(0), idx, val) != 0:
                raise RuntimeError("a simulated delta outside the model (a bug)")
            tick = self.clock.changed(self.now)
            if tick is not None:
                self._at(tick, "tick")
        else:
            wk = self.workers[node]
            for source, r in packet.rounds.items():
                if source != node:
                    peer = wk.inbox.table[source]
                    peer.round = max(peer.round, r)
                    peer.final = peer.final or source in packet.finals
            wk.inbox.queued.append((idx, val))
        if self.batched:
            edges = self.edges[node]
            edges.heard[came_from] = max(edges.heard[came_from], packet.label)
            if packet.last:
                edges.ended.add(came_from)
            for n in self.neighbours(node):
                if n != came_from:
                    edges.owed[n].merge(_Packet([packet.parts[0]], dict(packet.rounds),
                                                set(packet.finals)))
            self._relay(node)
        elif self.rules.topology != "mesh":
            for n in self.neighbours(node):
                if n != came_from:
                    self._queue(node, n, packet)
        if node != COORDINATOR:
            # Applied at once in async mode (as the cluster's RPC threads do), else at the
            # worker's next round boundary; a waiting worker may go on.
            wk = self.workers[node]
            step = wk.driver.on_arrival()
            if step is not None:
                self._act(wk, step)

    # ------------------------------------------------------------------ evaluation

    def _on_tick(self) -> None:
        """The coordinator's evaluation clock (engine/simclock.py): the round-end instants of
        the workers do not decide it (with rounds of an epoch those come once an epoch, and
        a round late for the coordinator's model)."""
        if self.clock.tick(self.now):
            self._evaluate()

    def _evaluate(self) -> None:
        row: dict[str, Any] = {
            "elapsed": self.now, "epoch": self.examples / max(1, self.total_rows),
            "round": min(wk.round for wk in self.workers), "examples": self.examples,
            "train_loss": self.loss_sum / self.loss_rows if self.loss_rows else None,
            "val_loss": None, "val_accuracy": None}
        self.loss_sum, self.loss_rows = 0.0, 0
        if not np.isfinite(self.global_w).all():
            self.diverged = True
            self.clock.history.append(row)
            return
        adjustment = self.clock.record(row, self.global_w)
        if adjustment is not None:
            self.lr_scale = adjustment.lr_scale
            if adjustment.staleness is not None:
                self.rules = dataclasses.replace(self.rules, staleness=adjustment.staleness)
                for wk in self.workers:
                    wk.engine.rules = self.rules

