"""Bringing back a worker that registered again during the run (restarted, or resynchronising)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from hogwild.cluster.coordinator.data.worker_shares import Shipper
from hogwild.cluster.coordinator.members.links import WorkerLinks, parallel
from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.coordinator.runconfig import RunConfigs
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import StarRelay
from hogwild.cluster.coordinator.watch.adjust import Adjuster
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.config import Settings
from hogwild.errors import ClusterError, HogwildError

log = logging.getLogger("hogwild.coordinator")


class Rejoins:
    """Takes each worker that registered again back into the run, on a thread of its own."""

    def __init__(self, settings: Settings, state: RunState, links: WorkerLinks,
                 shipper: Shipper, configs: RunConfigs, relay: StarRelay | None,
                 adjuster: Adjuster | None, stopped: Callable[[], bool],
                 say: Callable[[str], None]) -> None:
        self.settings = settings
        self.state = state
        self.links = links
        self.shipper = shipper
        self.configs = configs
        self.relay = relay
        self.adjuster = adjuster
        self.stopped = stopped
        self.say = say
        self._lock = threading.Lock()

    def start(self) -> None:
        """Bring back every worker that registered again (restarted, or resynchronising after
        its peers dropped it), each on its own thread so evaluations go on meanwhile."""
        for wid in self.state.roster.take_rejoins():
            threading.Thread(target=self._rejoin, args=(wid,), name=f"rejoin-{wid}",
                             daemon=True).start()

    def _rejoin(self, wid: int) -> None:
        """Ship the worker its shard again, configure it to start after the current round
        with the global model, tell its live peers it is back, start it.

        Deltas its peers built between the model snapshot and their PeerJoined reach the
        global model but not this worker's copy (at most about a round of them): its weights
        may differ from the global model by those (reported as max_abs_diff_to_global).
        """
        record = self.state.roster.workers[wid]
        links = self.links
        try:
            links.connect(record)
            links.wait_ready(record, self.settings.register_timeout, self.stopped)
            self.shipper.ship_to(record)
            # One rejoin at a time from here: each sees the ones before it live (and tells
            # them), and names the ones after it down; two taken together saw each other
            # as dead and told nobody. Shipping, the long part, stays in parallel.
            with self._lock:
                peers, dead = self.state.roster.others(wid)
                # A peer that is dead now may come back later: named (down), so this worker
                # takes it back then. Star: no peer traffic (and its averaging counts the peers).
                down = dead if self.settings.topology == "mesh" else []
                # It starts where its live peers are, not where the run's furthest record
                # is: its own old round may be far ahead of them (it trained on alone after
                # dropping them), and a staleness bound would leave it idle until they had
                # trained all those rounds. Round numbers only order deltas; the model it
                # starts from is the global one either way.
                round_ = max((p.round for p in peers), default=self.state.roster.max_round())
                # Tree: its neighbours re-attached around it for good; it comes back as a
                # leaf of the coordinator, which is a star worker's place.
                config = self.configs.build(record, peers, first_round=round_ + 1,
                                            examples_base=record.examples, down=down,
                                            topology="star" if self.relay else None)
                links.call(record, "Configure", config)
                if self.relay is not None:
                    self._rejoin_star(record, round_ + 1, self.relay)
                    return
                links.load_model(record, self.configs.layout.dim)
                # It starts at round_ + 1 or later: a peer that lags the run accepts its
                # deltas labelled from there on (and does not wait for the rounds before).
                joined = pb.PeerJoinedRequest(protocol_version=PROTOCOL_VERSION,
                                              run_id=self.state.run_id, worker_id=wid,
                                              address=record.address, first_round=round_ + 1)

                def tell(peer: WorkerRecord) -> int:
                    try:
                        return int(links.call(peer, "PeerJoined", joined).round)
                    except ClusterError as exc:
                        log.warning("%s", exc)
                        return 0

                # It starts where its peers start sending to it and waiting for it.
                first = max([round_ + 1, *parallel(tell, peers)])
                self.state.roster.rejoined(wid, first - 1)
                self._start_rejoined(record, first, f"{len(peers)} peer(s) told")
        except (ClusterError, HogwildError) as exc:
            log.warning("worker %d could not rejoin: %s", wid, exc)
            self.state.roster.mark_dead(wid, f"rejoin failed: {exc}")

    def _rejoin_star(self, record: WorkerRecord, first_round: int, relay: StarRelay) -> None:
        """(Rejoin lock held, the worker configured.) Topology star: the relay is its only
        peer. It takes the worker back and gives the model to send; the worker's aggregates
        wait until it holds that model (they leave out what the model holds already)."""
        wid = record.worker_id
        first, model = relay.take_back(wid, first_round)
        self.links.load_model(record, self.configs.layout.dim, model)
        relay.release(wid, record.address)
        self._start_rejoined(record, first, (
            "as a leaf of the coordinator: its place in the tree stays routed around"
            if self.settings.topology == "tree" else "through the star relay"))

    def _start_rejoined(self, record: WorkerRecord, first: int, how: str) -> None:
        """Start a worker taken back at round ``first``, and say so."""
        if self.adjuster is not None:  # it trains with the run's current step size
            self.adjuster.catch_up(record)
        self.links.call(record, "Start", pb.StartRequest(
            protocol_version=PROTOCOL_VERSION, run_id=self.state.run_id, first_round=first))
        self.say(f"worker {record.worker_id} rejoined at round {first} (incarnation "
                 f"{record.incarnation}, {how})")
