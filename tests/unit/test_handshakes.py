"""The socket-table reading behind the coordinator's line for failed TLS handshakes."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from hogwild.cluster.transport.handshakes import (
    ClosedBeforeCalls,
    HandshakeWatch,
    Socket,
    advice,
    parse,
    read_tables,
)

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
# Lines as Linux writes them: 127.0.0.1:50051 <- 127.0.0.1:53312 established (tcp), and the
# IPv4-mapped and plain IPv6 forms of tcp6.
V4 = ("   0: 0100007F:C383 0100007F:D040 01 00000000:00000000 00:00000000 00000000     0 "
      "       0 1234 1 0000000000000000 20 4 30 10 -1")
V6_MAPPED = ("   1: 0000000000000000FFFF00000100007F:C383 0000000000000000FFFF00000500000A:"
             "9A3F 06 00000000:00000000 03:00000847 00000000     0        0 0 3 0000000000000000")
V6_LOOPBACK = ("   2: 00000000000000000000000001000000:C383 00000000000000000000000001000000:"
               "A000 06 00000000:00000000 03:00000847 00000000     0        0 0 3 0")


def test_parse_reads_ports_hosts_and_states() -> None:
    assert list(parse([V4, V6_MAPPED, V6_LOOPBACK, "garbage", ""])) == [
        Socket(50051, "127.0.0.1", 53312, "01"),
        Socket(50051, "10.0.0.5", 0x9A3F, "06"),
        Socket(50051, "::1", 0xA000, "06"),
    ]


def test_only_connections_closed_here_before_two_looks_count() -> None:
    book = ClosedBeforeCalls(50051)
    good = Socket(50051, "10.0.0.1", 40000, "01")
    # A slow failing handshake that one look caught established.
    slow = Socket(50051, "10.0.0.4", 41000, "01")
    assert book.look([good, slow, Socket(50051, "10.0.0.9", 1, "0A")], now=0.0) == []
    assert book.look([good, slow._replace(state="06")], now=0.5) == ["10.0.0.4"]
    # The good connection, seen established twice, closed by this side later: not a
    # failure; a connection of another port, nor one the peer closed (CLOSE_WAIT, 08): none.
    assert book.look([good._replace(state="06"), Socket(50052, "10.0.0.2", 2, "06"),
                      Socket(50051, "10.0.0.3", 3, "08")], now=1.0) == []
    # Two failed connections from one host, one from another.
    failed = [Socket(50051, "10.0.0.7", 5000, "06"), Socket(50051, "10.0.0.7", 5001, "05"),
              Socket(50051, "10.0.0.8", 6000, "06")]
    assert book.look(failed, now=2.0) == ["10.0.0.7", "10.0.0.8"]
    # The same TIME_WAIT entries a second later are not counted again.
    assert book.look(failed, now=3.0) == []
    assert book.counts == {"10.0.0.4": 1, "10.0.0.7": 2, "10.0.0.8": 1}
    # Long after (past TIME_WAIT), a new connection on a port used before counts anew.
    assert book.look([failed[0]], now=200.0) == ["10.0.0.7"]
    assert book.counts["10.0.0.7"] == 3


def test_the_bookkeeping_is_bounded() -> None:
    book = ClosedBeforeCalls(1)
    many = [Socket(1, f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", i, s)
            for i in range(10_000) for s in ("01", "06")]
    book.look(many, now=0.0)
    book.look([Socket(1, f"10.9.9.{i % 256}", 60000 + i, "06") for i in range(5000)], now=1.0)
    assert max(book.remembered) <= 4096
    assert len(book.counts) <= 4096


def test_the_watch_logs_once_per_host_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    tables = [[Socket(7, "10.0.0.7", 1, "06")],
              [Socket(7, "10.0.0.7", 1, "06"), Socket(7, "10.0.0.7", 2, "06")],
              [Socket(7, "10.0.0.8", 3, "06")]]
    watch = HandshakeWatch(7, tls=True, read=lambda: tables.pop(0))
    with caplog.at_level(logging.WARNING, logger="hogwild.protocol"):
        assert watch.look() and watch.look() and watch.look()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"connections from 10.0.0.7 closed before their first call (1 so far): {advice(True)}",
        f"connections from 10.0.0.8 closed before their first call (1 so far): {advice(True)}"]
    assert watch.book.counts == {"10.0.0.7": 2, "10.0.0.8": 1}
    assert "insecure" in advice(True) and "speaks TLS to this plain-text server" in advice(False)
    # No table to read (not Linux): the watch says nothing and ends.
    assert not HandshakeWatch(7, tls=True, read=lambda: None).look()


def test_read_tables_sees_a_listening_socket_of_this_process(tmp_path: Path) -> None:
    if read_tables() is None:
        pytest.skip("no /proc/net/tcp on this system")  # (Linux writes it; CI runs Linux)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        sockets = read_tables() or []
        assert Socket(port, "0.0.0.0", 0, "0A") in sockets
    assert read_tables([tmp_path / "missing"]) is None
