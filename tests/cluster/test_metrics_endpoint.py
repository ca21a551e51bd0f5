"""/metrics of a real `hogwild run`: the coordinator and every worker, scraped over HTTP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from hogwild.cluster.localrun.launcher import child_env

from .helpers import published, read_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

URL = re.compile(r"^\[(coordinator|worker[^\]]*)\] .*metrics at (http://\S+/metrics)$")
REGISTERED = re.compile(r"^\[worker pid (\d+)\] .*registered as worker (\d+) of")
# Long enough for the scrapes after the coordinator's last line on a busy machine; the test
# waits for that line, not for this.
LINGER = 5


def _scrape(url: str) -> dict[str, float]:
    """Every sample of one scrape, by name (labels dropped: each process has one series)."""
    from prometheus_client.parser import text_string_to_metric_families

    # The URL names the host; the processes of `hogwild run` listen on loopback.
    local = re.sub(r"//[^/]+:(\d+)/", r"//127.0.0.1:\1/", url)
    with urllib.request.urlopen(local, timeout=5) as answer:
        text = answer.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text)
            for s in family.samples}


def test_metrics_of_every_process_match_the_run_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hogwild.cli", "run", "-v", "--workers=2", "--threads=1",
         "--epochs=3", "--patience=0", f"--out={out}", "--metrics-port=0",
         f"--metrics-linger={LINGER}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        env=child_env())
    lines: list[str] = []
    done = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("[coordinator] done ("):
                done.set()
        done.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert done.wait(90), "\n".join(lines)
        # The coordinator lingers now (metrics_linger), its outputs published, and so do the
        # workers, whose final states it has collected: every counter is final.
        urls = {m.group(1): m.group(2) for m in map(URL.match, lines) if m}
        # A worker serves /metrics from its start, before the coordinator gives it its id.
        ids = {f"worker pid {m.group(1)}": f"worker-{m.group(2)}" for m in map(REGISTERED.match,
                                                                              lines) if m}
        urls = {ids.get(name, name): url for name, url in urls.items()}
        assert len(urls) == 3, "\n".join(lines)
        scraped = {name: _scrape(url) for name, url in urls.items()}
        started = time.monotonic()
    finally:
        code = proc.wait(60)
        reader.join(5)
    assert code == 0, "\n".join(lines)
    # The processes went on serving for about metrics_linger after their work was done.
    assert time.monotonic() - started > 1.0

    metrics = read_metrics(out)
    coord = scraped.pop("coordinator")
    assert coord["hogwild_coordinator_rounds_total"] == metrics["rounds"] > 0
    assert coord["hogwild_coordinator_examples_total"] == metrics["examples"] > 0
    assert coord["hogwild_coordinator_deltas_received_total"] == metrics["deltas_received"] > 0
    assert coord["hogwild_coordinator_bytes_received_total"] == metrics["bytes_received"] > 0
    assert coord["hogwild_coordinator_evaluations_total"] == metrics["evaluations"] > 0
    assert coord["hogwild_coordinator_workers_live"] == 2
    assert coord["hogwild_coordinator_workers_dropped"] == 0
    history = [json.loads(row) for row in
               (published(out) / "metrics.jsonl").read_text().splitlines()]
    # The first evaluation is of the model before training: epoch 0, no round, no example.
    assert (history[0]["epochs"], history[0]["round"], history[0]["examples"]) == (0, 0, 0)
    assert history[0]["val_loss"] > history[-1]["val_loss"]
    assert coord["hogwild_coordinator_validation_loss"] == pytest.approx(history[-1]["val_loss"])
    assert coord["hogwild_coordinator_validation_accuracy"] == pytest.approx(
        history[-1]["val_accuracy"])

    # Each worker's own counters: those of its final state in metrics.json.
    states = {f"worker-{s['worker_id']}": s for s in metrics["worker_states"]}
    assert sorted(scraped) == sorted(states)
    for name, got in scraped.items():
        state = states[name]
        assert got["hogwild_worker_rounds_total"] == state["rounds"] == metrics["rounds"]
        assert got["hogwild_worker_examples_total"] == state["examples"] > 0
        assert got["hogwild_worker_deltas_sent_total"] == state["deltas_sent"] > 0
        assert got["hogwild_worker_bytes_sent_total"] == state["bytes_sent"] > 0
        assert got["hogwild_worker_deltas_received_total"] > 0
        assert got["hogwild_worker_bytes_received_total"] > 0
    assert sum(got["hogwild_worker_examples_total"] for got in scraped.values()) == \
        metrics["examples"]
