"""Topology star: the coordinator relays to each worker the sum of the other workers' deltas.

Workers push their deltas to the coordinator only (n messages per round); the relay sums what
arrived and sends each live worker one aggregate that leaves out its own contribution (it
has that already), so nothing is applied twice: 2n messages per round instead of n(n+1).

* sync: the aggregate of round r goes out once every live worker's round-r delta is in (or it
  finished); a worker silent for barrier_timeout is declared dead and no longer waited for,
  as a mesh peer would drop it. Every worker thus applies the same set before round r+1.
* async: every ``period`` seconds, whatever arrived since the last send.

When every live worker has sent its final delta, the last aggregate goes out marked final.

A worker that registers again (restarted, or refused after a freeze) is taken back: it gets
the global model, a new destination, and aggregates that leave out what that model held
already (each delta the relay is told of comes with the model's version once it was in).

Aggregates are Delta messages under :data:`COORDINATOR_SENDER_ID`, sent with the
coordinator's own credentials and sender keys through one :class:`Destination` per worker
(its own sequence numbers, retries, float32 rounding carried to the next aggregate).
Sums are vectorised (merge_sparse); no loop per entry.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.transport.keys import COORDINATOR_SENDER_ID
from hogwild.cluster.transport.sender import Destination, OutgoingDelta
from hogwild.cluster.wire import pb_grpc
from hogwild.cluster.wire.codec import MAX_EXAMPLES, DecodedDelta, DeltaHeader, encode_delta_parts
from hogwild.engine.sparse import merge_sparse
from hogwild.errors import InvalidMessage

log = logging.getLogger("hogwild.coordinator")

Sparse = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]
# The sum of no deltas (shared read-only by StarRelay and tree_root.TreeRoot).
EMPTY: Sparse = (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64))

# Sync: how many rounds past the last aggregate a worker's delta may be labelled. A worker
# builds round r + 1 only once its barrier has the aggregate of round r, which goes out
# after the relay labelled it (a worker taken back, a tree's orphan and a resumed run start
# at the next aggregate's round too), so r + 1 is the most; the rest is slack.
SYNC_ROUNDS_AHEAD = 1 + 4


class StarRelay:
    """Sums incoming deltas per worker and sends each worker the others' sum."""

    def __init__(self, state: RunState, workers: dict[int, str], dim: int, mode: str,
                 barrier_timeout: float, rpc_timeout: float, chunk_bytes: int,
                 open_channel: Callable[[int, str], grpc.Channel], half: bool = False,
                 period: float = 0.05, first_round: int = 1) -> None:
        """``first_round``: the workers' first round (a resumed run's is the checkpoint's
        next one)."""
        self.state = state
        self.dim = dim
        self.mode = mode
        self.barrier_timeout = barrier_timeout
        self.chunk_bytes = chunk_bytes
        self.period = period
        self._cond = threading.Condition()
        self._pending: dict[int, Sparse] = {wid: EMPTY for wid in workers}
        # The last complete round of each (a resumed run's: the checkpoint's, to start with).
        self._round: dict[int, int] = dict.fromkeys(workers, first_round - 1)
        self._final: dict[int, bool] = dict.fromkeys(workers, False)
        self._examples: dict[int, int] = dict.fromkeys(workers, 0)
        # The highest round an aggregate was labelled. A resumed run's workers start at the
        # checkpoint's next round: counting from 0, the sync relay labelled its aggregates
        # 1, 2, ... one per period while they waited for theirs (a resumed run trained
        # nothing more within its time budget).
        self._sent_round = self._before_first = first_round - 1
        self._first_delta: float | None = None  # silence is counted from the first delta
        self._done = False
        self.aggregates = 0          # aggregate deltas queued (one per live worker per send)
        self._open_channel = open_channel
        self._rpc_timeout = rpc_timeout
        self._half = half
        # A worker taken back: (version of the model it was sent, the part of the pending
        # sums that model holds already), left out of its next aggregate.
        self._known: dict[int, tuple[int, Sparse]] = {}
        # Aggregates for a worker taken back whose model is still on its way (sent after it:
        # one that arrived first would be discarded with the deltas the model holds).
        self._parked: dict[int, OutgoingDelta] = {}
        self._generation: dict[int, int] = {}  # of each worker's destination
        # Tree: what a worker taken back had sent before it died and the relay has yet to
        # pass on (its old subtree's sums), apart from what its new incarnation sends.
        self._ghosts: dict[int, Sparse] = {}
        self.destinations = {wid: self._destination(wid, address)
                             for wid, address in workers.items()}
        self._thread = threading.Thread(target=self._run, name="star-relay", daemon=True)

    def _destination(self, wid: int, address: str) -> Destination:
        on_down = functools.partial(self._down, self._generation.setdefault(wid, 0))
        return Destination(f"worker {wid}", wid, address, pb_grpc.WorkerStub, self._rpc_timeout,
                           max(self.barrier_timeout, self._rpc_timeout), on_down,
                           coalesce=self.mode == "async", encoder=self.encode, half=self._half,
                           open_channel=functools.partial(self._open_channel, wid))

    def start(self) -> None:
        self.state.model.relay_check = self.check_round
        self.state.model.relay = self.offer
        self._thread.start()

    # ------------------------------------------------------------------- receiving

    def check_round(self, worker_id: int, round_: int, header: DeltaHeader | None = None
                    ) -> bool:
        """InvalidMessage if a delta of ``worker_id`` cannot be labelled ``round_`` (sync:
        more than SYNC_ROUNDS_AHEAD past the last aggregate). Async workers are bounded by
        their staleness setting, which the relay is not told; codec.MAX_ROUND bounds them.
        True if the global model holds that delta already (never in a star; see
        TreeRoot)."""
        with self._cond:
            if self.mode != "sync" or worker_id not in self._pending:
                return False
            limit = self._sent_round + SYNC_ROUNDS_AHEAD
        if round_ > limit:
            raise InvalidMessage(f"delta round {round_} is ahead of the rounds this relay "
                                 f"let start (at most {limit})")
        return False

    def offer(self, delta: DecodedDelta, complete: bool, version: int = 0) -> None:
        """A delta the global model took (RPC thread): add it to its sender's pending sum.
        ``version``: the model's version once it was in (GlobalModel.model_version). Its
        round passed :meth:`check_round` before the model took it."""
        h = delta.header
        with self._cond:
            if h.worker_id not in self._pending or self._done:
                return
            if self._first_delta is None:
                self._first_delta = time.monotonic()
            idx, val = self._pending[h.worker_id]
            self._pending[h.worker_id] = merge_sparse(idx, val, delta.indices, delta.values)
            for wid, (upto, known) in self._known.items():
                # In the model a worker taken back was sent, though told only now.
                if version <= upto and wid != h.worker_id:
                    self._known[wid] = (upto, merge_sparse(*known, delta.indices, delta.values))
            self._examples[h.worker_id] = max(self._examples[h.worker_id], h.examples)
            if complete:
                self._round[h.worker_id] = max(self._round[h.worker_id], h.round)
                if h.final:
                    self._final[h.worker_id] = True
            self._cond.notify_all()

    @property
    def rounds(self) -> dict[int, int]:
        """Each worker's last complete round as the relay counts it (a copy)."""
        with self._cond:
            return dict(self._round)

    # --------------------------------------------------------------------- sending

    def _live(self) -> list[int]:
        dead = {r.worker_id for r in self.state.roster.workers.values() if r.dead}
        return [wid for wid in self._pending if wid not in dead]

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait(self.period)
                    if self._done:
                        return
                    live = self._live()
                    all_final = all(self._final[w] for w in live)
                    if self.mode == "sync" and not all_final:
                        target = self._sent_round + 1
                        if not all(self._final[w] or self._round[w] >= target for w in live):
                            self._drop_silent(live)
                            continue
                    elif not all_final and not any(self._pending[w][0].size for w in live) \
                            and min((self._round[w] for w in live), default=0) <= self._sent_round:
                        # async: nothing to pass on, and the round the aggregates vouch for
                        # has not moved (when it has, an empty aggregate carries it: workers
                        # bounded by staleness may be waiting for that alone)
                        continue
                    self._send(live, all_final)
                    if all_final:
                        self._done = True
                        return
        except Exception:  # a bug: the workers' barriers time out rather than hang
            log.exception("the star relay failed")

    def _drop_silent(self, live: list[int]) -> None:
        """Sync: a worker not heard from for barrier_timeout is dead (not waited for)."""
        if self._first_delta is None:
            return  # training has not begun anywhere yet: nobody is late
        now = time.monotonic()
        for wid in live:
            heard = max(self.state.roster.workers[wid].last_seen, self._first_delta)
            if not self._final[wid] and now - heard > self.barrier_timeout:
                log.warning("dropping worker %d from round %d: silent for more than "
                            "barrier_timeout=%gs", wid, self._sent_round + 1,
                            self.barrier_timeout)
                self.state.roster.mark_dead(wid, "silent for more than barrier_timeout "
                                                 "(star relay)")

    def _send(self, live: list[int], final: bool) -> None:
        """Queue for each live worker the sum of the others' pending deltas; clear them.
        A dead worker's last deltas count too: the global model took them, so the live
        workers must as well to stay equal to it."""
        total = EMPTY
        for pending in [*self._pending.values(), *self._ghosts.values()]:
            total = merge_sparse(*total, *pending)
        rounds = [self._round[w] for w in live]
        round_ = self._sent_round + 1 if self.mode == "sync" else min(rounds, default=0)
        round_ = max(round_, 0)
        examples = sum(self._examples.values())
        for wid in live:
            idx, val = total
            for own_idx, own_val in self._own_side(wid):
                idx, val = merge_sparse(idx, val, own_idx, -own_val)
            if wid in self._known:
                upto, (known_idx, known_val) = self._known[wid]
                idx, val = merge_sparse(idx, val, known_idx, -known_val)
                self._known[wid] = (upto, EMPTY)
            aggregate = OutgoingDelta(round_, final, examples, idx, val,
                                      applied=self.applied_counts())
            self._stamp(wid, aggregate)
            dest = self.destinations.get(wid)
            if dest is not None:
                dest.put_delta(aggregate)
            elif wid in self._parked:
                self._parked[wid].absorb(aggregate)
            else:
                self._parked[wid] = aggregate
            self.aggregates += 1
        for wid in self._pending:
            self._pending[wid] = EMPTY
        self._ghosts.clear()
        self._sent_round = max(self._sent_round, round_)

    def _stamp(self, wid: int, aggregate: OutgoingDelta) -> None:
        """(Holding the lock.) Book an aggregate for ``wid`` on its edge (a tree: its sum,
        see TreeRoot); nothing in a star."""

    def applied_counts(self) -> dict[int, int] | None:
        """What the aggregates say the model applied (a tree, async: see TreeRoot; read
        under the run state's lock); None in a star."""
        return None

    def _own_side(self, wid: int) -> list[Sparse]:
        """The pending sums ``wid`` has already: its own (a tree root: also those of the dead
        workers its subtree came from)."""
        return [self._pending[wid]]

    def encode(self, indices: npt.NDArray[np.int32], values: npt.NDArray[np.floating[Any]],
               round_: int, final: bool, examples: int) -> list[Any]:
        """An aggregate's Delta messages, as each worker's Destination sends them."""
        # The workers' counts summed: each is at most MAX_EXAMPLES (decode_delta), their sum
        # need not be, and the workers refuse a larger one.
        header = DeltaHeader(run_id=self.state.run_id, worker_id=COORDINATOR_SENDER_ID,
                             round=round_, seq=1, dim=self.dim, final=final,
                             examples=min(examples, MAX_EXAMPLES))
        return encode_delta_parts(header, indices, values, self.chunk_bytes)

    def _down(self, generation: int, wid: int, why: str) -> None:
        if generation != self._generation.get(wid):
            return  # the destination of an incarnation the relay has since replaced
        self.state.roster.mark_dead(wid, f"unreachable from the coordinator: {why}")

    # ------------------------------------------------------------------- taking back

    def take_back(self, wid: int, first_round: int) -> tuple[int, npt.NDArray[np.float64]]:
        """A worker registered again: live from now on, its first round (sync: the next
        aggregate's, whose barrier now waits for it; async: ``first_round``) and the global
        model to send it. Its aggregates wait until :meth:`release`."""
        with self._cond:
            old = self.destinations.get(wid)
            self._generation[wid] = self._generation.get(wid, 0) + 1
            # A new dict: closing and counting iterate the old one undisturbed.
            self.destinations = {k: d for k, d in self.destinations.items() if k != wid}
            first = self._sent_round + 1 if self.mode == "sync" else first_round
            self.state.roster.rejoined(wid, first - 1)
            model, version = self.state.model.model_version()
            # Everything pending was in the model before this copy; its own part is left
            # out of its aggregates anyway.
            known = EMPTY
            for sender, pending in [*self._pending.items(), *self._ghosts.items()]:
                if sender != wid:
                    known = merge_sparse(*known, *pending)
            self._known[wid] = (version, known)
            self._parked.pop(wid, None)
            self._round[wid] = first - 1
            self._final[wid] = False
            self._cond.notify_all()
        if old is not None:
            old.abandon()  # what it still held was for the dead incarnation
        return first, model

    def release(self, wid: int, address: str) -> None:
        """The worker taken back holds its model: send it aggregates from now on."""
        dest = self._destination(wid, address)
        with self._cond:
            self.destinations = {**self.destinations, wid: dest}
            parked = self._parked.pop(wid, None)
            if parked is not None:
                dest.put_delta(parked)

    # --------------------------------------------------------------------- closing

    def flush(self, timeout: float) -> None:
        """Wait (bounded) until every queued aggregate was sent."""
        deadline = time.monotonic() + timeout
        for dest in self.destinations.values():
            dest.flush(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        with self._cond:
            self._done = True
            self._cond.notify_all()
        self._thread.join(timeout=1.0)
        for dest in self.destinations.values():
            dest.close(timeout=1.0)

    def bytes_sent(self) -> int:
        return sum(d.bytes_sent for d in self.destinations.values())

    def messages_sent(self) -> int:
        return sum(d.acked.get("PushDelta", 0) for d in self.destinations.values())

    def recovery(self) -> dict[str, int]:
        """What recovering from faults cost, for metrics.json (a star has nothing to recover:
        its workers have no neighbours but the coordinator)."""
        return {}
