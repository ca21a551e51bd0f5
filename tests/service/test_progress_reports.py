"""A real Coordinator server and a worker's progress report whose training loss is infinite:
refused with INVALID_ARGUMENT, nothing of it kept; NaN (no loss yet) and finite losses are
taken."""

from __future__ import annotations

import math

import grpc
import pytest

from hogwild.cluster.wire import PROTOCOL_VERSION, pb

from .conftest import CoordinatorServer

DIM = 11


@pytest.fixture
def coord(coordinator_server: CoordinatorServer) -> CoordinatorServer:
    coordinator_server.state.roster.register("127.0.0.1:1", threads=1)  # worker 0
    coordinator_server.state.model.start_model(DIM)
    return coordinator_server


def _report(coord: CoordinatorServer, train_loss: float, round_: int = 3,
            done: bool = False) -> pb.Progress:
    return pb.Progress(protocol_version=PROTOCOL_VERSION, run_id=coord.state.run_id,
                       worker_id=0, round=round_, examples=10 * round_,
                       train_loss=train_loss, done=done)


@pytest.mark.parametrize("loss", [math.inf, -math.inf])
def test_an_infinite_training_loss_is_refused_and_nothing_of_the_report_is_kept(
        coord: CoordinatorServer, loss: float) -> None:
    coord.stub.ReportProgress(_report(coord, 0.5, round_=2), timeout=5)
    record = coord.state.roster.workers[0]
    before = (record.round, record.examples, record.train_loss, record.done,
              coord.state.roster.loss_reports)
    model = coord.state.model.model_copy().tobytes()
    with pytest.raises(grpc.RpcError) as info:
        coord.stub.ReportProgress(_report(coord, loss, round_=5, done=True), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "train_loss must be a finite number" in (info.value.details() or "")
    assert (record.round, record.examples, record.train_loss, record.done,
            coord.state.roster.loss_reports) == before == (2, 20, 0.5, False, 1)
    assert coord.state.model.model_copy().tobytes() == model


def test_no_loss_yet_and_a_finite_loss_are_taken(coord: CoordinatorServer) -> None:
    record = coord.state.roster.workers[0]
    coord.stub.ReportProgress(_report(coord, math.nan, round_=1), timeout=5)
    assert (record.round, record.train_loss, coord.state.roster.loss_reports) == (1, None, 0)
    coord.stub.ReportProgress(_report(coord, 1e300, round_=2), timeout=5)
    assert (record.round, record.train_loss, coord.state.roster.loss_reports) == (2, 1e300, 1)
