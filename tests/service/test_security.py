"""Real servers with mutual TLS and a run token: strangers are refused before any handler runs,
and the attacks an operator can try from any client leave the model untouched."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from hogwild.cluster.coordinator.server import create_server as create_coordinator
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.transport.certs import Bundle, write_bundle
from hogwild.cluster.transport.health import check
from hogwild.cluster.transport.security import Security, from_settings
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.wire.codec import DeltaHeader, encode_delta
from hogwild.cluster.worker import create_server as create_worker
from hogwild.cluster.worker.servicer import LONG_CALLS
from hogwild.config import Settings
from hogwild.errors import ClusterError

from .conftest import CoordinatorServer, WorkerServer, loopback_settings

DIM = 501


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return write_bundle(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """Certificates from another CA, valid for the same names."""
    return write_bundle(tmp_path_factory.mktemp("rogue"))


def _tls(bundle: Bundle, role: str) -> dict[str, Any]:
    return {"tls_ca": str(bundle.ca), "tls_cert": str(bundle.cert(role)),
            "tls_key": str(bundle.key(role)), "auth_token_file": str(bundle.token)}


def _client(bundle: Bundle, role: str = "client", token: str | None = None,
            **extra: Any) -> Security:
    settings = loopback_settings(**{**_tls(bundle, role), **extra})
    own = from_settings(settings)
    return Security(ca=own.ca, cert=own.cert, key=own.key, server_name=own.server_name,
                    token=own.token if token is None else token)


@dataclass
class Secured:
    server: grpc.Server
    port: int
    state: RunState
    settings: Settings

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def secured(bundle: Bundle) -> Iterator[Secured]:
    """A coordinator with mutual TLS and a token; worker 0 registered, model allocated."""
    settings = loopback_settings(workers=2, **_tls(bundle, "coordinator"))
    server, port, state, _ = create_coordinator(settings)
    server.start()
    state.roster.register("127.0.0.1:1", threads=1)
    state.model.start_model(DIM)
    try:
        yield Secured(server, port, state, settings)
    finally:
        server.stop(grace=None).wait(5)


def _poison(run_id: str, seq: int = 1, worker_id: int = 0) -> pb.Delta:
    idx = np.arange(0, DIM, 7, dtype=np.int32)
    return encode_delta(DeltaHeader(run_id, worker_id, round=1, seq=seq, dim=DIM), idx,
                        np.full(idx.shape, 1e30, dtype=np.float32))


def _push(security: Security, address: str, message: pb.Delta, key: str = "") -> Any:
    with security.channel(address, sender_key=key) as channel:
        return pb_grpc.CoordinatorStub(channel).PushDelta(message, timeout=5)


def _refused(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def _untouched(state: RunState) -> None:
    assert not state.model.model_copy().any(), "a refused call changed the model"
    assert state.model.deltas_received == 0


# ------------------------------------------------------------------- who gets in


def test_client_without_a_certificate_is_refused(secured: Secured, bundle: Bundle) -> None:
    token = _client(bundle).token
    plain = Security(token=token)  # the right token, but no TLS at all
    err = _refused(lambda: _push(plain, secured.address, _poison(secured.state.run_id),
                                 secured.state.roster.worker_key(0)))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    # TLS that trusts the server but presents no client certificate: the handshake fails.
    own = _client(bundle)
    no_cert = grpc.ssl_channel_credentials(root_certificates=own.ca)
    with grpc.secure_channel(secured.address, no_cert) as channel:
        err = _refused(lambda: pb_grpc.CoordinatorStub(channel).PushDelta(
            _poison(secured.state.run_id), timeout=5,
            metadata=(("authorization", f"Bearer {token}"),
                      ("hogwild-key", secured.state.roster.worker_key(0)))))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    _untouched(secured.state)


def test_certificate_from_another_ca_is_refused(secured: Secured, bundle: Bundle,
                                                rogue: Bundle) -> None:
    stranger = _client(rogue, token=_client(bundle).token)  # even with the right token
    err = _refused(lambda: _push(stranger, secured.address, _poison(secured.state.run_id),
                                 secured.state.roster.worker_key(0)))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    register = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address="10.9.9.9:1")
    with stranger.channel(secured.address) as channel:
        err = _refused(lambda: pb_grpc.CoordinatorStub(channel).Register(register, timeout=5))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert len(secured.state.roster.workers) == 1, "a stranger took a worker slot"
    _untouched(secured.state)


def test_the_server_name_is_checked(secured: Secured, bundle: Bundle) -> None:
    wrong_name = _client(bundle, tls_server_name="coordinator.example.org")
    err = _refused(lambda: _push(wrong_name, secured.address, _poison(secured.state.run_id)))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    right_name = _client(bundle, tls_server_name="localhost")
    assert check(secured.address, timeout=5, channel_factory=right_name.channel) == "NOT_SERVING"


@pytest.mark.parametrize("token", ["", "wrong-token"])
def test_wrong_or_missing_token_is_unauthenticated(secured: Secured, bundle: Bundle,
                                                   token: str) -> None:
    client = _client(bundle, token=token)
    err = _refused(lambda: _push(client, secured.address, _poison(secured.state.run_id),
                                 secured.state.roster.worker_key(0)))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert secured.state.run_id not in (err.details() or "")
    register = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address="10.9.9.9:1")
    with client.channel(secured.address) as channel:
        err = _refused(lambda: pb_grpc.CoordinatorStub(channel).Register(register, timeout=5))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert len(secured.state.roster.workers) == 1
    _untouched(secured.state)


def test_health_is_open_without_a_token_and_nothing_else(secured: Secured,
                                                         bundle: Bundle) -> None:
    no_token = _client(bundle, token="")
    assert check(secured.address, timeout=5, channel_factory=no_token.channel) == "NOT_SERVING"
    with no_token.channel(secured.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        err = _refused(lambda: list(stub.ServerReflectionInfo(iter([request]), timeout=5)))
    assert err.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED)


def test_the_authenticated_worker_still_gets_through(secured: Secured, bundle: Bundle) -> None:
    worker = _client(bundle, "worker")
    idx = np.array([3, 7], dtype=np.int32)
    message = encode_delta(DeltaHeader(secured.state.run_id, 0, round=1, seq=1, dim=DIM), idx,
                           np.array([0.5, -1.0], dtype=np.float32))
    assert not _push(worker, secured.address, message, secured.state.roster.worker_key(0)).duplicate
    assert secured.state.model.model_copy()[7] == -1.0


# ------------------------------------------------- attacks from an authenticated caller


def test_poison_and_seq_squat_without_the_worker_key_fail(secured: Secured,
                                                          bundle: Bundle) -> None:
    """A caller with a valid certificate and token but not worker 0's key cannot speak for
    worker 0: neither a 1e30 delta nor squatting on its next sequence numbers."""
    insider = _client(bundle, "client")
    run_id = secured.state.run_id
    for key in ("", secured.state.roster.worker_key(1), "0" * 32):
        err = _refused(lambda k=key: _push(insider, secured.address, _poison(run_id), k))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    for seq in range(1, 20):
        err = _refused(lambda s=seq: _push(insider, secured.address, _poison(run_id, s)))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    _untouched(secured.state)
    # The real worker's first delta is applied, not taken for a duplicate.
    real = encode_delta(DeltaHeader(run_id, 0, round=1, seq=1, dim=DIM),
                        np.array([5], dtype=np.int32), np.array([2.0], dtype=np.float32))
    ack = _push(_client(bundle, "worker"), secured.address, real,
                secured.state.roster.worker_key(0))
    assert not ack.duplicate and secured.state.model.model_copy()[5] == 2.0


def test_a_jump_in_seq_is_refused_even_from_the_worker(secured: Secured,
                                                       bundle: Bundle) -> None:
    worker, key = _client(bundle, "worker"), secured.state.roster.worker_key(0)
    err = _refused(lambda: _push(worker, secured.address, _poison(secured.state.run_id, 1000),
                                 key))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "gap" in (err.details() or "")
    _untouched(secured.state)


def test_rejections_name_neither_the_run_nor_the_model_size(
        coordinator_server: CoordinatorServer) -> None:
    """Plain text, no token: whoever reaches the port learns nothing from a refusal."""
    state = coordinator_server.state
    state.roster.register("127.0.0.1:1", threads=1)
    state.roster.register("127.0.0.1:2", threads=1)
    state.model.start_model(DIM)
    stub = coordinator_server.stub
    details = []
    for call in (
            lambda: stub.Register(pb.RegisterRequest(protocol_version=PROTOCOL_VERSION,
                                                     address="10.0.0.9:1"), timeout=5),
            lambda: stub.Register(pb.RegisterRequest(protocol_version=PROTOCOL_VERSION,
                                                     run_id="guess", address="10.0.0.9:1"),
                                  timeout=5),
            lambda: stub.PushDelta(_poison("guess"), timeout=5),
            lambda: stub.ReportProgress(pb.Progress(protocol_version=PROTOCOL_VERSION,
                                                    run_id="guess", worker_id=0), timeout=5)):
        details.append(_refused(call).details() or "")
    for text in details:
        assert state.run_id not in text and str(DIM) not in text and "2 workers" not in text


# ----------------------------------------------------------------------- the worker


def test_stop_and_final_state_need_the_coordinator_key(worker_server: WorkerServer) -> None:
    node = worker_server.node
    with Security().channel(worker_server.address, sender_key="not-the-key") as channel:
        stub = pb_grpc.WorkerStub(channel)
        stop = pb.StopRequest(protocol_version=PROTOCOL_VERSION, run_id=node.run_id)
        assert _refused(lambda: stub.Stop(stop, timeout=5)).code() == \
            grpc.StatusCode.PERMISSION_DENIED
        read = pb.FinalStateRequest(protocol_version=PROTOCOL_VERSION, run_id=node.run_id)
        assert _refused(lambda: list(stub.GetFinalState(read, timeout=5))).code() == \
            grpc.StatusCode.PERMISSION_DENIED
    assert not node.signals.stop_requested.is_set()
    # A peer's key is not the coordinator's either.
    stop = pb.StopRequest(protocol_version=PROTOCOL_VERSION, run_id=node.run_id)
    assert _refused(lambda: worker_server.peer_stub.Stop(stop, timeout=5)).code() == \
        grpc.StatusCode.PERMISSION_DENIED
    assert not node.signals.stop_requested.is_set()


def test_an_adjustment_needs_the_coordinator_key(worker_server: WorkerServer) -> None:
    """Only the coordinator may change a worker's step size: a peer or a stranger asking
    gets PERMISSION_DENIED and the worker's plan is untouched."""
    node = worker_server.node
    adjust = pb.Adjustment(protocol_version=PROTOCOL_VERSION, run_id=node.run_id, number=1,
                           lr_scale=1e-9, staleness=1, reason="a stranger's")
    with Security().channel(worker_server.address, sender_key="not-the-key") as channel:
        assert _refused(lambda: pb_grpc.WorkerStub(channel).Adjust(adjust, timeout=5)).code() \
            == grpc.StatusCode.PERMISSION_DENIED
    assert _refused(lambda: worker_server.peer_stub.Adjust(adjust, timeout=5)).code() == \
        grpc.StatusCode.PERMISSION_DENIED
    assert node.adjustment == 0 and node.step_plan is node.plan
    # The coordinator's own, out of range: refused as malformed, nothing taken.
    with Security().channel(worker_server.address, sender_key=node.coordinator_key) as channel:
        for bad in (pb.Adjustment(protocol_version=PROTOCOL_VERSION, run_id=node.run_id,
                                  number=1, lr_scale=2.0),
                    pb.Adjustment(protocol_version=PROTOCOL_VERSION, run_id=node.run_id,
                                  number=1, lr_scale=float("nan")),
                    pb.Adjustment(protocol_version=PROTOCOL_VERSION, run_id=node.run_id,
                                  number=1, lr_scale=0.5, staleness=-3)):
            assert _refused(lambda m=bad: pb_grpc.WorkerStub(channel).Adjust(  # type: ignore[misc]
                m, timeout=5)).code() == grpc.StatusCode.INVALID_ARGUMENT
    assert node.adjustment == 0 and node.step_plan is node.plan


def test_long_calls_are_bounded_and_a_missing_deadline_is_rpc_timeout(
        coordinator_server: CoordinatorServer) -> None:
    """12 final-state reads at once cannot take the worker's threads: LONG_CALLS wait, the
    rest are refused at once; a read without a deadline ends after rpc_timeout."""
    settings = loopback_settings(coordinator_address=coordinator_server.address, workers=2,
                                 rpc_timeout=1.5)
    server, port, node, _ = create_worker(settings)
    server.start()
    try:
        node.register(port)
        address = f"127.0.0.1:{port}"
        read = pb.FinalStateRequest(protocol_version=PROTOCOL_VERSION, run_id=node.run_id)
        with Security().channel(address, sender_key=node.coordinator_key) as channel:
            stub = pb_grpc.WorkerStub(channel)

            def one(_: int) -> grpc.StatusCode:
                try:
                    list(stub.GetFinalState(read))  # no deadline
                except grpc.RpcError as exc:
                    return exc.code()
                return grpc.StatusCode.OK

            began = time.monotonic()
            with futures.ThreadPoolExecutor(12) as pool:
                codes = list(pool.map(one, range(12)))
            took = time.monotonic() - began
            busy = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
            waited = codes.count(grpc.StatusCode.UNAVAILABLE)  # "has not finished yet"
            assert busy >= 12 - LONG_CALLS and busy + waited == 12, codes
            assert took < 30, "calls without a deadline were not bounded"
            # The server still answers other calls afterwards.
            assert check(address, timeout=5) in ("SERVING", "NOT_SERVING")
    finally:
        node.ending.request_stop("test over")
        node.close()
        server.stop(grace=None).wait(5)


# ------------------------------------------------------------ what the servers expose


def _list_services(address: str) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        try:
            list(stub.ServerReflectionInfo(iter([request]), timeout=5))
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("reflection", [False, True])
def test_reflection_is_off_unless_asked_for(reflection: bool) -> None:
    server, port, _, _ = create_coordinator(loopback_settings(reflection=reflection))
    server.start()
    try:
        code = _list_services(f"127.0.0.1:{port}")
    finally:
        server.stop(grace=None).wait(5)
    assert code == (grpc.StatusCode.OK if reflection else grpc.StatusCode.UNIMPLEMENTED)


def test_a_busy_port_is_one_clear_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ClusterError, match=f"127.0.0.1:{port}"):
            create_coordinator(loopback_settings(coordinator_port=port))


def test_two_servers_cannot_share_a_port() -> None:
    first, port, _, _ = create_coordinator(loopback_settings())
    first.start()
    try:
        with pytest.raises(ClusterError, match=str(port)):
            create_coordinator(loopback_settings(coordinator_port=port))
    finally:
        first.stop(grace=None).wait(5)


def test_health_only_port_answers_probes_in_plain_text(bundle: Bundle) -> None:
    from hogwild.cluster.transport.health import serve_health_only

    settings = loopback_settings(**_tls(bundle, "coordinator"))
    server, port, _, health = create_coordinator(settings)
    probes, probe_port = serve_health_only(health, "127.0.0.1", 0)
    server.start()
    try:
        health.set(True)
        assert check(f"127.0.0.1:{probe_port}", timeout=5) == "SERVING"
        assert check(f"127.0.0.1:{port}", timeout=2) == "UNREACHABLE"  # TLS only there
        # Nothing but health on the probe port.
        with grpc.insecure_channel(f"127.0.0.1:{probe_port}") as channel:
            err = _refused(lambda: pb_grpc.CoordinatorStub(channel).Register(
                pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address="x:1"), timeout=5))
        assert err.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        probes.stop(grace=None)
        server.stop(grace=None).wait(5)


def test_tls_settings_go_together(bundle: Bundle) -> None:
    from hogwild.errors import ConfigError

    with pytest.raises(ConfigError, match="tls_key"):
        loopback_settings(tls_ca=str(bundle.ca), tls_cert=str(bundle.cert("worker")))
    with pytest.raises(ConfigError, match="tls_cert"):
        from_settings(loopback_settings(tls_ca=str(bundle.ca), tls_cert="/nonexistent.crt",
                                        tls_key=str(bundle.key("worker"))))


def test_every_kind_of_call_is_gated_by_the_token(bundle: Bundle) -> None:
    """Unary, client-streaming and server-streaming calls alike: UNAUTHENTICATED without the
    token, before the handler (which would answer PERMISSION_DENIED) runs."""
    settings = loopback_settings(workers=2, **_tls(bundle, "worker"))
    server, port, node, _ = create_worker(settings)
    server.start()
    try:
        wrong = _client(bundle, token="not-the-token")
        with wrong.channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.WorkerStub(channel)
            calls = {
                "Stop": lambda: stub.Stop(pb.StopRequest(), timeout=5),
                "ReceiveShard": lambda: stub.ReceiveShard(iter([pb.ShardChunk()]), timeout=5),
                "GetFinalState": lambda: list(stub.GetFinalState(pb.FinalStateRequest(),
                                                                 timeout=5)),
            }
            for name, call in calls.items():
                assert _refused(call).code() == grpc.StatusCode.UNAUTHENTICATED, name
        assert not node.signals.stop_requested.is_set() and node.shard is None
    finally:
        server.stop(grace=None).wait(5)


@pytest.mark.parametrize("host, warned", [("127.0.0.1", False), ("0.0.0.0", True)])
def test_plain_text_beyond_loopback_is_a_warning(host: str, warned: bool,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="hogwild.protocol"):
        server, _, _, _ = create_coordinator(loopback_settings(bind_host=host))
    server.stop(grace=None).wait(5)
    said = [r.getMessage() for r in caplog.records if "plain text" in r.getMessage()]
    assert bool(said) == warned, said


def test_a_client_only_certificate_cannot_take_a_worker_slot(secured: Secured,
                                                            bundle: Bundle) -> None:
    register = pb.RegisterRequest(protocol_version=PROTOCOL_VERSION, address="10.9.9.9:1",
                                  process_secret=b"0123456789abcdef")
    with _client(bundle, "client").channel(secured.address) as channel:
        err = _refused(lambda: pb_grpc.CoordinatorStub(channel).Register(register, timeout=5))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert len(secured.state.roster.workers) == 1
    with _client(bundle, "worker").channel(secured.address) as channel:
        reply = pb_grpc.CoordinatorStub(channel).Register(register, timeout=5)
    assert reply.worker_id == 1 and reply.worker_key == secured.state.roster.worker_key(1)
