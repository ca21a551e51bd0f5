"""Bytes that are not the message an RPC expects: INVALID_ARGUMENT, one log line, no traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from tests.service.conftest import CoordinatorServer, WorkerServer, loopback_settings

from hogwild.cluster.transport import malformed
from hogwild.cluster.transport.malformed import RefusalLog
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import pb
from hogwild.cluster.worker import create_server as create_worker

# Not a protobuf message: a tag whose varint never ends, and a field longer than the bytes.
JUNK = (b"\xff" * 12, b"\x0a\xff\xff\xff\x0f" + b"x" * 7)


def _methods(service: str) -> Iterator[tuple[str, bool, bool]]:
    descriptor = pb.DESCRIPTOR.services_by_name[service]
    for method in descriptor.methods:
        yield (f"/{descriptor.full_name}/{method.name}", method.client_streaming,
               method.server_streaming)


def _send(channel: grpc.Channel, method: str, client_streaming: bool,
          server_streaming: bool, payload: bytes) -> grpc.RpcError:
    call: Any
    if client_streaming:
        call = channel.stream_unary(method)
        request: Any = iter([payload])
    elif server_streaming:
        call = channel.unary_stream(method)
        request = payload
    else:
        call = channel.unary_unary(method)
        request = payload
    with pytest.raises(grpc.RpcError) as info:
        reply = call(request, timeout=10)
        if server_streaming:
            list(reply)
    return info.value


@pytest.fixture
def quiet_after_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """One line per server for the whole test, however slow the machine."""
    monkeypatch.setattr(malformed, "LOG_EVERY", 1e6)


# A streamed call is checked (who calls, in which phase) before its first chunk is read: a
# worker not yet configured refuses a model before reading it, whatever the bytes.
READ_LATER = {"/hogwild.v1.Worker/LoadModel": grpc.StatusCode.FAILED_PRECONDITION}


def _junk_everywhere(channel: grpc.Channel, service: str) -> int:
    calls = 0
    for method, client_streaming, server_streaming in _methods(service):
        for payload in JUNK:
            error = _send(channel, method, client_streaming, server_streaming, payload)
            expected = READ_LATER.get(method, grpc.StatusCode.INVALID_ARGUMENT)
            assert error.code() == expected, (method, error)
            if expected == grpc.StatusCode.INVALID_ARGUMENT:
                assert "malformed request" in (error.details() or ""), method
                calls += 1
    return calls


def _one_line_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    # Debug lines (each refusal, as for any refused call) are off unless asked for.
    lines = [r for r in caplog.records
             if r.levelno >= logging.INFO and "malformed" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "refused 1 malformed request" in lines[0].getMessage()
    assert "\n" not in lines[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert not [r for r in caplog.records if "deserializ" in r.getMessage()]


def test_junk_bytes_to_every_coordinator_rpc(quiet_after_one: None,
                                             coordinator_server: CoordinatorServer,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert _junk_everywhere(coordinator_server.channel, "Coordinator") >= 8
    _one_line_no_traceback(caplog)
    assert coordinator_server.state.model.deltas_received == 0


def test_junk_bytes_to_every_worker_rpc(quiet_after_one: None, worker_server: WorkerServer,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """As the coordinator (whose key the streaming calls check before reading a chunk)."""
    caplog.set_level(logging.DEBUG)
    assert _junk_everywhere(worker_server.channel, "Worker") >= 20
    _one_line_no_traceback(caplog)
    assert worker_server.node.shard is None and not worker_server.node.signals.stop_requested.is_set()


def test_without_the_token_junk_is_unauthenticated_and_not_read(
        quiet_after_one: None, caplog: pytest.LogCaptureFixture) -> None:
    settings = loopback_settings(workers=2, auth_token="the-run-token", insecure=True)
    server, port, _, _ = create_worker(settings)
    server.start()
    caplog.set_level(logging.DEBUG)
    try:
        with Security(token="not-the-token").channel(f"127.0.0.1:{port}") as channel:
            for method, client_streaming, server_streaming in _methods("Worker"):
                error = _send(channel, method, client_streaming, server_streaming, JUNK[0])
                assert error.code() == grpc.StatusCode.UNAUTHENTICATED, method
        with Security(token="the-run-token").channel(f"127.0.0.1:{port}") as channel:
            error = _send(channel, "/hogwild.v1.Worker/PushDelta", False, False, JUNK[0])
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        server.stop(grace=None).wait(5)
    assert len([r for r in caplog.records
                if r.levelno >= logging.INFO and "malformed" in r.getMessage()]) == 1


def test_refusals_between_two_lines_are_counted() -> None:
    now = [0.0]
    refusals = RefusalLog(every=10.0, clock=lambda: now[0])
    logged: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    catch = Catch()
    malformed.log.addHandler(catch)
    try:
        refusals.refused("/m", "ipv4:127.0.0.1:1", "bad")
        for t in (1.0, 5.0, 9.9):
            now[0] = t
            refusals.refused("/m", "ipv4:127.0.0.1:1\x1b[2J", "bad")
        assert len(logged) == 1
        now[0] = 10.5
        refusals.refused("/m", "ipv4:127.0.0.1:1\x1b[2J", "bad")
    finally:
        malformed.log.removeHandler(catch)
    assert len(logged) == 2
    assert "refused 4 malformed request(s)" in logged[1]
    assert "\x1b" not in logged[1]
