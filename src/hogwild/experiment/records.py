"""The experiment's tables: runs.csv (one row per run, scalar columns), runs.jsonl (the same
plus per-epoch rows) and a plain-text summary of medians per configuration."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hogwild.base import atomic
from hogwild.experiment.runner import (
    MIN_TIMED_SECONDS,
    SERIAL_TOO_SHORT,
    TOO_SHORT,
    Record,
    median,
)

CSV_FILE = "runs.csv"
JSONL_FILE = "runs.jsonl"
SUMMARY_FILE = "summary.txt"

COLUMNS: tuple[str, ...] = (
    "studies", "data", "source", "loss", "rows", "train_rows", "n_features", "trainer",
    "threads", "batch_size", "learning_rate", "workers", "cores", "oversubscribed", "repeat", "epochs",
    "epochs_done", "status", "wall_seconds", "cpu_seconds", "cores_used", "timing", "speedup",
    "target_loss", "time_to_target", "speedup_to_target", "train_error", "train_rmse",
    "val_loss", "test_loss", "test_error", "test_rmse",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_csv(path: Path, records: Sequence[Record]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for rec in records:
        writer.writerow([_cell(rec.get(c)) for c in COLUMNS])
    return atomic.atomic_write_text(path, buffer.getvalue())


def write_jsonl(path: Path, records: Sequence[Record]) -> Path:
    return atomic.atomic_write_text(path, "".join(atomic.dumps(r) + "\n" for r in records))


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary_lines(records: Sequence[Record]) -> list[str]:
    """One line per configuration (medians over repeats), grouped by data set."""
    groups: dict[tuple[Any, ...], list[Record]] = {}
    for rec in records:
        key = (rec["data"], rec["trainer"], rec["batch_size"], rec["workers"], rec["threads"])
        groups.setdefault(key, []).append(rec)
    lines: list[str] = []
    header = (f"{'data':<16} {'trainer':<8} {'batch':>5} {'workers':>7} {'threads':>7} "
              f"{'wall s':>8} {'CPU s':>8} {'speedup':>7} {'to target s':>11} "
              f"{'test err':>8} {'note'}")
    current = None
    # Data sets in the order they ran (the main set first), then by configuration.
    order = {name: i for i, name in reversed(list(enumerate(r["data"] for r in records)))}
    for key in sorted(groups, key=lambda k: (order[k[0]], k[3], k[1], k[2], k[4])):
        recs = groups[key]
        data, trainer, batch, workers, threads = key
        if data != current:
            lines += ["", header]
            current = data
        ok = [r for r in recs if r["status"] == "ok"]
        err = median(r.get("test_error") if r.get("test_error") is not None
                     else r.get("test_rmse") for r in ok)
        notes = []
        if recs[0]["oversubscribed"]:
            notes.append("oversubscribed")
        if recs[0]["loss"] == "squared":
            notes.append("error = RMSE")
        if len(ok) < len(recs):
            notes.append(f"{len(recs) - len(ok)} of {len(recs)} not ok: {recs[0]['status']}"
                         if not ok else f"{len(recs) - len(ok)} of {len(recs)} not ok")
        if any(r.get("timing") == TOO_SHORT for r in ok):
            notes.append(f"{TOO_SHORT} (under {MIN_TIMED_SECONDS * 1000:.0f} ms): no speedup")
        elif any(r.get("timing") == SERIAL_TOO_SHORT for r in ok):
            notes.append(f"{SERIAL_TOO_SHORT}: no speedup")
        if len(recs) > 1:
            notes.append(f"median of {len(ok)}")
        ttt = median(r.get("time_to_target") for r in ok)
        lines.append(
            f"{data:<16} {trainer:<8} {batch:>5} {workers or '-':>7} {threads:>7} "
            f"{_fmt(median(r.get('wall_seconds') for r in ok), '.3f'):>8} "
            f"{_fmt(median(r.get('cpu_seconds') for r in ok), '.3f'):>8} "
            f"{_fmt(median(r.get('speedup') for r in ok), '.2f'):>7} "
            f"{_fmt(ttt, '.3f') if ok and ttt is not None else 'not reached':>11} "
            f"{_fmt(err, '.4f'):>8} {', '.join(notes)}")
    short = sum(r.get("timing") == TOO_SHORT for r in records)
    against = sum(r.get("timing") == SERIAL_TOO_SHORT for r in records)
    if short or against:
        lines += ["", (f"{short} of {len(records)} runs trained for under "
                       f"{MIN_TIMED_SECONDS * 1000:.0f} ms ({TOO_SHORT}) and {against} more "
                       "are compared with a serial run that did: their speedups are left out "
                       "of this table and of the speedup plots (more rows or epochs time "
                       "them)")]
    return lines
