"""Peers whose connections a server closes before their first call: a TLS mismatch, told once per host.

gRPC's core gives a Python server no word of a failed handshake (it logs one line per attempt
at its info level, without the peer's address, and the process keeps that level off). Its
trace is in the kernel's socket table: a connection this server closed first sits in
TIME_WAIT (or on its way there) for a minute, with the peer's address and port. A connection
that passed its handshake lives long enough to be seen established by two looks; a failed
handshake (plain text against TLS, TLS against plain text, a certificate of another CA) ends
within milliseconds, or on a loaded machine within a fraction of a second, so one look at
most catches it established. A client that hangs up first (a health check, a
worker leaving) leaves no TIME_WAIT on this side, so it is not counted.

:class:`HandshakeWatch` looks at the table once a second (Linux's /proc/net/tcp and tcp6; where
they cannot be read it says nothing) and writes one line per peer host, at most once a
minute, with the count, naming the settings to compare. The peer's own log names the one to
fix (hogwild.cluster.transport.mismatch).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from hogwild.cluster.transport.security import RateLimitedNotes

log = logging.getLogger("hogwild.protocol")

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
ESTABLISHED = "01"
# This side closed first: FIN_WAIT1, FIN_WAIT2, TIME_WAIT, CLOSING.
CLOSED_HERE = frozenset({"04", "05", "06", "0B"})
# Endpoints remembered (established ones seen, closed ones counted); beyond, the oldest go.
MAX_ENDPOINTS = 4096
# A connection this side closed after fewer looks saw it established failed its handshake:
# one look may fall inside a slow failing handshake, two a second apart may not.
SEEN_TO_PASS = 2
# A closed connection stays in TIME_WAIT for 60 s on Linux: counted once within that time.
COUNTED_FOR = 120.0


class Socket(NamedTuple):
    local_port: int
    host: str          # the peer's address as a user writes it (IPv4-mapped IPv6 as IPv4)
    port: int          # the peer's port
    state: str         # the kernel's state, two hex digits


def _address(hex_address: str) -> str:
    """The kernel table's hex address (host byte order per 32-bit word) as text."""
    raw = bytes.fromhex(hex_address)
    # Each 32-bit word is little-endian on the machines Linux tables are read on.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return str(ipaddress.IPv4Address(words))
    v6 = ipaddress.IPv6Address(words)
    return str(v6.ipv4_mapped) if v6.ipv4_mapped is not None else str(v6)


def parse(lines: Iterable[str]) -> Iterator[Socket]:
    """The sockets of one /proc/net/tcp{,6} text (header line skipped, odd lines ignored)."""
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1] or ":" not in fields[2]:
            continue
        try:
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            remote, remote_port = fields[2].rsplit(":", 1)
            yield Socket(local_port, _address(remote), int(remote_port, 16), fields[3].upper())
        except ValueError:
            continue


def read_tables(tables: Iterable[Path] = TABLES) -> list[Socket] | None:
    """Every TCP socket of this network namespace; None where no table can be read."""
    sockets: list[Socket] = []
    read = False
    for table in tables:
        try:
            text = table.read_text()
        except OSError:
            continue
        read = True
        sockets.extend(parse(text.splitlines()[1:]))
    return sockets if read else None


class ClosedBeforeCalls:
    """The bookkeeping: which connections to ``port`` this side closed before two looks saw
    them established, counted per peer host."""

    def __init__(self, port: int) -> None:
        self.port = port
        # Looks that saw each connection established; insertion order: oldest first.
        self._established: dict[tuple[str, int], int] = {}
        self._counted: dict[tuple[str, int], float] = {}
        self.counts: dict[str, int] = {}

    @property
    def remembered(self) -> tuple[int, int]:
        """(connections seen established, closed connections counted) that the book holds:
        each bounded, whatever a peer opens."""
        return len(self._established), len(self._counted)

    def look(self, sockets: Iterable[Socket], now: float) -> list[str]:
        """Feed one reading of the table; the hosts with a new failed connection in it."""
        failed: list[str] = []
        for endpoint in [e for e, t in self._counted.items() if now - t > COUNTED_FOR]:
            del self._counted[endpoint]
        present: set[tuple[str, int]] = set()
        for sock in sockets:
            if sock.local_port != self.port:
                continue
            endpoint = (sock.host, sock.port)
            present.add(endpoint)
            if sock.state == ESTABLISHED:
                self._established[endpoint] = self._established.get(endpoint, 0) + 1
            elif sock.state in CLOSED_HERE:
                if (endpoint in self._counted
                        or self._established.get(endpoint, 0) >= SEEN_TO_PASS):
                    continue
                self._counted[endpoint] = now
                self.counts[sock.host] = self.counts.get(sock.host, 0) + 1
                if sock.host not in failed:
                    failed.append(sock.host)
        # A connection gone from the table is forgotten (its port may serve another later).
        for endpoint in [e for e in self._established if e not in present]:
            del self._established[endpoint]
        for table in (self._established, self._counted):
            while len(table) > MAX_ENDPOINTS:
                del table[next(iter(table))]
        while len(self.counts) > MAX_ENDPOINTS:
            del self.counts[next(iter(self.counts))]
        return failed


def advice(tls: bool) -> str:
    """What the operator of a server with (``tls``) or without TLS compares on that peer."""
    if tls:
        return ("likely a node without TLS (insecure) or with a certificate another CA signed: "
                "give it this server's tls_ca and a tls_cert/tls_key that CA signed; its own "
                "log names the setting")
    return ("likely a node that speaks TLS to this plain-text server: set insecure on that "
            "node, or tls_ca, tls_cert and tls_key on both; its own log names the setting")


class HandshakeWatch:
    """A daemon thread that reads the socket table every ``every`` seconds and logs each peer
    host whose connections to ``port`` fail before their first call, at most once per
    ``log_every`` seconds per host."""

    def __init__(self, port: int, tls: bool, every: float = 1.0, log_every: float = 60.0,
                 read: Callable[[], list[Socket] | None] = read_tables) -> None:
        self.book = ClosedBeforeCalls(port)
        self._tls = tls
        self._every = every
        self._read = read
        self._notes = RateLimitedNotes(log_every)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="handshake-watch", daemon=True)

    def start(self) -> HandshakeWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self._every + 1.0)

    def look(self) -> bool:
        """One reading; False where the table cannot be read (the watch then ends)."""
        sockets = self._read()
        if sockets is None:
            return False
        for host in self.book.look(sockets, time.monotonic()):
            self._notes.note(("closed", host), "connections from %s closed before their first "
                             "call (%d so far): %s", host, self.book.counts[host],
                             advice(self._tls))
        return True

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self._every):
                if not self.look():
                    log.debug("no socket table to read: failed handshakes go untold here")
                    return
        except Exception:  # a watch that fails must not take the server with it
            log.debug("the handshake watch ended", exc_info=True)
