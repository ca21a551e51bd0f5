"""One member's word does not end a run: a lone divergence report on a healthy run drops its
sender, and the run completes (real coordinator and worker processes; the test is the lying
member, with a real worker server and the credentials its registration gave it)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from hogwild import config
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import PROTOCOL_VERSION, pb, pb_grpc
from hogwild.cluster.worker import create_server as create_worker

from .helpers import READY, REGISTERED, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

STARTED = re.compile(r"started 2 worker\(s\)")
DISMISSED = re.compile(r"divergence report from worker (\d) \(round 1\) not taken for the run: "
                       r"the global model is finite \(its validation loss [\d.]+")


def test_a_lone_divergence_report_on_a_healthy_run_drops_its_sender_not_the_run(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    common = {"bind_host": "127.0.0.1", "workers": 2, "insecure": True,
              "data": "bundled:spamassassin", "threads": 1, "mode": "async",
              "epochs": 1000, "time_budget": 3, "eval_interval": 0.3, "rpc_timeout": 3,
              "barrier_timeout": 1, "connect_timeout": 30, "register_timeout": 60,
              "data_cache": False, "out_dir": str(out)}
    cluster = Cluster(tmp_path)
    member = None
    try:
        coordinator = cluster.coordinator = cluster.spawn(
            "coordinator", "coordinator", {**common, "coordinator_port": 0})
        address = f"127.0.0.1:{coordinator.wait_for(READY, 60).group(1)}"
        honest = cluster.spawn("worker-0", "worker", {
            **common, "worker_port": 0, "coordinator_address": address})
        cluster.workers.append(honest)
        honest.wait_for(REGISTERED, 60)
        # The lying member: a real worker server, registered, so holding valid credentials;
        # it is shipped its shard and configured like any worker, and never trains.
        settings = config.load(None, {}, {**common, "worker_port": 0,
                                           "coordinator_address": address})
        member = create_worker(settings)
        server, port, node, health = member
        server.start()
        assert node.register(port)
        health.set(True)
        coordinator.wait_for(STARTED, 60)
        with Security().channel(address, sender_key=node.worker_key) as channel:
            pb_grpc.CoordinatorStub(channel).ReportProgress(pb.Progress(
                protocol_version=PROTOCOL_VERSION, run_id=node.run_id,
                worker_id=node.worker_id, round=1, examples=0, train_loss=math.nan,
                done=True, diverged=True), timeout=5)
        said = coordinator.wait_for(DISMISSED, 30)
        assert int(said.group(1)) == node.worker_id
        assert coordinator.wait(90) == 0, cluster.output()
        text = coordinator.output()
        assert "error:" not in text and "training diverged" not in text, text
        assert len(DISMISSED.findall(text)) == 1, text  # one line, not again among drops
        [found] = list(out.rglob("metrics.json"))  # the model was written beside it
        metrics = json.loads(found.read_text())
        assert (found.parent / "model.npz").exists()
        assert metrics["stop_reason"] in ("time budget", "workers finished", "early stopping")
        assert metrics["divergence_reports_dismissed"] == 1
        assert metrics["dropped_workers"] == [node.worker_id]
        assert metrics["test_accuracy"] > 0.9
        assert honest.wait(30) == 0, cluster.output()
    finally:
        if member is not None:
            member[2].close()
            member[0].stop(grace=None).wait(5)
        cluster.reap()
