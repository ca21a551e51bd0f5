"""What a setting may hold: the closed sets of values, the numeric ranges, the checks across settings."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hogwild.errors import ConfigError

MODES = ("sync", "async")
TOPOLOGIES = ("mesh", "star", "tree")  # what a run uses, and the wire carries
# The topology setting may also say "auto": a mesh up to this many workers (by mode); beyond,
# a tree in sync mode and a star in async mode. A mesh worker sends W messages a round (its
# peers and the coordinator), a tree node at most tree_fanout + 1, and a sync tree's round
# takes its depth in hops up and down. Simulated with the default cost model (1 ms a message)
# and combine momentum, time to the one-worker accuracy (bench/NOTES.md): sync, 8 workers,
# tree against mesh: 0.027 against 0.041 s on 200k RCV1-shaped rows, 0.068 against 0.070 s on
# 2M; 4 workers, mesh against tree: 0.019 against 0.022 s (200k), 0.093 against 0.101 s (2M).
# Async, block momentum through a tree's relays, which pass sums on a hop at a time, swung
# and never got there with 8, 16 or 64 workers; a mesh of 8 got there in 0.032 s on 200k rows
# (a star: 0.107 s), and through the star (one hop to the coordinator and one back) 16
# workers got there in 0.051 s on 2M.
AUTO_MESH_MAX_WORKERS = {"sync": 4, "async": 8}
TOPOLOGY_CHOICES = ("auto", *TOPOLOGIES)
COMBINES = ("sum", "average", "momentum")  # what a run uses, and the wire carries
# The combine setting may also say "auto": block momentum where each worker holds at least
# this many training rows, summed deltas (in rounds that shrink as W grows) below. Block
# momentum averages the workers' rounds, which needs rounds of enough rows each: simulated
# on Reuters earn (8,643 rows; 540 a worker of 16, 135 of 64) it ended 0.5-1.7 points
# behind one process whatever the rounds per epoch (4 to 16), where summed deltas were
# within 0.1; with 11,250 rows a worker (200k synthetic RCV1 rows, 16 workers) and more it
# reached one process's accuracy faster than sums (bench/NOTES.md).
MOMENTUM_MIN_ROWS = 10_000
COMBINE_CHOICES = ("auto", *COMBINES)
# The engage setting: auto = train on as many of the registered workers as pays: one per
# ENGAGE_NNZ[mode] non-zeros of an epoch's training rows per thread, at most ENGAGE_MAX[mode],
# in sync mode no more than hold MOMENTUM_MIN_ROWS rows each (so that combine: auto stays
# block momentum), never fewer than two where two or more were started, nor so few that one
# holds over ENGAGE_HOLD_NNZ non-zeros (about 0.4 GB of rows: there the workers' memory is
# what the run needs); all = every worker. Past that width a worker's round of training is
# short against the messages that combine it, and each worker added makes the run slower.
# Simulated with the default cost model (bench/NOTES.md), time to the one-worker accuracy,
# sync runs with the steps of engine.round_size.momentum_step_scale: on 200k RCV1-shaped
# rows (13.5M training non-zeros) 2.2x sooner at 4 workers, 1.4x at 5, 2.0x at 6, 2.3x at 8
# and 2.5x at 16 (0.84M non-zeros each), and 32 (summed deltas: too few rows each) far
# slower than one; on 1M rows 4.9x at 16, 4.7x at 24, 5.8x at 32 and 5.6x at 64 (1.05M
# each); on 2M rows 7.9x at 16, 8.6x at 32, 9.0x at 48 and 10.2x at 64. Async runs keep
# their steps: on 200k rows 2.4x at 4, less from 5 on; on 2M rows 9.2x at 8 (a mesh), 6.5x
# at 12 and 6.2x at 16 (a star: the coordinator sends every worker's sum on; a mesh of 12
# or 16: 5.2x, 5.9x). Linear models only: an MLP's work per non-zero is its hidden width,
# so it engages every worker.
ENGAGE_NNZ = {"sync": 1_000_000, "async": 3_300_000}
ENGAGE_MAX = {"sync": 64, "async": 8}
ENGAGE_HOLD_NNZ = 50_000_000
ENGAGE_CHOICES = ("auto", "all")
DELTA_DTYPES = ("float32", "float16")
LOSSES = ("hinge", "logistic", "squared")
SCHEDULES = ("inverse", "constant", "invscaling")
SHIPPING = ("partition", "replicate", "local")
LOCAL_PLANS = ("auto", "scan", "sample")
TRAINER_MODES = ("hogwild", "locked", "serial", "syncsgd")
MODEL_KINDS = ("linear", "mlp")
MULTICLASS_MODES = ("ovr",)
LOG_LEVELS = ("debug", "info", "warning", "error")
SIGTERM_ACTIONS = ("finish", "checkpoint")
FINAL_STATES = ("none", "compact")
# The device setting: cpu, cuda (the first GPU) or cuda:N; the trainer modes a GPU runs
# (hogwild: many warps; serial: one, the CPU kernel's serial pass).
DEVICE_FORMAT = re.compile(r"cpu|cuda(?::(0|[1-9][0-9]{0,3}))?")
# `hogwild run` may name several GPUs of its machine, given to its workers in turn.
DEVICE_LIST_FORMAT = re.compile(r"cuda:(?:0|[1-9][0-9]{0,3})(?:,(?:0|[1-9][0-9]{0,3}))+")
GPU_TRAINER_MODES = ("hogwild", "serial")
# model mlp on a GPU: the hidden sizes add up to at most this many units (each warp keeps its
# row's pre-activations and deltas in shared memory, whose size the kernel fixes at compile
# time: hogwild.model.cuda_mlp_kernels).
GPU_MLP_MAX_UNITS = 256


def resolve_combine(combine: str, train_rows: int, workers: int) -> str:
    """How W workers' deltas of ``train_rows`` rows add up: ``combine``, or for ``auto``
    block momentum where each worker has MOMENTUM_MIN_ROWS rows and more (one worker:
    nothing to combine, and momentum's own filter is then the identity) and a sum below."""
    if combine != "auto":
        return combine
    return "momentum" if train_rows >= MOMENTUM_MIN_ROWS * max(1, workers) else "sum"


def engaged_workers(engage: str, workers: int, threads: int, train_nnz: int,
                    model: str = "linear", mode: str = "sync",
                    train_rows: int | None = None) -> int:
    """How many of ``workers`` a run trains on: all of them, or for ``engage: auto`` (a
    linear model) one per ENGAGE_NNZ[mode] non-zeros of the epoch per thread, at most
    ENGAGE_MAX[mode], in sync mode at most one per MOMENTUM_MIN_ROWS of ``train_rows``
    (where known), at least two, and at least enough that none holds over
    ENGAGE_HOLD_NNZ."""
    if engage != "auto" or workers <= 2 or model != "linear":
        return workers
    busy = min(ENGAGE_MAX[mode], _kept_busy(train_nnz, threads, mode))
    if mode == "sync" and train_rows is not None:
        busy = min(busy, train_rows // MOMENTUM_MIN_ROWS)
    held = -(-train_nnz // ENGAGE_HOLD_NNZ)
    return int(min(workers, max(2, busy, held)))


def _kept_busy(train_nnz: int, threads: int, mode: str) -> int:
    """The workers an epoch's ``train_nnz`` non-zeros keep busy at ``threads`` each."""
    return train_nnz // (ENGAGE_NNZ[mode] * max(1, threads))


def engaged_note(asked: int, engaged: int, threads: int, train_nnz: int,
                 mode: str = "sync", train_rows: int | None = None) -> str | None:
    """The line that says a run engages fewer workers than were started; None if it does
    not."""
    if engaged >= asked:
        return None
    each = train_nnz / (engaged * max(1, threads))
    most = ENGAGE_MAX[mode]
    if mode == "sync" and train_rows is not None and \
            train_rows // MOMENTUM_MIN_ROWS == engaged < _kept_busy(train_nnz, threads, mode):
        why = (f"{train_rows:,} training rows are {train_rows // engaged:,} a worker, and "
               f"block momentum needs {MOMENTUM_MIN_ROWS:,}; more workers would sum their "
               "deltas in rounds that shrink as workers are added")
    else:
        why = (f"{train_nnz:,} training non-zeros are {each / 1e6:.3g}M an epoch for each of "
               f"their {threads} thread(s); more workers would spend longer on messages than "
               f"they save in training (a worker pays from about "
               f"{ENGAGE_NNZ[mode] / 1e6:g}M a thread in {mode} mode, and no run of more "
               f"than {most} was measured faster)")
    left = asked - engaged
    others = "The other one is" if left == 1 else f"The other {left} are"
    return (f"engaging {engaged} of {asked} workers: {why}, so the run would be slower. "
            f"{others} released at the start (`engage: all` trains on every worker)")


def few_rows_a_worker(asked: str, combine: str, train_rows: int, workers: int) -> str | None:
    """What combine auto's fallback to summed deltas means for a run (``asked``: the setting,
    ``combine``: what it resolved to): W workers of too few rows each exchange far more
    often, and fewer of them are likely faster. None where it did not fall back."""
    if asked != "auto" or combine != "sum" or workers <= 2:
        return None
    return (f"{train_rows:,} training rows over {workers} workers is {train_rows // workers:,} "
            f"a worker, under the {MOMENTUM_MIN_ROWS:,} block momentum needs: combine auto "
            "sums the deltas instead, in rounds that shrink as workers are added, so this run "
            "exchanges far more often than it trains and fewer workers are likely faster "
            "(`hogwild simulate --workers N` compares)")


def resolve_topology(topology: str, workers: int, mode: str = "sync") -> str:
    """The topology W workers run: ``topology``, or for ``auto`` a mesh up to
    AUTO_MESH_MAX_WORKERS[mode] and beyond a tree (sync) or a star (async)."""
    if topology != "auto":
        return topology
    if workers <= AUTO_MESH_MAX_WORKERS.get(mode, AUTO_MESH_MAX_WORKERS["sync"]):
        return "mesh"
    return "tree" if mode == "sync" else "star"


@dataclass(frozen=True)
class Bound:
    """The range a numeric setting must lie in, and the sentence that says so. Defined here
    once: the trainer and the worker's run plan check their copies of a setting against it."""

    low: float
    high: float
    why: str
    low_open: bool = False   # low itself is not allowed
    high_open: bool = False  # high itself is not allowed

    def __contains__(self, value: float) -> bool:
        # Written so that NaN is outside every range (each comparison with it is false).
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    @property
    def rule(self) -> tuple[Callable[[Any], bool], str]:
        return (lambda value: value in self), self.why


_INF = float("inf")
MAX_THREADS = 256  # threads per process (a worker's, or train's)
BOUNDS: dict[str, Bound] = {
    "threads": Bound(1, MAX_THREADS, f"must be between 1 and {MAX_THREADS}"),
    "batch_size": Bound(1, 1 << 20, "must be between 1 and 1048576"),
    "learning_rate": Bound(0, _INF, "must be positive and finite", low_open=True,
                           high_open=True),
    "deep_lr_scale": Bound(0, _INF, "must be positive and finite", low_open=True,
                           high_open=True),
    "lr_decay": Bound(0, 1, "must be in (0, 1]", low_open=True),
    "power_t": Bound(0, 2, "must be in [0, 2]"),
    "l2": Bound(0, _INF, "must be non-negative and finite", high_open=True),
    "tree_fanout": Bound(2, 64, "must be between 2 and 64"),
    # `hogwild simulate`'s machines and network (declared in settings/simulation.py). The
    # ranges hold every real machine and network with room to spare; beyond them a number
    # is a typo or an attack (a log-normal sigma of 1e300 overflows, a billion slices or
    # evaluations per epoch make a run of hours that prints nothing).
    "speed": Bound(1, 1e13, "must be between 1 and 1e13 non-zeros per second per thread"),
    "speed_spread": Bound(0, 3, "must be between 0 and 3 (a log-normal sigma: at 3, one "
                                "worker in 20 is over 100x slower than the median, and one "
                                "in 20 over 100x faster)"),
    "latency": Bound(0, 3600, "must be between 0 and 3600 seconds"),
    "overhead": Bound(0, 3600, "must be between 0 and 3600 seconds"),
    "bandwidth": Bound(1, 1e13, "must be between 1 and 1e13 bytes per second"),
    "slices": Bound(1, 1024, "must be between 1 and 1024"),
    "evals_per_epoch": Bound(0, 1000, "must be above 0 and at most 1000", low_open=True),
    "max_events": Bound(1, 1e12, "must be between 1 and 1e12"),
}


def sgd_problem(values: Any) -> tuple[str, str] | None:
    """The first of ``values``' SGD hyperparameters (attributes loss, lr_schedule,
    learning_rate, lr_decay, power_t, l2) outside the settings' choices and bounds, as
    (name, why); None when all are in. The in-process trainer and a worker's run plan both
    check theirs so: the Python API, the command line and the wire accept the same values."""
    if values.loss not in LOSSES:
        return "loss", f"must be one of {', '.join(LOSSES)}"
    if values.lr_schedule not in SCHEDULES:
        return "lr_schedule", f"must be one of {', '.join(SCHEDULES)}"
    for name in ("learning_rate", "lr_decay", "power_t", "l2"):
        if getattr(values, name) not in BOUNDS[name]:
            return name, BOUNDS[name].why
    return None


def worker_devices(device: str, workers: int) -> list[str]:
    """The device of each of `hogwild run`'s ``workers``: a list (cuda:0,1) goes round them
    in turn, anything else is every worker's."""
    if DEVICE_LIST_FORMAT.fullmatch(device) is None:
        return [device] * workers
    indices = device.removeprefix("cuda:").split(",")
    return [f"cuda:{indices[i % len(indices)]}" for i in range(workers)]


# class_weight: "balanced", or LABEL:WEIGHT pairs separated by commas.
BALANCED = "balanced"
CLASS_WEIGHT_WHY = ("must be balanced or LABEL:WEIGHT pairs such as 1:2.0,-1:1.0 (labels as "
                    "the data writes them, weights finite and >= 0, each label once)")


def parse_class_weight(text: str) -> str | dict[float, float] | None:
    """The class_weight setting: None (empty: every class weighs 1), ``"balanced"``, or
    {label: weight}; ValueError (CLASS_WEIGHT_WHY) when it is none of these."""
    text = text.strip()
    if not text:
        return None
    if text == BALANCED:
        return BALANCED
    out: dict[float, float] = {}
    for pair in text.split(","):
        label, sep, weight = pair.partition(":")
        try:
            key, value = float(label), float(weight)
        except ValueError:
            raise ValueError(CLASS_WEIGHT_WHY) from None
        if not sep or key in out or not math.isfinite(key) or not 0 <= value < math.inf:
            raise ValueError(CLASS_WEIGHT_WHY)
        out[key] = value
    return out


def _is_class_weight(text: str) -> bool:
    try:
        parse_class_weight(text)
    except ValueError:
        return False
    return True


def is_address(value: str) -> bool:
    """``value`` is host:port with a port in 1..65535."""
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "coordinator_address": (is_address, "expected host:port"),
    "advertise_address": (lambda v: not v or is_address(v), "expected host:port"),
    "coordinator_port": (lambda v: 0 <= v < 65536, "must be a port number in 0..65535"),
    "worker_port": (lambda v: 0 <= v < 65536, "must be a port number in 0..65535"),
    "health_port": (lambda v: 0 <= v < 65536, "must be a port number in 0..65535 (or null)"),
    "metrics_port": (lambda v: 0 <= v < 65536, "must be a port number in 0..65535 (or null)"),
    "metrics_linger": (lambda v: 0 <= v < float("inf"), "must be 0 (off) or positive"),
    "swing_tolerance": (lambda v: 0 < v < 1, ("must be in (0, 1) (accuracy points as a "
                                              "fraction: 0.02 = 2 points), or null = off")),
    "workers": (lambda v: 1 <= v <= 1024, "must be between 1 and 1024"),
    "threads": BOUNDS["threads"].rule,
    "batch_size": BOUNDS["batch_size"].rule,
    "device": (lambda v: (DEVICE_FORMAT.fullmatch(v) or DEVICE_LIST_FORMAT.fullmatch(v))
               is not None,
               ("must be cpu, cuda or cuda:N (N the GPU's index), or for run cuda:N,M,... "
                "(one GPU per worker, in turn)")),
    # Upper bounds are those of the wire (int32 staleness, uint64 counts and seed) and of
    # the 32-bit feature ids: beyond them a run would fail later with a traceback.
    "staleness": (lambda v: 1 <= v < 1 << 31,
                  "must be between 1 and 2147483647 (or null for unbounded)"),
    "round_size": (lambda v: 1 <= v < 1 << 63, "must be at least 1 (or null for auto)"),
    # Every wait has a deadline: an infinite one overflows the clock (threading's waits
    # raise OverflowError), so a timeout is finite.
    **{key: (lambda v: 0 < v < float("inf"), "must be positive and finite")
       for key in ("register_timeout", "barrier_timeout", "rpc_timeout", "connect_timeout",
                   "stall_warning_after")},
    "learning_rate": BOUNDS["learning_rate"].rule,
    "deep_lr_scale": BOUNDS["deep_lr_scale"].rule,
    "lr_decay": BOUNDS["lr_decay"].rule,
    "power_t": BOUNDS["power_t"].rule,
    "l2": BOUNDS["l2"].rule,
    "epochs": (lambda v: v >= 1, "must be at least 1"),
    "time_budget": (lambda v: v >= 0, "must be non-negative (0 = no limit)"),
    "patience": (lambda v: v >= 0, "must be non-negative (0 = off)"),
    "min_delta": (lambda v: v >= 0, "must be non-negative"),
    "eval_interval": (lambda v: v > 0, "must be positive"),
    "trace_interval": (lambda v: 0 <= v < float("inf"), "must be 0 (off) or positive"),
    "checkpoint_interval": (lambda v: 0 <= v < float("inf"), "must be 0 (off) or positive"),
    "n_features": (lambda v: 1 <= v <= 1 << 31,
                   "must be between 1 and 2147483648 (feature ids are 32-bit; or null to infer)"),
    "seed": (lambda v: 0 <= v < 1 << 64, "must be between 0 and 2**64 - 1"),
    "val_fraction": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "test_fraction": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "delta_threshold": (lambda v: 0 <= v < float("inf"), "must be non-negative and finite"),
    "delta_topk": (lambda v: 0 <= v < 1 << 63, "must be non-negative (0 = off)"),
    "delta_norm_bound": (lambda v: v == 0 or 2 <= v < float("inf"),
                         "must be 0 (off) or at least 2 and finite"),
    "norm_clip": (lambda v: v == 0 or 1 <= v < float("inf"),
                  "must be 0 (off) or at least 1 and finite"),
    "tree_fanout": BOUNDS["tree_fanout"].rule,
    "chunk_bytes": (lambda v: 4096 <= v <= (1 << 20), "must be between 4096 and 1048576"),
    "data": (lambda v: bool(v.strip()), "must not be empty"),
    "class_weight": (_is_class_weight, CLASS_WEIGHT_WHY),
    "out_dir": (lambda v: bool(v.strip()), "must not be empty"),
    "keep_runs": (lambda v: 0 <= v < 1 << 31, "must be 0 (keep every run) or positive"),
}


def check_together(clean: Mapping[str, Any]) -> None:
    """The checks that look at several settings at once (``clean``: the coerced values
    given, defaults included when built by load)."""
    _check_security(clean)
    if clean.get("val_fraction", 0.0) + clean.get("test_fraction", 0.0) >= 1.0:
        raise ConfigError("test_fraction", "val_fraction + test_fraction must be below 1")
    if clean.get("combine") == "average" and (clean.get("delta_threshold", 0.0) > 0
                                              or clean.get("delta_topk", 0) > 0):
        # What compression holds back stays in w - snapshot, the change averaged every round:
        # it would be cut to 1/W again and again instead of sent.
        raise ConfigError("combine", "combine average does not go with delta_threshold or "
                                     "delta_topk (the unsent residual would be averaged again "
                                     "every round); use combine sum, or no compression")
    if clean.get("norm_clip", 0.0) > 0 and clean.get("topology", "mesh") != "star":
        # Only the star's coordinator sees each sender's own delta before anyone applies it.
        raise ConfigError("norm_clip", f"needs topology star (each worker's own delta reaches "
                                       f"the coordinator alone), not {clean.get('topology', 'mesh')}")
    if clean.get("device", "cpu") != "cpu":
        _check_gpu(clean)
    if clean.get("class_weight", "").strip():
        _check_class_weight(clean)
    if clean.get("model") == "mlp":
        # The MLP's kernel steps once per example (hogwild, locked or serial threads).
        if clean.get("batch_size", 1) != 1:
            raise ConfigError("batch_size", f"model mlp steps once per example: batch_size "
                                            f"must be 1, got {clean['batch_size']!r}")
        if clean.get("trainer") == "syncsgd":
            raise ConfigError("trainer", "model mlp trains with hogwild, locked or serial "
                                         "threads, not syncsgd")


def _check_class_weight(clean: Mapping[str, Any]) -> None:
    """Class weights scale the gradient of each row of a class in the linear model's CPU
    kernels: a classifier's loss, not the MLP's or a GPU's kernels."""
    if clean.get("loss") == "squared":
        raise ConfigError("class_weight", "weighs the classes of a classifier: not with loss "
                                          "squared (regression)")
    given = [f"model {clean['model']}" if clean.get("model", "linear") != "linear" else "",
             f"device {clean['device']}" if clean.get("device", "cpu") != "cpu" else "",
             "out_of_core" if clean.get("out_of_core") else ""]
    if any(given):
        raise ConfigError("class_weight", f"is trained by the linear model on the CPU: not "
                                          f"with {' and '.join(g for g in given if g)}")


def _check_gpu(clean: Mapping[str, Any]) -> None:
    """What the GPU trainer (hogwild.engine.gpu) does not train is refused before any data is
    read: it would otherwise run on the CPU with the device setting ignored. The same checks
    hold for a GPU worker (engine/gpu_rounds.py), which runs the same kernels; the settings
    it does not read (trainer, batch_size, out_of_core) are still refused with cuda rather
    than half honoured from a file shared with `train`."""
    device = clean["device"]
    refused = {"out_of_core": bool(clean.get("out_of_core")),
               "trainer": clean.get("trainer", "hogwild") not in GPU_TRAINER_MODES,
               "batch_size": clean.get("batch_size", 1) != 1}
    for key, bad in refused.items():
        if bad:
            raise ConfigError("device", f"device {device} trains with trainer hogwild or "
                                        f"serial, batch_size 1 and in memory; "
                                        f"got {key} {clean[key]!r}")
    hidden = clean.get("hidden") or ()
    if clean.get("model") == "mlp" and sum(hidden) > GPU_MLP_MAX_UNITS:
        raise ConfigError("hidden", f"model mlp on device {device} takes hidden layers of "
                                    f"{GPU_MLP_MAX_UNITS} units in all at most; got "
                                    f"{list(hidden)} ({sum(hidden)} units)")


def _check_security(clean: Mapping[str, Any]) -> None:
    """TLS files come as a set of three; one token source at most."""
    tls = {key: bool(clean.get(key)) for key in ("tls_ca", "tls_cert", "tls_key")}
    if any(tls.values()) and not all(tls.values()):
        missing = next(key for key, given in tls.items() if not given)
        raise ConfigError(missing, "tls_ca, tls_cert and tls_key go together (mutual TLS); "
                                   "set all three or none")
    if clean.get("auth_token") and clean.get("auth_token_file"):
        raise ConfigError("auth_token_file", "set auth_token or auth_token_file, not both")
    check_metrics_tls(clean)


def check_metrics_tls(values: Mapping[str, Any]) -> None:
    """metrics_tls serves the process's own certificate: it needs tls_cert and tls_key (asked
    again by the metrics server, which may be given settings built without these checks)."""
    if values.get("metrics_tls") and not (values.get("tls_cert") and values.get("tls_key")):
        raise ConfigError("metrics_tls", "serves HTTPS with the process's tls_cert and tls_key, "
                                         "and they are not set: set tls_ca, tls_cert and "
                                         "tls_key (`hogwild certs` makes them), or turn "
                                         "metrics_tls off")
