"""What an experiment runs: its options and the list of runs they expand to (no training here)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hogwild.base.hosts import machine_cores
from hogwild.config import TRAINER_MODES, check_values
from hogwild.errors import ConfigError

TRAINERS: tuple[str, ...] = TRAINER_MODES
STUDIES: tuple[str, ...] = ("threads", "size", "batch", "regression", "workers")
LR_SCALINGS: tuple[str, ...] = ("none", "linear", "sqrt")


# The options that are settings of the runs, and the setting whose rules each value follows.
_SETTINGS_OF = {"threads": "threads", "trainers": "trainer", "batch_sizes": "batch_size",
                "sync_batch_size": "batch_size", "workers": "workers",
                "worker_threads": "threads", "epochs": "epochs", "seed": "seed"}


@dataclass(frozen=True)
class ExperimentOptions:
    """The sweep. ``rows`` are data-set sizes before the validation/test split."""

    out_dir: str = "runs/experiment"
    threads: tuple[int, ...] = (1, 2, 4)
    trainers: tuple[str, ...] = TRAINERS
    main_rows: int = 200_000
    rows: tuple[int, ...] = (10_000, 50_000, 100_000, 500_000)
    batch_sizes: tuple[int, ...] = (2, 125)
    sync_batch_size: int = 125
    workers: tuple[int, ...] = ()
    worker_threads: int = 1
    epochs: int = 10
    repeats: int = 3
    loss: str = "hinge"
    regression: bool = True
    regression_rows: int = 100_000
    regression_dim: int = 1000
    target_loss: float | None = None
    target_slack: float = 0.05
    batch_lr_scaling: str = "none"
    seed: int = 0
    cores: int = field(default_factory=machine_cores)

    def __post_init__(self) -> None:
        def need(ok: bool, key: str, why: str) -> None:
            if not ok:
                raise ConfigError(key, f"{why} (got {getattr(self, key)!r})")

        for option, key in _SETTINGS_OF.items():
            given = getattr(self, option)
            for value in given if isinstance(given, tuple) else (given,):
                try:
                    check_values({key: value}, "experiment")
                except ConfigError as exc:
                    raise ConfigError(option, exc.reason) from None
        # The experiment's own options.
        need(bool(self.threads), "threads", "must not be empty")
        need(bool(self.trainers), "trainers", "must not be empty")
        need(self.main_rows >= 100, "main_rows", "must be at least 100")
        need(all(r >= 100 for r in self.rows), "rows", "data sizes must be at least 100")
        need(self.repeats >= 1, "repeats", "must be at least 1")
        need(self.loss in ("hinge", "logistic"), "loss", "must be hinge or logistic "
             "(the regression study always uses squared)")
        need(self.regression_rows >= 100, "regression_rows", "must be at least 100")
        need(self.regression_dim >= 1, "regression_dim", "must be at least 1")
        need(self.target_slack >= 0, "target_slack", "must be non-negative")
        need(self.batch_lr_scaling in LR_SCALINGS, "batch_lr_scaling",
             f"must be one of {', '.join(LR_SCALINGS)}")

    def learning_rate(self, base: float, batch_size: int) -> float:
        """The step size of a run with this mini-batch size: the settings' own ("none"),
        or multiplied by the batch size ("linear") or its square root ("sqrt")."""
        if self.batch_lr_scaling == "linear":
            return base * batch_size
        if self.batch_lr_scaling == "sqrt":
            return base * math.sqrt(batch_size)
        return base


def quick_options(**overrides: object) -> ExperimentOptions:
    """A few seconds on two cores: small data, 1 and 2 threads, 3 epochs."""
    base: dict[str, object] = {
        "threads": (1, 2), "main_rows": 20_000, "rows": (5_000, 20_000),
        "batch_sizes": (2, 125), "epochs": 3, "regression_rows": 10_000,
        "regression_dim": 200, "repeats": 1,
    }
    base.update(overrides)
    return ExperimentOptions(**base)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DataSpec:
    """One data set of the experiment: a source string and its loss."""

    name: str       # short label used in plots: "rcv1 200k", "regression 100k"
    source: str     # hogwild data source string
    rows: int       # rows generated (before the split)
    loss: str


@dataclass(frozen=True)
class RunSpec:
    """One training run (repeated ``repeats`` times). ``workers`` > 0: a real cluster run."""

    data: DataSpec
    trainer: str
    threads: int
    batch_size: int = 1
    workers: int = 0
    studies: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.data.source, self.trainer, self.threads, self.batch_size, self.workers)

    def label(self) -> str:
        if self.workers:
            return f"{self.data.name}: {self.workers} workers x {self.threads} threads"
        batch = f", batch {self.batch_size}" if self.batch_size > 1 else ""
        return f"{self.data.name}: {self.trainer}, {self.threads} thread(s){batch}"


def _short(rows: int) -> str:
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1000 == 0:
        return f"{rows // 1000}k"
    return str(rows)


def rcv1_data(rows: int, seed: int, loss: str) -> DataSpec:
    return DataSpec(f"rcv1 {_short(rows)}", f"synthetic:rcv1?rows={rows}&seed={seed}", rows, loss)


def regression_data(rows: int, dim: int, seed: int) -> DataSpec:
    return DataSpec(f"regression {_short(rows)}",
                    f"synthetic:regression?rows={rows}&dim={dim}&seed={seed}", rows, "squared")


def skip_reason(spec: RunSpec) -> str | None:
    """Why a run is left out of the plan, or None. Synchronous SGD with fewer rows per
    mini-batch than threads would leave threads idle at every barrier."""
    if spec.trainer == "syncsgd" and spec.batch_size < spec.threads:
        return (f"syncsgd with batch {spec.batch_size} < {spec.threads} threads "
                "(a thread would have no row of a mini-batch)")
    return None


def build_plan(opts: ExperimentOptions) -> tuple[list[RunSpec], list[str]]:
    """The runs of every study, each configuration once (a run shared by studies lists them
    all), plus one line per configuration left out and why. Every data set gets a serial
    run (the speedup reference), whether or not serial is among the trainers."""
    runs: dict[tuple[str, str, int, int, int], RunSpec] = {}
    skipped: list[str] = []

    def add(spec: RunSpec) -> None:
        why = skip_reason(spec)
        if why is not None:
            skipped.append(f"{spec.label()}: skipped, {why}")
            return
        old = runs.get(spec.key)
        if old is None:
            runs[spec.key] = spec
        elif not set(spec.studies) <= set(old.studies):
            runs[spec.key] = RunSpec(old.data, old.trainer, old.threads, old.batch_size,
                                     old.workers, old.studies + spec.studies)

    def trainer_runs(data: DataSpec, study: str, trainers: tuple[str, ...],
                     threads: tuple[int, ...]) -> None:
        add(RunSpec(data, "serial", 1, 1, studies=(study,)))
        for trainer in trainers:
            if trainer == "serial":
                continue
            batch = opts.sync_batch_size if trainer == "syncsgd" else 1
            for t in threads:
                add(RunSpec(data, trainer, t, batch, studies=(study,)))

    main = rcv1_data(opts.main_rows, opts.seed, opts.loss)
    trainer_runs(main, "threads", opts.trainers, opts.threads)
    for rows in opts.rows:
        data = rcv1_data(rows, opts.seed, opts.loss)
        trainer_runs(data, "size", ("hogwild",), opts.threads)
    batch_trainers = tuple(t for t in ("hogwild", "syncsgd") if t in opts.trainers)
    for b in opts.batch_sizes:
        for trainer in batch_trainers:
            for t in opts.threads:
                add(RunSpec(main, trainer, t, b, studies=("batch",)))
    if batch_trainers:
        for t in opts.threads:
            add(RunSpec(main, "hogwild", t, 1, studies=("batch",)))
    if opts.regression:
        reg = regression_data(opts.regression_rows, opts.regression_dim, opts.seed)
        trainer_runs(reg, "regression", opts.trainers, opts.threads)
    for w in opts.workers:
        add(RunSpec(main, "cluster", opts.worker_threads, 1, workers=w, studies=("workers",)))
    return list(runs.values()), skipped
