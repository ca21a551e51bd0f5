"""Refuse requests whose bytes are not the message they claim: INVALID_ARGUMENT and one line.

gRPC's Python server turns a request its deserializer cannot parse into INTERNAL and logs a
traceback per call, so anyone who can reach a port could fill a node's log. Every handler's
deserializer is wrapped here: a parse failure becomes a marker the handler refuses before the
servicer runs, and the refusals are summed into at most one log line per ``LOG_EVERY``.
The interceptor goes after the token gate, so authentication still decides first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import grpc

from hogwild.errors import InvalidMessage

log = logging.getLogger("hogwild.protocol")

# Seconds between two lines about malformed requests (the ones between are counted).
LOG_EVERY = 10.0


class Malformed:
    """What a request's deserializer returns for bytes it cannot parse."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class RefusalLog:
    """Log the first refusal, then at most one line per ``every`` seconds with the count."""

    def __init__(self, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = LOG_EVERY if every is None else every
        self.clock = clock
        self._lock = threading.Lock()
        self._next = float("-inf")
        self._pending = 0

    def refused(self, method: str, peer: str, reason: str) -> None:
        with self._lock:
            self._pending += 1
            now = self.clock()
            if now < self._next:
                return
            count, self._pending = self._pending, 0
            self._next = now + self.every
        log.warning("refused %d malformed request(s) in the last %gs (INVALID_ARGUMENT); "
                    "latest: %s from %s: %s", count, self.every, method,
                    peer.encode("unicode_escape").decode("ascii"), reason)


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200].encode("unicode_escape").decode("ascii")


def _safe(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the sender's fault
            return Malformed(_reason(exc))
    return parse


class MalformedGate(grpc.ServerInterceptor):  # type: ignore[misc]
    """Wrap every handler so that unparsable request bytes get INVALID_ARGUMENT."""

    def __init__(self, refusals: RefusalLog | None = None) -> None:
        self.refusals = refusals or RefusalLog()

    def intercept_service(self, continuation: Callable[[Any], Any],
                          details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = details.method
        parse = _safe(handler.request_deserializer)
        serialize = handler.response_serializer

        def refuse(context: grpc.ServicerContext, bad: Malformed) -> NoReturn:
            self.refusals.refused(method, context.peer(), bad.reason)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"malformed request for {method}: {bad.reason}")
            raise AssertionError("unreachable")  # context.abort raises

        def checked(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            for request in requests:
                if isinstance(request, Malformed):
                    self.refusals.refused(method, context.peer(), request.reason)
                    # Raised inside the servicer's loop: its status translation answers
                    # INVALID_ARGUMENT, and a partly read stream is dropped as any bad one.
                    raise InvalidMessage(f"malformed request for {method}: {request.reason}")
                yield request

        if handler.request_streaming:
            inner = handler.stream_stream if handler.response_streaming else handler.stream_unary

            def streaming(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
                return inner(checked(requests, context), context)

            make = (grpc.stream_stream_rpc_method_handler if handler.response_streaming
                    else grpc.stream_unary_rpc_method_handler)
            return make(streaming, request_deserializer=parse, response_serializer=serialize)

        inner = handler.unary_stream if handler.response_streaming else handler.unary_unary

        def unary(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, Malformed):
                refuse(context, request)
            return inner(request, context)

        make = (grpc.unary_stream_rpc_method_handler if handler.response_streaming
                else grpc.unary_unary_rpc_method_handler)
        return make(unary, request_deserializer=parse, response_serializer=serialize)
