"""Map hogwild's expected errors to gRPC status codes, in one place for every servicer."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc

from hogwild.errors import (
    Busy,
    ClusterError,
    Conflict,
    DataError,
    InvalidMessage,
    NotAllowed,
    NotReady,
    StaleOrUnknown,
)

log = logging.getLogger("hogwild.protocol")

F = TypeVar("F", bound=Callable[..., Any])

_CODES: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (InvalidMessage, grpc.StatusCode.INVALID_ARGUMENT),
    (StaleOrUnknown, grpc.StatusCode.FAILED_PRECONDITION),
    # A peer restarting at its old address: retryable, unlike FAILED_PRECONDITION, which
    # tells a worker its peers dropped it (it then leaves and registers again).
    (NotReady, grpc.StatusCode.UNAVAILABLE),
    (NotAllowed, grpc.StatusCode.PERMISSION_DENIED),
    (Busy, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Conflict, grpc.StatusCode.ALREADY_EXISTS),
    (ClusterError, grpc.StatusCode.UNAVAILABLE),
    # Data a node cannot use for the request (e.g. its copy of a file is not the planned one).
    (DataError, grpc.StatusCode.FAILED_PRECONDITION),
)


def status_of(exc: Exception) -> grpc.StatusCode | None:
    """The status code an expected error maps to; None for anything else (a bug)."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return None


def _abort(context: grpc.ServicerContext, exc: Exception, method: str) -> NoReturn:
    code = status_of(exc)
    if code is None:
        log.exception("%s failed", method)
        context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
    else:
        log.debug("%s: %s %s", method, code.name, exc)
        context.abort(code, str(exc))
    raise AssertionError("unreachable")  # context.abort raises


def translate(method: F) -> F:
    """Decorate a unary (or client-streaming) servicer method: expected errors become
    status codes with the error's message; anything else becomes INTERNAL and is logged."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status code
            _abort(context, exc, method.__name__)

    return wrapper  # type: ignore[return-value]


def translate_stream(method: F) -> F:
    """:func:`translate` for server-streaming methods (generators)."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status code
            _abort(context, exc, method.__name__)

    return wrapper  # type: ignore[return-value]
