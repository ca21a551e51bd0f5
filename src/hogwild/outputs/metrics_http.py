"""A small HTTP(S) front for /metrics that no number of idle or slow clients can block.

One asyncio loop on one thread holds every connection: a client that connects and says
nothing, or trickles its request a byte at a time, costs a socket and a few hundred bytes,
not a thread. Each connection has one deadline for everything (TLS handshake, request,
answer); when ``max_clients`` are open, the oldest one that has not yet sent its whole request
is closed to make room, so a scraper that connects among a flood of idle sockets is still
answered. Each request is answered by the WSGI application (prometheus_client's) on a thread
of its own pool, and the connection closed (HTTP/1.0 semantics: one request each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

log = logging.getLogger("hogwild.metrics")

# Everything one connection may take, from accept to the last byte of the answer (a scraper
# needs milliseconds; Prometheus's own scrape timeout is 10 s).
REQUEST_SECONDS = 5.0
# Connections open at once; beyond, the oldest still sending its request is closed.
MAX_CLIENTS = 64
# A request line and headers larger than this are no scrape.
MAX_REQUEST_BYTES = 16 * 1024


def escaped(text: str | bytes, limit: int = 200) -> str:
    """``text`` for a log line: control bytes and non-ASCII escaped, cut at ``limit``."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    shown = text[:limit].encode("unicode_escape").decode("ascii")
    return shown + ("..." if len(text) > limit else "")


@dataclass(eq=False)
class _Client:
    writer: asyncio.StreamWriter
    peer: str
    accepted: float = field(default_factory=time.monotonic)
    answering: bool = False   # its whole request is in: no longer evictable


class MetricsHTTPServer:
    """Serve ``app`` on ``sock`` (bound and listening) until :meth:`shutdown`."""

    def __init__(self, sock: socket.socket, app: WSGIApplication,
                 tls: ssl.SSLContext | None = None, max_clients: int | None = None,
                 request_seconds: float | None = None) -> None:
        self.app = app
        self.tls = tls
        self.max_clients = MAX_CLIENTS if max_clients is None else max_clients
        self.request_seconds = REQUEST_SECONDS if request_seconds is None else request_seconds
        self.server_port = int(sock.getsockname()[1])
        self.evicted = 0      # idle or slow clients closed to make room for a new one
        self.timed_out = 0    # clients that did not finish within request_seconds
        self._sock = sock
        self._clients: list[_Client] = []
        self._loop = asyncio.new_event_loop()
        # Answers are made off the loop (the collector may take a lock of the process).
        self._answers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="metrics-answer")
        self._ready = threading.Event()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5.0)

    def shutdown(self) -> None:
        """Stop listening, close every connection, stop the thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5.0)
        self._answers.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(OSError):
            self._sock.close()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._serve, sock=self._sock, limit=MAX_REQUEST_BYTES))
            self._ready.set()
            self._loop.run_forever()
        finally:
            self._ready.set()
            if self._server is not None:
                self._server.close()
            for client in list(self._clients):
                client.writer.transport.abort()
            self._clients.clear()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    def _make_room(self) -> bool:
        """Close the oldest client still sending its request if the server is full; False
        when it is full of clients being answered (the new one is then closed)."""
        if len(self._clients) < self.max_clients:
            return True
        idle = next((c for c in self._clients if not c.answering), None)
        if idle is None:
            return False
        self.evicted += 1
        log.debug("metrics: closed %s after %.1fs without a whole request (%d clients open)",
                  idle.peer, time.monotonic() - idle.accepted, len(self._clients))
        idle.writer.transport.abort()
        self._clients.remove(idle)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = escaped(str(writer.get_extra_info("peername")))
        if not self._make_room():
            writer.transport.abort()
            return
        client = _Client(writer, peer)
        self._clients.append(client)
        try:
            async with asyncio.timeout(self.request_seconds):
                await self._exchange(client, reader, writer)
        except asyncio.CancelledError:
            pass  # the server is shutting down (a task that ends cancelled is logged by asyncio)
        except TimeoutError:
            self.timed_out += 1
            log.debug("metrics: %s did not finish within %gs", peer, self.request_seconds)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as exc:
            log.debug("metrics: %s: %s", peer, escaped(f"{type(exc).__name__}: {exc}"))
        else:
            writer.close()  # after the answer: it leaves once the kernel has it
            return
        finally:
            if client in self._clients:
                self._clients.remove(client)
        writer.transport.abort()  # whatever it sent or left unread is dropped

    async def _exchange(self, client: _Client, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        if self.tls is not None:
            await writer.start_tls(self.tls)
        head = await reader.readuntil(b"\r\n\r\n")
        client.answering = True
        environ, line = _environ(head, client.peer)
        if environ is None:
            status, headers, body = "400 Bad Request", [("Content-Type", "text/plain")], \
                b"bad request\n"
        else:
            status, headers, body = await self._loop.run_in_executor(
                self._answers, _call, self.app, environ)
        log.debug("%s %s %s", client.peer, escaped(line), status.split(" ", 1)[0])
        if environ is not None and environ["REQUEST_METHOD"] == "HEAD":
            body = b""
        names = {name.lower() for name, _ in headers}
        if "content-length" not in names:
            headers.append(("Content-Length", str(len(body))))
        headers.append(("Connection", "close"))
        out = [f"HTTP/1.1 {status}\r\n".encode("latin-1")]
        out += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers]
        writer.write(b"".join(out) + b"\r\n" + body)
        await writer.drain()


def _environ(head: bytes, peer: str) -> tuple[dict[str, Any] | None, bytes]:
    """A WSGI environment for the request ``head`` (request line and headers), None when
    it is not HTTP; and the request line, for the log."""
    lines = head.split(b"\r\n")
    line = lines[0]
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None, line
    method, target, protocol = parts
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": unquote(path, "latin-1"), "QUERY_STRING": query,
        "SERVER_PROTOCOL": protocol, "REMOTE_ADDR": peer, "SCRIPT_NAME": "",
    }
    for raw in lines[1:]:
        if not raw:
            continue
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            return None, line
        environ["HTTP_" + name.upper().replace("-", "_")] = value.strip()
    return environ, line


def _call(app: WSGIApplication,
          environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """Run ``app`` once: its status, headers and whole body."""
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], object]:
        answer["status"], answer["headers"] = status, list(headers)
        return lambda data: None

    chunks: Iterable[bytes] = app(environ, start_response)
    body = b"".join(chunks)
    return answer["status"], answer["headers"], body
