"""A chaos soak with figures: one run under a fault every 20-40 s, measured as it goes.

Built on chaos.py's faults (kill -9 a worker and start a new one at its address, SIGSTOP a
worker), with two more: the coordinator killed and started again with ``--resume``, and one
bad member (a worker restarted through bad_member.py, its deltas' values 1e30 for a minute).
Every process's RSS and open descriptors are sampled every few seconds; each fault is logged
with its recovery time, read off the coordinator's console (a worker back: "rejoined"; the
coordinator back: its first progress row after "resumed run"; the bad member: "dropped:
quarantined"); a process still alive 60 s after its run should have ended is a hang. The
same run without faults gives the accuracy to compare with. bench/bench_chaos.py runs the
long form and prints the table; test_chaos_soak.py runs a 2-minute form and asserts the
targets (:func:`missed`).
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .helpers import (
    PROGRESS_ROW,
    READY,
    Cluster,
    Proc,
    flags,
    published,
    read_metrics,
    require_reuters,
)

BAD_MEMBER = Path(__file__).resolve().parent / "bad_member.py"
ADVERTISED = re.compile(r"registered as worker (\d+) of \d+ in run \w+ \(advertising ([\d.]+):(\d+)\)")
RESUMED = re.compile(r"resumed run \w+ at round \d+")
HANG_AFTER = 60.0     # a process alive this long after its run should have ended hangs
SAMPLE_EVERY = 5.0    # seconds between RSS / descriptor samples
QUIET_END = 30.0      # no fault starts this close to the time budget
RECOVERY_LIMIT = 120.0
SETTLE = 30.0         # descriptors are compared from this long after a process's first sample
KILLED = -signal.SIGKILL  # the exit code of a process the soak killed


class TimedProc(Proc):
    """A Proc that also keeps when each line arrived (time.monotonic())."""

    def __init__(self, name: str, argv: Sequence[str], cwd: Path) -> None:
        self.times: list[float] = []
        super().__init__(name, argv, cwd)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self.times.append(time.monotonic())
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def first_after(self, pattern: re.Pattern[str], since: float) -> float | None:
        """When the first line matching ``pattern`` arrived at or after ``since``."""
        with self._cond:
            for line, at in zip(self.lines, self.times, strict=False):
                if at >= since and pattern.search(line):
                    return at
        return None


class SoakCluster(Cluster):
    """A Cluster of TimedProcs; can start a worker through bad_member.py."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.spawned: dict[str, float] = {}  # process name -> when it was started

    def spawn(self, name: str, role: str, settings: dict[str, Any],
               bad: str | None = None) -> Proc:
        self.spawned[name] = time.monotonic()
        if not settings.get("tls_ca"):
            settings = {"insecure": True, **settings}
        head = [str(BAD_MEMBER), f"--bad={bad}"] if bad else ["-m", "hogwild.cli"]
        proc = TimedProc(name, [sys.executable, *head, role, *flags(**settings)], self.workdir)
        self.procs.append(proc)
        return proc


@dataclass
class Fault:
    """One fault: what, on whom, when (s after training began), how long it lasted, and
    when the run had recovered from it (None: not within RECOVERY_LIMIT)."""

    kind: str
    target: str
    at: float
    lasted: float = 0.0
    recovery: float | None = None
    note: str = ""


@dataclass
class Sample:
    t: float
    name: str
    pid: int
    rss: int
    fds: int


@dataclass
class SoakReport:
    mode: str
    topology: str
    workers: int
    budget: float
    faults: list[Fault] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    hangs: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    rates: list[tuple[float, float]] = field(default_factory=list)  # (t, rounds/s)
    clean_accuracy: float | None = None

    @property
    def accuracy(self) -> float | None:
        value = self.metrics.get("test_accuracy")
        return None if value is None else float(value)

    def growth(self) -> list[dict[str, Any]]:
        """Per process: RSS and descriptors at its first sample, after the first minute of
        training (the sample nearest 60 s, if it lived that long) and at its last."""
        rows = []
        by_proc: dict[tuple[str, int], list[Sample]] = {}
        for s in self.samples:
            by_proc.setdefault((s.name, s.pid), []).append(s)
        for (name, pid), seq in by_proc.items():
            later = [s for s in seq if s.t >= 60.0]
            minute = later[0] if later and seq[0].t <= 60.0 + SAMPLE_EVERY else None
            # Descriptors from SETTLE s on: a process started during the run opens its
            # channels once it has rejoined (one was sampled with 11, then 14 for good).
            # A process's descriptors go up and down by one or two as channels to restarted
            # or quarantined peers close and open (seen: 18, 17, 18, 19, 18 in one resumed
            # coordinator): a leak is the last samples all above the most it held in the
            # first half of its settled life, not one sample above one other.
            calm = [s for s in seq if s.t >= seq[0].t + SETTLE]
            settled_fds = max((s.fds for s in calm[:max(1, len(calm) // 2)]), default=None)
            rows.append({"process": name, "pid": pid, "from": seq[0].t, "to": seq[-1].t,
                         "rss_start": seq[0].rss, "rss_minute": minute.rss if minute else None,
                         "rss_end": seq[-1].rss, "fds_start": seq[0].fds,
                         "fds_settled": settled_fds,
                         "fds_end": min(s.fds for s in seq[-3:]), "samples": len(seq)})
        return rows

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["growth"] = self.growth()
        out["metrics"] = {k: self.metrics.get(k) for k in (
            "test_accuracy", "stop_reason", "rounds", "epochs", "refused_deltas",
            "quarantined_workers", "dropped_workers", "resumed_at_round", "delta_norms")}
        return out


def soak_settings(out: Path, mode: str, topology: str, budget: float) -> dict[str, Any]:
    train, test = require_reuters()
    extra: dict[str, Any] = {"staleness": 2} if mode == "async" else {}
    return {"data": str(train), "test_data": str(test), "threads": 1, "epochs": 1_000_000,
            "patience": 0, "eval_interval": 1.0, "out_dir": str(out), "rpc_timeout": 5,
            "barrier_timeout": 3, "connect_timeout": 120, "register_timeout": 180,
            "data_cache": False, "mode": mode, "topology": topology, "time_budget": budget,
            "checkpoint_interval": 2.0, "bind_host": "127.0.0.1", **extra}


def _rss_fds(pid: int) -> tuple[int, int] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss = next(int(line.split()[1]) * 1024 for line in status.splitlines()
                   if line.startswith("VmRSS:"))
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except (OSError, StopIteration):
        return None
    return rss, fds


class Soak:
    """One soak run (see the module's docstring)."""

    def __init__(self, workdir: Path, mode: str, topology: str, workers: int, budget: float,
                 seed: int, interval: tuple[float, float] = (20.0, 40.0),
                 say: Callable[[str], None] = print) -> None:
        self.workdir = workdir
        self.out = workdir / "out"
        self.rng = random.Random(seed)
        self.interval = interval
        self.say = say
        self.cluster = SoakCluster(workdir)
        self.settings = soak_settings(self.out, mode, topology, budget)
        self.report = SoakReport(mode, topology, workers, budget)
        self.began = 0.0
        self.port = 0
        self.addresses: dict[int, tuple[str, int]] = {}
        self.current: dict[int, TimedProc] = {}
        self.coordinator: TimedProc | None = None
        self.quarantined: set[int] = set()
        self.downtime = 0.0
        self._sampling = threading.Event()

    # ------------------------------------------------------------------- running

    def run(self) -> SoakReport:
        n = self.report.workers
        cluster = self.cluster
        try:
            cluster.start(n, **self.settings)
            assert isinstance(cluster.coordinator, TimedProc)
            self.coordinator = cluster.coordinator
            self.port = int(self.coordinator.wait_for(READY, 60).group(1))
            for proc in cluster.workers:
                match = proc.wait_for(ADVERTISED, 180)
                wid = int(match.group(1))
                self.addresses[wid] = (match.group(2), int(match.group(3)))
                assert isinstance(proc, TimedProc)
                self.current[wid] = proc
            self.coordinator.wait_for(PROGRESS_ROW, 300)
            self.began = time.monotonic()
            sampler = threading.Thread(target=self._sample, daemon=True)
            sampler.start()
            self._faults()
            self._finish()
            self._sampling.set()
            sampler.join(SAMPLE_EVERY + 5)
        finally:
            self._sampling.set()
            cluster.reap()
            logs = self.workdir / "logs"
            logs.mkdir(exist_ok=True)
            for proc in cluster.procs:
                (logs / f"{proc.name}.log").write_text(proc.output() + "\n")
        self._read_outputs()
        return self.report

    def _now(self) -> float:
        return time.monotonic() - self.began

    def _sample(self) -> None:
        while not self._sampling.wait(SAMPLE_EVERY if self.report.samples else 1.0):
            t = self._now()
            for proc in list(self.cluster.procs):
                # A process starting up is still loading its libraries: not its size.
                started = self.cluster.spawned.get(proc.name, 0.0)
                if proc.proc.poll() is None and time.monotonic() - started >= 20.0:
                    got = _rss_fds(proc.proc.pid)
                    if got is not None:
                        self.report.samples.append(Sample(t, proc.name, proc.proc.pid, *got))

    def _faults(self) -> None:
        """A fault every ``interval`` seconds until QUIET_END before the budget (both counted
        in training time: a coordinator's downtime moves them on): the coordinator killed
        once (a third of the way), the bad member once (two thirds: after the resume, since
        a resumed coordinator would wait register_timeout for a quarantined place), kills
        and freezes at random between."""
        stop_at = self.report.budget - QUIET_END
        times: list[float] = []
        t = self.rng.uniform(*self.interval) * 0.5
        while t < stop_at:
            times.append(t)
            t += self.rng.uniform(*self.interval)
        kinds = [self.rng.choice(["kill", "freeze"]) for _ in times]
        if len(kinds) >= 3:
            kinds[len(kinds) // 3] = "coordinator"
            kinds[max(len(kinds) // 3 + 1, (2 * len(kinds)) // 3)] = "bad"
        for at, kind in zip(times, kinds, strict=True):
            wait = at + self.downtime - self._now()
            if wait > 0:
                time.sleep(wait)
            if self._now() - self.downtime > stop_at:
                break
            fault = getattr(self, f"_{kind}")()
            if fault is not None:
                self.report.faults.append(fault)
                rec = "-" if fault.recovery is None else f"{fault.recovery:.1f}s"
                self.say(f"[soak {self._now():6.1f}s] {fault.kind} {fault.target}: "
                         f"recovered in {rec} {fault.note}")

    def _pick(self) -> int | None:
        live = [w for w, p in self.current.items()
                if w not in self.quarantined and p.proc.poll() is None]
        return self.rng.choice(live) if live else None

    def _respawn(self, wid: int, name: str, bad: str | None = None) -> TimedProc:
        host, port = self.addresses[wid]
        proc = self.cluster.spawn(name, "worker", {
            **self.settings, "workers": self.report.workers, "worker_port": port,
            "advertise_address": f"{host}:{port}",
            "coordinator_address": f"127.0.0.1:{self.port}"}, bad=bad)
        assert isinstance(proc, TimedProc)
        self.current[wid] = proc
        return proc

    def _wait_line(self, proc: TimedProc, pattern: re.Pattern[str], since: float,
                   limit: float = RECOVERY_LIMIT) -> float | None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            at = proc.first_after(pattern, since)
            if at is not None:
                return at
            if proc.proc.poll() is not None:
                return None
            time.sleep(0.2)
        return None

    def _kill(self) -> Fault | None:
        wid = self._pick()
        if wid is None:
            return None
        proc = self.current[wid]
        t0 = time.monotonic()
        fault = Fault("kill -9 + restart", f"worker {wid}", self._now())
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)
        time.sleep(self.rng.uniform(1.0, 3.0))
        self._respawn(wid, f"worker-{wid}-restart-{len(self.report.faults)}")
        assert self.coordinator is not None
        back = self._wait_line(self.coordinator, re.compile(rf"worker {wid} rejoined at round"),
                               t0)
        fault.lasted = time.monotonic() - t0 if back is None else back - t0
        fault.recovery = None if back is None else back - t0
        return fault

    def _freeze(self) -> Fault | None:
        wid = self._pick()
        if wid is None:
            return None
        proc = self.current[wid]
        seconds = self.rng.uniform(5.0, 15.0)
        t0 = time.monotonic()
        fault = Fault("SIGSTOP", f"worker {wid}", self._now(), lasted=seconds)
        proc.proc.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        proc.proc.send_signal(signal.SIGCONT)
        assert self.coordinator is not None
        time.sleep(3.0)  # a drop, if any, is announced by now
        dropped = self.coordinator.first_after(re.compile(rf"worker {wid} dropped"), t0)
        if dropped is None:
            fault.recovery, fault.note = seconds, "(not dropped: went on at SIGCONT)"
            return fault
        back = self._wait_line(self.coordinator,
                               re.compile(rf"worker {wid} rejoined at round"), dropped)
        fault.recovery = None if back is None else back - t0
        fault.note = "(dropped, rejoined)"
        return fault

    def _coordinator(self) -> Fault | None:
        assert self.coordinator is not None
        deadline = time.monotonic() + 30
        while (not any(self.out.glob("*.incomplete/checkpoint.npz"))
               and time.monotonic() < deadline):
            time.sleep(0.2)
        t0 = time.monotonic()
        fault = Fault("kill -9 coordinator + --resume", "coordinator", self._now())
        self.coordinator.proc.send_signal(signal.SIGKILL)
        self.coordinator.proc.wait(10)
        time.sleep(1.0)
        again = self.cluster.spawn(f"coordinator-resumed-{len(self.report.faults)}",
                                    "coordinator", {**self.settings,
                                                    "workers": self.report.workers,
                                                    "coordinator_port": self.port,
                                                    "resume": str(self.out)})
        assert isinstance(again, TimedProc)
        self.coordinator = again
        resumed = self._wait_line(again, RESUMED, t0, limit=300)
        row = None if resumed is None else self._wait_line(again, PROGRESS_ROW, resumed)
        fault.recovery = None if row is None else row - t0
        fault.lasted = fault.recovery or 0.0
        # The time budget counts training: the run ends later by the time it was down.
        self.downtime += fault.lasted
        return fault

    def _bad(self) -> Fault | None:
        wid = self._pick()
        if wid is None:
            return None
        proc = self.current[wid]
        t0 = time.monotonic()
        fault = Fault("bad member (1e30) for 60 s", f"worker {wid}", self._now(), lasted=60.0)
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)
        time.sleep(1.0)
        bad = self._respawn(wid, f"worker-{wid}-bad", bad="1e30@1:60")
        assert self.coordinator is not None
        started = self._wait_line(bad, re.compile(r"bad member: altering deltas"), t0)
        caught = self._wait_line(self.coordinator,
                                 re.compile(rf"worker {wid} dropped: quarantined"), t0)
        if started is not None and caught is not None:
            fault.recovery = max(0.0, caught - started)
            fault.note = "(quarantined)"
            self.quarantined.add(wid)
        return fault

    def _finish(self) -> None:
        """Wait for the run's end; a process alive HANG_AFTER s after it should have ended
        is a hang (then killed)."""
        assert self.coordinator is not None
        expected = self.began + self.report.budget + self.downtime + 30.0  # + final outputs
        try:
            self.coordinator.proc.wait(max(1.0, expected + HANG_AFTER - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.report.hangs.append(f"{self.coordinator.name}: alive {HANG_AFTER:g}s after "
                                     "the run should have ended")
        ended = time.monotonic()
        for proc in self.cluster.procs:
            try:
                proc.proc.wait(max(0.0, ended + HANG_AFTER - time.monotonic()))
            except subprocess.TimeoutExpired:
                if proc is not self.coordinator:
                    self.report.hangs.append(f"{proc.name}: alive {HANG_AFTER:g}s after the "
                                             "coordinator ended")
        self.report.exit_codes = {p.name: p.proc.poll() for p in self.cluster.procs}

    def _read_outputs(self) -> None:
        if not (published(self.out) / "metrics.json").exists():
            return
        self.report.metrics = read_metrics(self.out)
        rows = [json.loads(line) for line in
                (published(self.out) / "metrics.jsonl").read_text().splitlines()]
        self.report.rates = rates(rows, max(10.0, self.report.budget / 10))


def rates(rows: list[dict[str, Any]], window: float) -> list[tuple[float, float]]:
    """Rounds per second of training in windows of ``window`` seconds (from the
    evaluations' elapsed and round)."""
    out: list[tuple[float, float]] = []
    start = next((r for r in rows if r.get("round") is not None), None)
    if start is None:
        return out
    for row in rows:
        if row["elapsed"] - start["elapsed"] >= window:
            out.append((round(row["elapsed"], 1),
                        (row["round"] - start["round"]) / (row["elapsed"] - start["elapsed"])))
            start = row
    return out


def clean_accuracy(workdir: Path, mode: str, topology: str, workers: int,
                   budget: float) -> float:
    """Test accuracy of the same run without faults."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "out"
    cluster = Cluster(workdir)
    try:
        cluster.start(workers, **soak_settings(out, mode, topology, budget))
        assert cluster.coordinator is not None
        code = cluster.coordinator.wait(budget + 300)
        assert code == 0, cluster.output()
    finally:
        cluster.reap()
    return float(read_metrics(out)["test_accuracy"])


def missed(report: SoakReport, rss_growth: float = 0.10) -> list[str]:
    """The targets a soak missed (empty: all met)."""
    why = []
    if report.accuracy is None:
        why.append("no metrics.json")
    elif report.clean_accuracy is not None and report.accuracy < report.clean_accuracy - 0.005:
        why.append(f"accuracy {report.accuracy:.4f} more than 0.5 point below the clean "
                   f"run's {report.clean_accuracy:.4f}")
    if report.hangs:
        why.append(f"hangs: {report.hangs}")
    unrecovered = [f"{f.kind} {f.target} at {f.at:.0f}s" for f in report.faults
                   if f.recovery is None]
    if unrecovered:
        why.append(f"no recovery time: {unrecovered}")
    for g in report.growth():
        # Descriptors: a process holds no more at the end than once it had settled. Judged
        # on the processes that ran to their end: one the soak killed was last sampled
        # wherever the kill found it, often amid the recovery of another fault (a
        # coordinator killed 30 s after three workers' faults held 36 against 34; the one
        # resumed after it went 32, 34, 31, 33 over the next 6 minutes).
        killed = report.exit_codes.get(g["process"]) == KILLED
        if not killed and g["fds_settled"] is not None and g["fds_end"] > g["fds_settled"]:
            why.append(f"{g['process']}: descriptors {g['fds_settled']} -> {g['fds_end']}")
        if g["rss_minute"] and g["to"] - 60.0 >= 30.0 and (
                g["rss_end"] > (1 + rss_growth) * g["rss_minute"]):
            why.append(f"{g['process']}: RSS {g['rss_minute'] / 1e6:.0f} MB after a minute, "
                       f"{g['rss_end'] / 1e6:.0f} MB at the end")
    return why


def table(reports: list[SoakReport]) -> str:
    """The Markdown tables of several soaks: one row a run, then every fault."""
    lines = [("| mode | topology | workers | budget (s) | rounds | rounds/s (min-max over "
              "time) | test accuracy (clean) | faults | max recovery (s) | hangs | exit codes "
              "| RSS growth after 1 min (max) | fd change (max) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        speeds = [v for _, v in r.rates]
        growth = r.growth()
        rss = [g["rss_end"] / g["rss_minute"] - 1 for g in growth
               if g["rss_minute"] and g["to"] - 60 >= 30]
        fds = [g["fds_end"] - g["fds_settled"] for g in growth if g["fds_settled"] is not None]
        rec = [f.recovery for f in r.faults if f.recovery is not None]
        cells = [r.mode, r.topology, str(r.workers), f"{r.budget:g}",
                 str(r.metrics.get("rounds", "-")),
                 f"{min(speeds):.1f}-{max(speeds):.1f}" if speeds else "-",
                 f"{_acc(r.accuracy)} ({_acc(r.clean_accuracy)})", str(len(r.faults)),
                 f"{max(rec):.1f}" if rec else "-", str(len(r.hangs)),
                 ", ".join(sorted({str(c) for c in r.exit_codes.values()})),
                 f"{100 * max(rss):+.1f} %" if rss else "-",
                 f"{max(fds):+d}" if fds else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| run | at (s) | fault | target | lasted (s) | recovered in (s) | note |",
              "|---|---|---|---|---|---|---|"]
    for r in reports:
        for f in r.faults:
            recovered = "not recovered" if f.recovery is None else f"{f.recovery:.1f}"
            lines.append(f"| {r.mode} {r.topology} | {f.at:.0f} | {f.kind} | {f.target} | "
                         f"{f.lasted:.1f} | {recovered} | {f.note} |")
    return "\n".join(lines)


def _acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
