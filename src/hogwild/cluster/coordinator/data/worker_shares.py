"""Each worker's part of the training rows, shipped, with places of silent workers refilled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hogwild.cluster.coordinator.data.shipment import NoAnswer, Shipment, ship
from hogwild.cluster.coordinator.members.links import WorkerLinks, parallel
from hogwild.cluster.coordinator.members.records import WorkerRecord
from hogwild.cluster.coordinator.state import RunState
from hogwild.config import Settings
from hogwild.errors import ClusterError

if TYPE_CHECKING:
    from hogwild.cluster.coordinator.data.localplan import LocalShipping


class Shipper:
    """Ships the run's shards (or, shipping local, the plans of ranges) to the workers."""

    def __init__(self, settings: Settings, state: RunState, links: WorkerLinks,
                 shards: list[Any], local: LocalShipping | None,
                 say: Callable[[str], None]) -> None:
        self.settings = settings
        self.state = state
        self.links = links
        self.shards = shards
        self.local = local
        self.say = say
        self.shipments: list[Shipment] = []

    def ship_to(self, record: WorkerRecord) -> Shipment:
        """Worker ``record``'s shard (or plan of ranges), shipped and checked."""
        return ship(self.links.stubs[record.worker_id], record, self.shards[record.worker_id],
                    len(self.shards), self.settings, self.state.run_id, self.local)

    def ship_all(self, live: list[WorkerRecord], resumed: bool, stopped: Callable[[], bool],
                 leave_if_stopped: Callable[[], None]) -> list[WorkerRecord]:
        """Ship every live worker its part; the run's workers then (dead ones included).

        A worker whose address does not answer as that worker (a process that crashed after
        it registered, a registration by someone who serves nothing) gives its place back,
        said in one line; the next worker to register takes it and is shipped the same part,
        until register_timeout, when the run fails. A resumed run drops it instead (it
        rejoins if it registers again) and goes on with the others."""
        s = self.settings
        shipped: dict[int, Shipment] = {}
        pending = live
        while pending:
            results = parallel(self._ship_or_no_answer, pending)
            silent = [(r, why) for r, why in zip(pending, results) if isinstance(why, str)]
            shipped.update((r.worker_id, x) for r, x in zip(pending, results)
                           if isinstance(x, Shipment))
            if not silent:
                break
            for record, why in silent:
                if resumed:  # announced with the other drops
                    self.state.roster.mark_dead(record.worker_id, why)
                    continue
                self.say(f"{why}: its place goes to the next worker that registers "
                         f"(within register_timeout={s.register_timeout:g}s)")
                self.state.roster.release(record.worker_id)
            if resumed:
                if not shipped:
                    raise ClusterError("no worker of the resumed run answered its shipment")
                break
            pending = self.state.roster.wait_for_places([r.worker_id for r, _ in silent],
                                                        s.register_timeout, stopped)
            for record in pending:
                self.links.connect(record)
            leave_if_stopped()
        self.shipments = [shipped[wid] for wid in sorted(shipped)]
        workers = list(self.state.roster.workers.values())
        total = sum(x.nbytes for x in self.shipments)
        slowest = max(x.seconds for x in self.shipments)
        if self.local is not None:
            planned = sum(x.plan_bytes for x in self.shipments)
            self.say(f"{len(self.shipments)} worker(s) read their own rows (local), each range "
                     f"checked against its digest, in {slowest:.2f}s; 0 rows shipped "
                     f"({planned / 1e6:.2f} MB of plans and feature order)")
            return workers
        self.say(f"shipped {len(self.shipments)} shard(s) ({s.shipping}), {total / 1e6:.1f} "
                 f"MB in {slowest:.2f}s ({total / 1e6 / max(slowest, 1e-9):.0f} MB/s)")
        return workers

    def _ship_or_no_answer(self, record: WorkerRecord) -> Shipment | str:
        """The worker's shipment, or why nobody of this run answered at its address."""
        try:
            return self.ship_to(record)
        except NoAnswer as exc:
            return str(exc)

    def max_abs_value(self) -> float | None:
        """The largest |x| of the rows shipped to the workers; None with shipping local (the
        workers read their rows themselves)."""
        if self.local is not None:
            return None
        return max((float(np.max(np.abs(sh.values))) for sh in self.shards
                    if sh.values.shape[0]), default=0.0)

    @property
    def shipped_bytes(self) -> int:
        return sum(x.nbytes for x in self.shipments)

    @property
    def seconds(self) -> float:
        """The slowest shipment's time (they ran at once)."""
        return max((x.seconds for x in self.shipments), default=0.0)

    @property
    def plan_bytes(self) -> int:
        return sum(x.plan_bytes for x in self.shipments)
