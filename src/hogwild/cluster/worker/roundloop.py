"""A worker's round loop: the training threads, and the round sequence (engine/driver.py) on the wire."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.transport.timing import Timers
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import DeltaHeader, encode_delta_parts
from hogwild.cluster.worker.inbox import Inbox, PeerStatus
from hogwild.cluster.worker.liveness import Liveness
from hogwild.cluster.worker.phase import Phase
from hogwild.cluster.worker.plan import RunPlan
from hogwild.cluster.worker.report import Reports
from hogwild.cluster.worker.shared import Counters, Ending, Signals
from hogwild.cluster.worker.tree_relay import TreeRelay
from hogwild.engine.driver import Next, Part, RoundDriver
from hogwild.engine.gpu_rounds import device_calls
from hogwild.engine.round import ModelNotFinite, RoundEngine
from hogwild.engine.rules import PeerView, lag
from hogwild.engine.threads import WORKER_CALLS, ThreadRounds, make_cursors
from hogwild.errors import ClusterError
from hogwild.model.arrays import CSRArrays

log = logging.getLogger("hogwild.worker")


class RoundsHost(Protocol):
    """What the round loop reads and updates on the worker (the node): the state configure
    and Start replace (plan, engine, inbox, arrays), the destinations (replaced whole when
    one changes), and its phase."""

    phase: Phase
    plan: RunPlan | None
    step_plan: RunPlan | None
    arrays: CSRArrays | None
    hot: int
    engine: RoundEngine
    inbox: Inbox
    destinations: dict[int, Destination]


class RoundLoop:
    """The threads of a running worker and what they do each round.

    * T training threads run :func:`train_round` on the shared ``w`` without any lock: the
      engine's thread loop (:class:`ThreadRounds`), gated by :meth:`may_start`.
    * ONE exchange thread (the caller of :meth:`run`) runs the round sequence of
      :class:`RoundDriver` (the simulator runs the same): at every round boundary apply the
      queued peer deltas, build the delta of own updates, and queue it for every peer and
      the coordinator (:meth:`send`). In sync mode it then waits until every live peer's
      delta of that round has arrived (deadline: barrier_timeout; a peer that misses it is
      dropped and reported), applies them, and only then lets the training threads start
      the next round, so every worker has applied exactly the same deltas before round
      r+1. In async mode the training threads never wait for it (with bounded staleness s
      they wait only for a peer more than s rounds behind).
    * One sender thread per destination (sender.py); gRPC threads validate and queue. In
      async mode the gRPC thread that accepted a delta also applies it at once
      (:meth:`apply_arrived`) rather than leaving it for this worker's next round boundary, a
      round later. build_delta and apply_delta are never concurrent: both run under the
      worker's ``exchange_lock`` (shared.py).

    A delta sums the worker's own updates except the bias (and the MLP's dense layers; every
    weight with ``combine: average``), whose change is averaged over the contributing workers
    before it is sent (averaging.py; in async mesh mode the cut to 1/W waits for the peers'
    deltas of the same round, :meth:`averaging.OwnAverage.defer`). Where the time goes
    (training, waiting, building, encoding, applying, RPCs) is accumulated in the node's
    ``timers`` and returned with the final state.
    """

    def __init__(self, node: RoundsHost, signals: Signals, counters: Counters, ending: Ending,
                 relay: TreeRelay, timers: Timers, reports: Reports, liveness: Liveness,
                 device: str, chunk_bytes: int) -> None:
        self.node = node
        self.signals = signals
        self.counters = counters
        self.ending = ending
        self.relay = relay  # topology tree: what each neighbour is owed (tree None elsewhere)
        self.timers = timers
        self.reports = reports
        self.liveness = liveness
        self.device = device            # where the training threads' rounds run
        self.chunk_bytes = chunk_bytes  # the largest message a delta is cut into
        self.threads: ThreadRounds | None = None
        self._driver: RoundDriver | None = None
        self._inbox: Inbox | None = None
        self.driver_lock = threading.RLock()
        self.seq = 0
        self.seq_lock = threading.Lock()
        # time.monotonic() of the exchange thread's last sign of progress while it runs the
        # round loop; None before and after (the worker's health watch reads it).
        self.alive_at: float | None = None

    @property
    def driver(self) -> RoundDriver:
        """The round sequence over this node's engine and inbox (made anew once configure
        replaced them)."""
        node = self.node
        with self.driver_lock:  # RPC threads (applying) and the exchange thread ask for it
            d = self._driver
            if d is None or d.engine is not node.engine or self._inbox is not node.inbox:
                d = self.new_driver()
            return d

    def new_driver(self) -> RoundDriver:
        node, plan = self.node, self.node.plan
        assert plan is not None
        with self.driver_lock:
            self._driver = RoundDriver(node.engine, InboxView(node.inbox), self.send,
                                       plan.first_round, plan.max_rounds,
                                       timed=self.timers.add)
            self._inbox = node.inbox
            return self._driver

    def run(self) -> None:
        """Train until max_rounds or a stop request, then finish (final delta, peers' finals).

        Called from the thread that owns the exchange; returns once the final state is ready.
        """
        node = self.node
        plan, arrays = node.plan, node.arrays
        if (plan is None or arrays is None or not self.signals.started.is_set()
                or self.ending.rejoin_reason is not None):  # left before Start: register again
            return
        node.inbox.touch_all()  # (the destinations were opened by configure)
        beating = threading.Thread(target=self.liveness.heartbeat_loop, args=(plan,),
                                   name="heartbeat", daemon=True)
        beating.start()
        fraction = (plan.start_offset / arrays.n_rows) if arrays.n_rows else 0.0
        calls, streams = WORKER_CALLS, plan.threads
        if self.device != "cpu":
            # This machine's own device (the coordinator's means nothing here): one launch
            # does the round of all `threads` (engine/gpu_rounds.py).
            calls, streams = device_calls(self.device, arrays, plan.spec), 1
            log.info("training on %s: %d rows a round, one kernel launch each (two where "
                     "the shard wraps)", self.device, plan.threads * plan.round_size)
        cursors = make_cursors(arrays.n_rows, streams, fraction)
        self.new_driver()  # from Start's first round on
        # The coordinator may have shrunk the step (node.step_plan): read at every round.
        threads = ThreadRounds(arrays, node.engine.w, lambda: node.step_plan or plan, cursors,
                               plan.first_round, plan.max_rounds, hot=node.hot, calls=calls,
                               gate=self.may_start, on_round=self.count_round,
                               on_failure=self.thread_failed, cond=self.signals.cond)
        self.threads = threads
        began = time.monotonic()
        cpu_began = time.process_time()
        self.mark_alive()
        threads.start()
        try:
            try:
                self.exchange_loop(plan)
            finally:
                self.ending.request_stop(self.ending.stop_reason or "training ended")
                threads.join()
                # The whole process (kernel, exchange, senders, gRPC's own threads) while it
                # trained: beside "train_cpu", what the exchange costs in CPU.
                self.timers.add("process_cpu", time.process_time() - cpu_began)
            log.info("trained %d rounds, %d examples in %.2fs", self.counters.rounds,
                     self.counters.examples, time.monotonic() - began)
            self.finish(plan)
        finally:
            self.alive_at = None

    def mark_alive(self) -> None:
        """The exchange thread's sign of progress, read by the worker's health watch."""
        self.alive_at = time.monotonic()

    def count_round(self, loss_sum: float, rows: int, waited: float, trained: float,
                    cpu: float) -> None:
        """A training thread finished a round (called under the signals' ``cond``)."""
        self.timers.add("wait_to_start_round", waited)
        self.timers.add("train", trained)
        self.timers.add("train_cpu", cpu)
        self.reports.count(loss_sum, rows)
        self.counters.examples += rows

    def thread_failed(self, k: int, exc: Exception) -> None:
        """A bug: stop the node rather than hang the barrier (the exchange thread raises it)."""
        log.exception("training thread %d failed", k)
        self.ending.fatal = f"training thread failed: {exc}"

    def may_start(self, r: int) -> bool:
        """Block until round ``r`` may start; False if the node is stopping."""
        node, driver, stop = self.node, self.driver, self.signals.stop_requested
        plan = node.plan
        assert plan is not None
        if plan.mode == "sync":  # open once the exchange thread passed the barrier before it
            with self.signals.cond:
                self.signals.cond.wait_for(lambda: driver.may_start(r) or stop.is_set())
                return not stop.is_set()
        if stop.is_set():
            return False
        # The configured bound, or the tighter one of an adjustment (the engine's rules).
        slack = node.engine.rules.staleness
        # Once round r is done this worker is r rounds in; a peer more than `slack` rounds
        # behind that holds us back until it catches up or falls silent for barrier_timeout.
        while not node.inbox.wait(
                lambda peers: stop.is_set() or driver.may_start(r, peers),
                min(0.25, plan.barrier_timeout)):
            self.liveness.drop_silent(plan, r - 1, f"more than {slack} rounds behind")
        return not stop.is_set()

    def exchange_loop(self, plan: RunPlan) -> None:
        threads = self.threads
        assert threads is not None
        last = plan.first_round - 1

        def boundary_or_end(done: int) -> bool:
            ready, alive = threads.slowest()
            return ready > done or not alive or self.ending.fatal is not None

        while True:
            self.mark_alive()
            with self.signals.cond:
                self.signals.cond.wait_for(lambda done=last: boundary_or_end(done),  # type: ignore[misc]
                                           timeout=1.0)
                ready, alive = threads.slowest()
            if self.ending.fatal is not None:
                raise ClusterError(self.ending.fatal)
            if ready > last:
                self.round_trained(plan, ready)
                last = ready
                # Async: the training threads wait at the staleness gate themselves. Sync:
                # the barrier, passed already or not (a tree relays what arrived meanwhile).
                if plan.mode == "sync":
                    self.barrier(plan, ready)
                    with self.signals.cond:
                        self.signals.cond.notify_all()  # the next round is open (may_start)
            elif not alive:
                return
            self.reports.maybe_report_progress(plan, done=False)

    def apply_arrived(self) -> None:
        """Async mode: apply the queued deltas now, unless an exchange (or another RPC
        thread) holds the lock; whoever holds it looks at the queue again once it lets go.

        Left for the next round boundary, a peer's delta would reach this worker's model a
        whole round late: with rounds of half an epoch (combine average) an async run
        needed twice the epochs of a sync one. Never blocks the RPC thread on the lock (an
        exchange may wait on a full sender queue, whose peer may be waiting on us).
        """
        node = self.node
        while node.inbox.queued():
            if not self.signals.exchange_lock.acquire(blocking=False):
                return
            try:
                self.apply_inbox()
            except Exception as exc:  # a bug: stop the node; the exchange thread raises it
                log.exception("applying a received delta failed")
                self.ending.fatal = f"applying a received delta failed: {exc}"
                with self.signals.cond:
                    self.signals.cond.notify_all()
                return
            finally:
                self.signals.exchange_lock.release()

    def apply_inbox(self) -> int:
        with self.signals.exchange_lock:  # never beside build_delta, nor another apply
            return self.driver.apply_arrived()

    def round_trained(self, plan: RunPlan, round_: int) -> Next:
        """The driver's step at a round boundary: apply, build, send, then past the barrier
        or the staleness gate if it may (else what :meth:`barrier` or :meth:`may_start`
        waits for)."""
        with self.signals.exchange_lock:
            try:
                step = self.driver.on_round_trained(round_)
            except ModelNotFinite:
                self.reports.diverged(plan, round_)
                raise
        if plan.mode == "async" and self.relay.tree is None:
            self.apply_arrived()  # what RPC threads queued while the lock was held
        return step

    def exchange(self, plan: RunPlan, round_: int, final: bool) -> None:
        """Apply what arrived, build the delta of own updates, queue it for everyone (the
        final one: of the last round trained, whatever ``round_`` says)."""
        with self.signals.exchange_lock:
            try:
                if final:
                    self.driver.finish()
                else:
                    self.driver.end_round(round_)
            except ModelNotFinite:
                self.reports.diverged(plan, round_)
                raise
        if plan.mode == "async" and self.relay.tree is None:
            self.apply_arrived()  # what RPC threads queued while the lock was held

    def send(self, round_: int, final: bool, indices: np.ndarray, values: np.ndarray) -> None:
        """The driver's outbox: queue own delta for every destination, or the tree's relay."""
        node, counters, tree = self.node, self.counters, self.relay.tree
        plan = node.plan
        assert plan is not None
        if tree is not None:
            with self.signals.tree_lock:
                tree.own(indices, values)
            self.relay.flush(plan, round_, final)
            counters.rounds = max(counters.rounds, round_)
            return
        t1 = time.perf_counter()
        messages = self.encode_delta(indices, values, round_, final, counters.examples)
        self.timers.add("encode", time.perf_counter() - t1, len(messages))
        outgoing = OutgoingDelta(round_, final, counters.examples, indices, values, messages)
        for dest in node.destinations.values():
            dest.put_delta(outgoing if not dest.coalesce else OutgoingDelta(
                round_, final, counters.examples, indices, values, messages))
        counters.deltas_sent += len(messages)
        counters.rounds = max(counters.rounds, round_)
        counters.max_staleness = max(counters.max_staleness, lag(round_, node.inbox.snapshot()))

    def encode_delta(self, indices: np.ndarray, values: np.ndarray, round_: int, final: bool,
                      examples: int) -> list[pb.Delta]:
        """The messages of one delta under a new seq (exchange and sender threads call it); each
        destination renumbers what it sends in its own sequence (sender.py)."""
        plan = self.node.plan
        with self.seq_lock:
            self.seq += 1
            seq = self.seq
        assert plan is not None
        header = DeltaHeader(run_id=plan.run_id, worker_id=plan.worker_id, round=round_,
                             seq=seq, dim=plan.dim, final=final, examples=examples)
        return encode_delta_parts(header, indices, values, self.chunk_bytes)

    def barrier(self, plan: RunPlan, round_: int) -> None:
        """Sync mode: wait for every live peer's round-``round_`` delta, then apply them
        (the driver's barrier, with this worker's deadlines)."""
        node, driver, stop = self.node, self.driver, self.signals.stop_requested

        def ready(peers: dict[int, PeerStatus]) -> bool:
            return stop.is_set() or driver.unblocked(peers)

        # A peer that is alive but itself waiting (heartbeats) is waited for; one silent for
        # barrier_timeout is dropped, so the barrier never hangs on a dead peer.
        waited = 0.0
        while True:
            t0 = time.perf_counter()
            if self.relay.tree is not None:
                self.tree_wait(plan, ready, finished=False,
                               waiting_for=f"waiting for round {round_}")
            else:
                while not node.inbox.wait(ready, min(0.25, plan.barrier_timeout)):
                    self.mark_alive()
                    self.liveness.drop_silent(plan, round_, f"waiting for round {round_}")
            waited += time.perf_counter() - t0
            if self.ending.fatal is not None:  # the exchange loop raises it
                break
            with self.signals.exchange_lock:
                if stop.is_set():  # not passed: what arrived is applied still
                    driver.apply_arrived()
                    break
                step = driver.on_arrival()  # passed: applies what arrived, opens the next
                if step is None or not step.waiting:  # round (a peer joined meanwhile: not)
                    break
        self.timers.add("barrier_wait", waited)

    def finish(self, plan: RunPlan) -> None:
        """Send the final delta; wait (bounded) for every live peer's final; mark done."""
        node = self.node
        with self.signals.cond:
            node.phase = Phase.FINISHING
        if self.ending.abandoned:  # out of the run: nothing more is sent, to anyone
            for dest in node.destinations.values():
                dest.abandon()
            with self.signals.cond:
                node.phase = Phase.DONE
            self.signals.done.set()
            return
        self.exchange(plan, self.counters.rounds, final=True)  # the driver's finish()
        self.reports.maybe_report_progress(plan, done=True)
        if self.relay.tree is not None:
            # Even when leaving: its subtree reaches the rest of the run through it only.
            self.tree_wait(plan, lambda peers: all(p.settled for p in peers.values()),
                           finished=True, waiting_for="waiting for its final delta")
        elif not self.ending.leaving:
            self.await_peer_finals(plan)
        self.apply_inbox()
        flush_for = plan.barrier_timeout + plan.rpc_timeout
        t0 = time.perf_counter()
        for dest in node.destinations.values():
            self.mark_alive()
            dest.flush(flush_for)
        self.timers.add("drain", time.perf_counter() - t0)
        with self.signals.cond:
            node.phase = Phase.DONE
        self.signals.done.set()
        log.info("done: %d rounds, %d examples, %d delta messages sent", self.counters.rounds,
                 self.counters.examples, self.counters.deltas_sent)

    def tree_wait(self, plan: RunPlan, ready: Callable[[dict[int, PeerStatus]], bool],
                  finished: bool, waiting_for: str) -> None:
        """Topology tree: relay what arrives (apply it, owe it on, send what is due) until
        ``ready(peers)``; a neighbour silent for barrier_timeout is dropped."""
        node, tree = self.node, self.relay.tree
        assert tree is not None
        while True:
            self.mark_alive()
            # Looked at before relaying: whatever made it true is in the queue now.
            peers = node.inbox.snapshot()
            done = ready(peers)
            with self.signals.exchange_lock:
                self.apply_inbox()
                self.relay.flush(plan, self.counters.rounds, finished)
            if done and (not finished or tree.settled(node.inbox.snapshot())):
                return
            if self.ending.fatal is not None:
                return
            node.inbox.wait(lambda p: ready(p) or node.inbox.queued() > 0,
                            min(0.25, plan.barrier_timeout))
            self.liveness.drop_silent(plan, self.counters.rounds, waiting_for)

    def await_peer_finals(self, plan: RunPlan) -> None:
        node = self.node
        # A peer still training keeps sending deltas; one silent for barrier_timeout is gone.
        while True:
            self.mark_alive()
            settled = node.inbox.wait(
                lambda peers: self.driver.peers_settled(peers) or self.ending.fatal is not None, 0.25)
            self.apply_inbox()
            if settled or self.ending.fatal is not None:
                return
            self.liveness.drop_silent(plan, self.counters.rounds, "waiting for its final delta")


class InboxView:
    """The worker's inbox as the round driver sees it."""

    def __init__(self, inbox: Inbox) -> None:
        self.source = inbox

    def peers(self) -> Mapping[int, PeerView]:
        return self.source.snapshot()

    def take(self) -> Sequence[Part]:
        items = self.source.drain()
        if items:
            self.source.count_applied(items)
        return [(d.indices, d.values) for d in items]
