"""Who may talk to a hogwild server: mutual TLS, the shared run token, per-sender keys.

Every server and every channel is built here, from the same :class:`Security`:

* **mutual TLS** (``tls_ca`` + ``tls_cert`` + ``tls_key``): servers require a client
  certificate signed by the CA; clients check the server's certificate against the CA and
  its name (the host dialled, or ``tls_server_name``).
* **run token** (``auth_token`` / ``auth_token_file``): sent as ``authorization: Bearer ...``
  on every call and checked by a server interceptor, in constant time, before any handler
  runs (UNAUTHENTICATED otherwise). Health checks stay open, for probes; nothing else does.
  A server without a token refuses the calls that carry one: the two sides disagree.
* **sender keys**: the coordinator gives each worker, over the authenticated channel, a key
  per direction (worker -> coordinator, coordinator -> worker, worker -> peer); the key rides
  as ``hogwild-key`` metadata and binds a call to the sender it claims to be (checked by the
  servicers, which know who is who).

Without TLS settings connections are plain text, which `hogwild coordinator` and `hogwild
worker` refuse unless ``insecure`` asks for it (:func:`require_tls`); serving.bind warns when
a plain-text server listens on anything but loopback.
"""

from __future__ import annotations

import functools
import hmac
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from hogwild.cluster.transport import mismatch
from hogwild.config import Settings
from hogwild.errors import Busy, ConfigError

log = logging.getLogger("hogwild.protocol")

TOKEN_HEADER = "authorization"
TOKEN_SCHEME = "Bearer "
KEY_HEADER = "hogwild-key"
# Callable without the token: probes (Kubernetes, docker healthchecks) carry no secrets.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
# A deadline further away than this is no deadline (gRPC reports "none" as a huge number).
_NO_DEADLINE = 1e6


# Every channel keeps its connections to itself (gRPC's default pool shares them between
# channels to the same address): a channel opened to a peer that restarted at its old
# address would otherwise inherit the dead process's reconnect backoff and fail fast for
# seconds (it grows to 120 s), long enough for the peer to be dropped again as unreachable.
# Within a cluster, a peer that comes back is retried at least every second.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


@dataclass(frozen=True)
class Security:
    """The credentials of one process, read once from the settings' files."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str = ""
    token: str = ""

    @property
    def tls(self) -> bool:
        return self.ca is not None

    def describe(self) -> str:
        """A few words for the start-up log."""
        parts = ["mutual TLS" if self.tls else "plain text"]
        parts.append("run token" if self.token else "no token")
        return ", ".join(parts)

    # ------------------------------------------------------------------ servers

    def server_interceptors(self) -> tuple[grpc.ServerInterceptor, ...]:
        # Always a gate: without a token of its own a server still refuses calls that carry
        # one (a client set up for another run, or a token set on one side only).
        return (TokenGate(self.token),)

    def server_credentials(self) -> grpc.ServerCredentials:
        assert self.ca is not None and self.cert is not None and self.key is not None
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    # ------------------------------------------------------------------ channels

    def channel(self, address: str, sender_key: str = "") -> grpc.Channel:
        """A channel to ``address`` that presents this process's certificate (TLS), the run
        token and ``sender_key`` (if any) on every call."""
        options: list[tuple[str, int | str]] = list(CHANNEL_OPTIONS)
        if self.tls:
            assert self.cert is not None and self.key is not None
            creds = grpc.ssl_channel_credentials(root_certificates=self.ca,
                                                 private_key=self.key,
                                                 certificate_chain=self.cert)
            if self.server_name:
                options.append(("grpc.ssl_target_name_override", self.server_name))
            channel = grpc.secure_channel(address, creds, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        metadata = self.metadata(sender_key)
        if not metadata:
            return channel
        return grpc.intercept_channel(channel, _AddMetadata(metadata))

    def metadata(self, sender_key: str = "") -> tuple[tuple[str, str], ...]:
        items: list[tuple[str, str]] = []
        if self.token:
            items.append((TOKEN_HEADER, TOKEN_SCHEME + self.token))
        if sender_key:
            items.append((KEY_HEADER, sender_key))
        return tuple(items)


@functools.lru_cache(maxsize=8)
def _load(tls_ca: str, tls_cert: str, tls_key: str, server_name: str, token: str,
          token_file: str) -> Security:
    if token_file:
        token = _read("auth_token_file", token_file).decode("utf-8", "replace").strip()
        if not token:
            raise ConfigError("auth_token_file", f"{token_file} is empty")
    if token and any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise ConfigError("auth_token", "must be printable ASCII without spaces")
    if not tls_ca:
        return Security(server_name=server_name, token=token)
    return Security(ca=_read("tls_ca", tls_ca), cert=_read("tls_cert", tls_cert),
                    key=_read("tls_key", tls_key), server_name=server_name, token=token)


def from_settings(settings: Settings) -> Security:
    """The credentials the settings name (files read once per process); ConfigError naming
    the key of a file that cannot be read."""
    return _load(settings.tls_ca, settings.tls_cert, settings.tls_key, settings.tls_server_name,
                 settings.auth_token, settings.auth_token_file)


def require_tls(settings: Settings, command: str) -> None:
    """ConfigError (one line: how to make credentials, or how to ask for plain text) when
    ``command`` would serve plain text without ``insecure``: in plain text anyone who reaches
    the port can register, and receives the run id and its keys."""
    if settings.tls_ca or settings.insecure:
        return
    raise ConfigError("insecure", f"`hogwild {command}` serves mutual TLS unless plain text is "
                      "asked for, and no tls_ca, tls_cert and tls_key are set: make them with "
                      "`hogwild certs --out DIR --hosts NAMES` (it prints the settings for each "
                      "role), or pass --insecure (insecure: true, HOGWILD_INSECURE=true) to "
                      "serve plain text, where anyone who reaches the port can join the run")


def _read(key: str, path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror}") from None
    if key.startswith("tls_") and b"-----BEGIN " not in data:
        raise ConfigError(key, f"{path} is not a PEM file")
    return data


# ---------------------------------------------------------------------- the token gate


class TokenGate(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuse every call without the run token (UNAUTHENTICATED) before its handler runs;
    health checks pass. Without a token of its own, refuse the calls that carry one. The
    comparison takes the same time wherever the tokens differ.

    The details say which of the three it was (the client names the setting to fix), and the
    server logs one line per peer host and kind of refusal, at most once a minute (a client
    that retries would otherwise write a line per call)."""

    def __init__(self, token: str, log_every: float = 60.0) -> None:
        self._expected = (TOKEN_SCHEME + token).encode() if token else b""
        self._notes = RateLimitedNotes(log_every)

    def intercept_service(self, continuation: Callable[[Any], Any],
                          details: grpc.HandlerCallDetails) -> Any:
        if details.method in OPEN_METHODS:
            return continuation(details)
        refusal = self._refusal(details.invocation_metadata)
        if refusal is None:
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None  # unknown method: UNIMPLEMENTED, as without a gate

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            host = peer_host(context.peer())
            self._notes.note((host, refusal), "refused calls from %s: %s; %s", host, refusal,
                             _FIX[refusal])
            context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(deny)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(deny)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny)
        return grpc.unary_unary_rpc_method_handler(deny)

    def _refusal(self, metadata: Sequence[tuple[str, Any]] | None) -> str | None:
        """None when the call may pass; else the details of its refusal."""
        given = b""
        for name, value in metadata or ():
            if name == TOKEN_HEADER:
                given = value.encode() if isinstance(value, str) else bytes(value)
                break
        if not self._expected:
            return mismatch.UNEXPECTED_TOKEN if given else None
        if hmac.compare_digest(given, self._expected):
            return None
        return mismatch.WRONG_TOKEN if given else mismatch.NO_TOKEN


# What the server's operator reads after each refusal: the setting on the caller's side.
_FIX = {
    mismatch.NO_TOKEN: "give that node this server's token (auth_token_file)",
    mismatch.WRONG_TOKEN: "give that node this server's token file (auth_token_file)",
    mismatch.UNEXPECTED_TOKEN: "set the same auth_token_file here, or none on that node",
}


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    address = peer.partition(":")[2] or peer
    host = address.rpartition(":")[0] or address
    return host.strip("[]")


class RateLimitedNotes:
    """Warnings logged at most once per ``every`` seconds for each key."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._last: dict[object, float] = {}
        self._lock = threading.Lock()

    def note(self, key: object, message: str, *args: object) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._every:
                return False
            self._last[key] = now
        log.warning(message, *args)
        return True


def sender_key(context: grpc.ServicerContext) -> str:
    """The ``hogwild-key`` a call carries ("" if none)."""
    for name, value in context.invocation_metadata() or ():
        if name == KEY_HEADER:
            return value if isinstance(value, str) else bytes(value).decode("ascii", "replace")
    return ""


def can_serve(context: grpc.ServicerContext) -> bool:
    """False when the caller's TLS certificate is for clients only (no serverAuth usage): such
    a caller (an operator's tool) may not join as a worker, whom peers dial as a server. True
    without TLS (nothing to check) and for certificates without a usage restriction."""
    pems = context.auth_context().get("x509_pem_cert")
    if not pems:
        return True
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    cert = x509.load_pem_x509_certificate(pems[0])
    try:
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return ExtendedKeyUsageOID.SERVER_AUTH in usage


def same_key(given: str, expected: str) -> bool:
    """Constant-time comparison; an empty expected key admits nobody."""
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


# ------------------------------------------------------------- client-side metadata


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class _AddMetadata(grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
                   grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
                   grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
                   grpc.StreamStreamClientInterceptor):  # type: ignore[misc]
    """Adds fixed metadata (token, sender key) to every call of a channel."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def _details(self, details: Any) -> _CallDetails:
        metadata = tuple(details.metadata or ()) + self._metadata
        return _CallDetails(details.method, details.timeout, metadata,
                            getattr(details, "credentials", None),
                            getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


# ------------------------------------------------------------------ bounded handlers


class CallLimit:
    """At most ``limit`` long calls (streams, waits) at once; more are refused with Busy
    (RESOURCE_EXHAUSTED) at once, so they never fill the server's thread pool."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        self.limit = limit

    @contextmanager
    def slot(self, what: str) -> Iterator[None]:
        if not self._slots.acquire(blocking=False):
            raise Busy(f"{what}: {self.limit} such calls already running; try again later")
        try:
            yield
        finally:
            self._slots.release()


def wait_budget(context: grpc.ServicerContext, default: float, ceiling: float) -> float:
    """How long a handler may wait: the caller's deadline (less a margin to answer in), at
    most ``ceiling``; ``default`` when the call has no deadline."""
    remaining: float | None = context.time_remaining()
    if remaining is None or not math.isfinite(remaining) or remaining > _NO_DEADLINE:
        return default
    return max(0.0, min(ceiling, remaining - 0.2))
