"""/metrics served from a coordinator's run state: its own registry, read at each scrape."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from hogwild.config import Settings
from hogwild.coordinator.state import RunState
from hogwild.errors import ConfigError
from hogwild.outputs.history import EvalHistory
from hogwild.outputs.prometheus import (
    MetricsServer,
    coordinator_reader,
    serve_metrics,
)

pytest.importorskip("prometheus_client")


def _scrape(server: MetricsServer) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _state(rounds: int, examples: int) -> RunState:
    state = RunState(2, run_id="abc")
    a = state.register("127.0.0.1:1001", 1)
    b = state.register("127.0.0.1:1002", 1)
    state.progress("abc", a, rounds, examples, 0.5, False, 1)
    state.progress("abc", b, rounds - 1, examples, 0.5, False, 0)
    state.mark_dead(b, "test")
    return state


def _serve(state: RunState, history: EvalHistory) -> MetricsServer:
    settings = Settings(bind_host="127.0.0.1", metrics_port=0)
    server = serve_metrics(settings, "coordinator",
                           coordinator_reader(state, lambda: history, lambda: None),
                           {"run_id": state.run_id})
    assert server is not None
    return server


def test_two_servers_in_one_process_report_their_own_state(tmp_path: Path) -> None:
    history = EvalHistory(tmp_path)
    history.begin()
    first, second = _serve(_state(7, 100), history), _serve(_state(3, 40), history)
    try:
        assert first.port != second.port and first.port > 0
        one, two = _scrape(first), _scrape(second)
        assert one["hogwild_coordinator_rounds_total"] == 7
        assert one["hogwild_coordinator_examples_total"] == 200
        assert two["hogwild_coordinator_rounds_total"] == 3
        assert one["hogwild_coordinator_workers_live"] == 1
        assert one["hogwild_coordinator_workers_dropped"] == 1
        assert one["hogwild_coordinator_worker_drops_total"] == 1
        # No evaluation yet: no loss to report (rather than a made-up 0).
        assert "hogwild_coordinator_validation_loss" not in one
        # Read at each scrape: a new evaluation shows at once.
        history.add({"val_loss": 0.25, "val_accuracy": 0.875})
        again = _scrape(first)
        assert again["hogwild_coordinator_validation_loss"] == 0.25
        assert again["hogwild_coordinator_validation_accuracy"] == 0.875
        assert again["hogwild_coordinator_evaluations_total"] == 1
    finally:
        first.close()
        second.close()


def test_off_by_default() -> None:
    assert Settings().metrics_port is None
    assert serve_metrics(Settings(), "worker", list) is None


def test_a_port_in_use_is_one_error_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(bind_host="127.0.0.1", metrics_port=port)
        with pytest.raises(ConfigError) as err:
            serve_metrics(settings, "worker", list)
    assert "metrics_port" in str(err.value) and str(port) in str(err.value)


def test_port_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigError, match="metrics_port"):
        Settings().replace(metrics_port=70000)
