"""The end of a run's report: metrics.json's figures, the workers' final states, the trace."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.checkpoints.checkpointer import Checkpointer
from hogwild.cluster.coordinator.data.worker_shares import Shipper
from hogwild.cluster.coordinator.members.records import Totals
from hogwild.cluster.coordinator.state import RunState
from hogwild.cluster.coordinator.sums.relay import StarRelay
from hogwild.cluster.coordinator.watch.adjust import Adjuster
from hogwild.cluster.coordinator.watch.trace import ModelTrace
from hogwild.cluster.wire.streams import FinalState
from hogwild.config import Settings
from hogwild.engine.runstart import initial_model_record
from hogwild.errors import OutputError
from hogwild.model.spec import ModelSpec
from hogwild.outputs import artifacts

# Coordinates compared at a time by max_abs_diff (512 KB of float64).
DIFF_BLOCK = 1 << 16


@dataclass(frozen=True)
class Seconds:
    """Where the run's time went."""

    train: float        # the workers' training, start to stop
    load: float         # loading the data
    total: float        # the whole run
    evaluating: float   # validation evaluations during training
    cpu: float          # this process's CPU while the workers trained


def peak_rss() -> int:
    """This process's peak resident set size in bytes (0 where it cannot be read)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return 0
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def outputs_failed(out: Path, exc: OSError | OutputError) -> OutputError:
    """One line for outputs that could not be written, and where the run can go on."""
    text = str(exc if isinstance(exc, OutputError) else OutputError.writing(out, exc))
    if (out / checkpoint_file.CHECKPOINT_FILE).exists():
        text += (f"; the last checkpoint is kept: once there is room, `hogwild coordinator "
                 f"--resume {out}` with the same settings (and its workers started again) "
                 "goes on from it")
    return OutputError(text)


def score_trace(trace: ModelTrace | None, val: Any, train_rows: int, loss: Any,
                spec: ModelSpec, out: Path, say: Callable[[str], None]) -> int:
    """Score the trace's copies of the model (training is over) into trace.jsonl."""
    if trace is None:
        return 0
    t0 = time.perf_counter()
    rows = trace.score(val, train_rows, loss, spec)
    artifacts.write_trace(out, rows)
    say(f"trace: {len(rows)} copies of the model scored in "
        f"{time.perf_counter() - t0:.2f}s, written to {artifacts.TRACE_FILE}")
    return len(rows)


def write_worker_states(out: Path, spec: ModelSpec, final_states: dict[int, FinalState],
                        global_w: npt.NDArray[np.float64], feature_order: np.ndarray,
                        files: str = "none") -> list[dict[str, Any]]:
    """Each collected worker's counters; with ``files`` compact (the final_states setting),
    also its model beside the global one (final_states/, in the input files' feature ids,
    non-zeros in float32)."""
    out = out / "final_states"
    rows = []
    if final_states and files == "compact":
        artifacts.save_compact_weights(out / "global.npz", spec.restore(global_w, feature_order))
    for wid, st in sorted(final_states.items()):
        if files == "compact":
            artifacts.save_compact_weights(out / f"worker-{wid}.npz",
                                           spec.restore(st.weights, feature_order))
        rows.append({"worker_id": wid, "rounds": st.rounds, "examples": st.examples,
                     "deltas_sent": st.deltas_sent,
                     "applied_from": {str(k): v for k, v in st.applied_from.items()},
                     "acked_by": {str(k): v for k, v in st.acked_by.items()},
                     "acked_by_coordinator": st.acked_by_coordinator,
                     "dropped_peers": st.dropped_peers,
                     "max_staleness": st.max_staleness,
                     "bytes_sent": st.bytes_sent,
                     "bytes_to_coordinator": st.bytes_to_coordinator,
                     "timings": {name: {"seconds": sec, "count": n}
                                 for name, (sec, n) in st.timings.items()},
                     "max_abs_diff_to_global": max_abs_diff(st.weights, global_w)})
    return rows


def max_abs_diff(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64],
                 block: int = DIFF_BLOCK) -> float:
    """``max |a - b|`` (NaN if either holds one) a block at a time: the whole-vector formula
    made two model-sized temporaries, 16 bytes per feature at the end of a run."""
    buf = np.empty(min(block, a.shape[0]), dtype=np.float64)
    peaks = []
    for lo in range(0, a.shape[0], block):
        part = buf[:min(block, a.shape[0] - lo)]
        np.subtract(a[lo:lo + block], b[lo:lo + block], out=part)
        peaks.append(np.max(np.abs(part, out=part)))
    return float(np.max(peaks))


def run_metrics(s: Settings, splits: Any, spec: ModelSpec, state: RunState, totals: Totals,
                test: Any, val: Any, *, reason: str, seconds: Seconds, train_rows: int,
                n_features: int, threads: int | list[int], round_size: int,
                final_states: dict[int, FinalState], worker_states: list[dict[str, Any]],
                shipper: Shipper, evaluations: int, trace_rows: int, warnings: list[str],
                conflicts: dict[str, Any] | None, checkpointer: Checkpointer,
                resumed_at: int | None, adjuster: Adjuster | None, relay: StarRelay | None,
                saved: dict[str, Any] | None, final_row: dict[str, Any]) -> dict[str, Any]:
    """metrics.json's figures (the test quality of the saved model is added by the caller).
    ``saved``: the evaluation whose model is saved; ``final_row``: the closing one."""

    examples = totals.examples
    local = shipper.local
    roster, quarantine, norms = state.roster, state.roster.quarantine, state.model.norms
    return {
        "command": "run", "test_loss": test.loss, "test_accuracy": test.accuracy,
        "val_loss": val.loss if val else None, "val_accuracy": val.accuracy if val else None,
        "epochs": examples / max(1, train_rows), "examples": examples,
        "rounds": totals.rounds, "seconds": seconds.train,
        "load_seconds": seconds.load, "total_seconds": seconds.total,
        "stop_reason": reason, "workers": s.workers, "threads": threads,
        "mode": s.mode,
        "staleness": s.staleness, "shipping": s.shipping, "loss": s.loss,
        # Delta messages (parts) received, which timing changes (queued ones are summed into
        # one), and the worker rounds they held, which it does not (the done line's deltas).
        "deltas_received": totals.deltas_received,
        "delta_rounds": totals.delta_rounds,
        "bytes_received": totals.bytes_received,
        "duplicates_ignored": totals.duplicates,
        # As measured by the workers (bounded by `staleness`); the coordinator's own view of
        # the round gap also counts messages still in flight, so it can be larger.
        "max_staleness": max([st.max_staleness for st in final_states.values()]
                             + [r.max_staleness for r in roster.workers.values()],
                             default=0),
        "coordinator_round_gap": roster.max_staleness(),
        "coordinator_apply_seconds": state.model.apply_seconds, "round_size": round_size,
        "eval_seconds": seconds.evaluating, "evaluations": evaluations,
        "coordinator_cpu_seconds": seconds.cpu,
        "trace_snapshots": trace_rows, "warnings": warnings,
        "shipped_bytes": shipper.shipped_bytes, "ship_seconds": shipper.seconds,
        "plan_bytes": shipper.plan_bytes,
        "local_ranges": (local.ranges_report(len(shipper.shards))
                         if local is not None else None),
        "coordinator_peak_rss_bytes": peak_rss(),
        "train_rows": train_rows, "test_rows": splits.test.n_rows,
        "n_features": n_features, "run_id": state.run_id,
        "task": splits.labels.task, "classes": splits.labels.json_classes(),
        "model": spec.kind,
        "coordinator_applied_from": {str(k): v for k, v in totals.applied_from.items()},
        "dropped_workers": sorted(r.worker_id for r in roster.workers.values() if r.dead),
        # Deltas refused for their values, per sender, and the senders quarantined for them
        # (with the first refusal's reason); the exit code is EXIT_QUARANTINED if any.
        "refused_deltas": {str(k): v for k, v in sorted(quarantine.refused.items())},
        "quarantined_workers": {str(k): v for k, v in sorted(quarantine.why.items())},
        # The coordinator's relative bound (protocol/deltanorms): the largest ratio of a
        # delta's norm per round to the recent median it let through, and what it did.
        "delta_norms": None if norms is None else {
            "bound": norms.bound, "clip": norms.clip,
            "peak_ratio": norms.stats.peak_ratio, "refused": norms.stats.refused,
            "clipped": norms.stats.clipped},
        "peer_reports": [{"reporter": a, "peer": b, "round": c, "reason": d}
                         for a, b, c, d in roster.reports.kept],
        # Reports not acted on: the accused peer answered, or they came too often; and
        # divergence reports the global model did not bear out (their workers dropped).
        "peer_reports_refused": roster.reports.refused,
        "divergence_reports_dismissed": roster.divergence_reports_dismissed,
        "worker_states": worker_states, "conflicts": conflicts,
        "checkpoints": checkpointer.count, "checkpoint_seconds": checkpointer.seconds,
        "resumed_at_round": resumed_at,
        "initial_model": (None if splits.initial is None
                          else initial_model_record(s, splits.initial)),
        "topology": s.topology,
        # The rule the deltas were added up with, and the setting it came from (auto).
        "combine": s.combine,
        # What the coordinator changed when the validation curve swung (engine/guard.py).
        "adjustments": adjuster.record() if adjuster else [],
        "adjustments_unreached": ({str(k): v for k, v in adjuster.unreached.items()}
                                  if adjuster else {}),
        "relay_messages": relay.messages_sent() if relay else 0,
        "relay_bytes": relay.bytes_sent() if relay else 0,
        "tree_recovery": relay.recovery() if relay else {},
        # Which evaluation's model was saved (the best validated one; None: a resumed
        # run's best, evaluated before the resume).
        # The epoch of the weights saved (None: see saved_model).
        "saved_epoch": None if saved is None else saved.get("epochs"),
        "saved_model": None if saved is None else {
            key: saved.get(key) for key in ("elapsed", "round", "epochs", "val_loss",
                                            "val_accuracy")} | {"final": saved is final_row},
    }
