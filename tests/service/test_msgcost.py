"""The per-message cost helper times real PushDelta calls, in plain text or mutual TLS."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from hogwild.cluster.transport import msgcost
from hogwild.cluster.transport.certs import write_bundle
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire.codec import decode_delta


def _tls(directory: Path) -> Security:
    bundle = write_bundle(directory)
    return Security(ca=bundle.ca.read_bytes(), cert=bundle.cert("worker").read_bytes(),
                    key=bundle.key("worker").read_bytes(),
                    token=bundle.token.read_text().strip())


def test_the_cost_of_a_message_is_measured_over_mutual_tls(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The server listens with TLS only (bind uses the credentials), so the calls went
    through the handshake and the token gate; each delta is decoded at the other end."""
    decoded: list[int] = []

    def counting(message: object, dim: int | None = None) -> object:
        decoded.append(int(message.values.length))  # type: ignore[attr-defined]
        return decode_delta(message, dim)  # type: ignore[arg-type]

    monkeypatch.setattr(msgcost, "decode_delta", counting)
    cost = msgcost.measure(500, round_trips=3, security=_tls(tmp_path))
    assert cost.small_seconds > 0 and cost.dense_seconds > 0 and cost.dense_entries == 500
    # 16 entries and 500: one call each to open the connection, then 3 timed.
    assert decoded == [16] * 4 + [500] * 4


def test_a_sync_rounds_burst_is_timed_across_processes(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Two worker processes and a coordinator (and a process keeping a core busy): each
    round both send to each other and to the coordinator at once, and each waits for the
    other's delta; a star sends up only."""
    before = {p.pid for p in multiprocessing.active_children()}
    mesh = msgcost.measure_burst(500, workers=2, mesh=True, rounds=3, busy=1)
    # the members and the spinning process are gone once it returns
    assert {p.pid for p in multiprocessing.active_children()} <= before
    assert (mesh.workers, mesh.destinations) == (2, 2)
    assert mesh.peers_in > 0 and mesh.all_acked > 0
    assert mesh.sender == mesh.all_acked / 2 and mesh.latency >= 0
    monkeypatch.setattr(msgcost, "MAX_BURST_WORKERS", 2)  # capped: 5 asked, 2 started
    star = msgcost.measure_burst(500, workers=5, mesh=False, rounds=3)
    assert (star.workers, star.destinations) == (2, 1)
    assert star.peers_in == 0 and star.latency == 0 and star.all_acked > 0
