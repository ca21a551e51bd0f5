"""The Settings dataclass: every setting's type, default and documentation; checking values and building one from them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from hogwild.errors import ConfigError
from hogwild.settings.rules import (
    COMBINE_CHOICES,
    DELTA_DTYPES,
    ENGAGE_CHOICES,
    FINAL_STATES,
    LOCAL_PLANS,
    LOG_LEVELS,
    LOSSES,
    MODEL_KINDS,
    MODES,
    MULTICLASS_MODES,
    RULES,
    SCHEDULES,
    SHIPPING,
    SIGTERM_ACTIONS,
    TOPOLOGY_CHOICES,
    TRAINER_MODES,
    check_together,
    engaged_workers,
    resolve_combine,
    resolve_topology,
)
from hogwild.settings.values import read_as

# The subcommands that read settings. A field's ``commands`` metadata names the ones that use
# it: their --help shows it, the others hide it and warn when it is given as a flag. A field
# without ``commands`` is used by every command.
COMMANDS = ("train", "run", "coordinator", "worker")
_T, _W, _C = ("train",), ("worker",), ("coordinator",)
_CW = ("coordinator", "worker")
_RC = ("run", "coordinator")
_RW = ("run", "worker")
_RCW = ("run", "coordinator", "worker")
_TRC = ("train", "run", "coordinator")
_TRW = ("train", "run", "worker")


def _doc(text: str, **extra: Any) -> Any:
    """A dataclass field's metadata: the help text shown by the CLI and in settings.yaml, and
    optionally ``choices`` (closed set of values) and ``commands`` (the subcommands using it)."""
    return {"help": text, **extra}


@dataclass(frozen=True)
class Settings:
    """Every setting of a hogwild run. Build with :func:`load`; never mutate (use ``replace``)."""

    # --- cluster -----------------------------------------------------------------------
    coordinator_address: str = field(
        default="127.0.0.1:50051",
        metadata=_doc("host:port where workers reach the coordinator", commands=_W))
    coordinator_port: int = field(
        default=50051, metadata=_doc("port the coordinator listens on (0 = any free port)",
                                     commands=_C))
    worker_port: int = field(
        default=50061, metadata=_doc("port a worker listens on (0 = any free port)", commands=_W))
    bind_host: str = field(
        default="0.0.0.0", metadata=_doc("interface the servers listen on", commands=_CW))
    advertise_address: str = field(
        default="",
        metadata=_doc("host:port a worker announces to its peers; empty = the local IP "
                      "that routes to the coordinator, with the bound port", commands=_W))
    workers: int = field(default=2, metadata=_doc("number of workers the coordinator waits for",
                                                  commands=_RCW))
    threads: int = field(default=2, metadata=_doc("lock-free Hogwild threads per worker",
                                                  commands=_TRW))
    engage: str = field(
        default="auto",
        metadata=_doc("how many of the started workers train: auto = as many as pay, one per "
                      "about 1M non-zeros of an epoch's training rows per thread and at most "
                      "64 in sync mode (and one per 10,000 rows, for block momentum), one per "
                      "3.3M and at most 8 in async mode "
                      "(more only where each would hold over 50M non-zeros), at least 2 (a "
                      "linear model; an MLP engages all); the others are released at the "
                      "start and exit 0, since past that width each worker added makes the run "
                      "slower; all = every worker", choices=ENGAGE_CHOICES, commands=_RC))
    mode: str = field(
        default="sync",
        metadata=_doc("sync = barrier per round; async = never wait for peers", choices=MODES,
                      commands=_RC))
    staleness: int | None = field(
        default=2,
        metadata=_doc("async only: wait when a peer is more than this many rounds behind "
                      "(2 = compute one round while the last one's deltas travel; null = "
                      "unbounded, which lets fast workers finish before their peers' deltas "
                      "arrive: a blend of models trained alone)", commands=_RC))
    round_size: int | None = field(
        default=None,
        metadata=_doc("examples each thread processes between two delta exchanges; null = "
                      "auto (about 2M non-zeros of work per thread, 5M with combine momentum "
                      "or average, and at least 4 per weight of the model: hashed features); "
                      "with combine momentum never more than a quarter epoch, "
                      "or up to a whole one where a thread's share of the epoch is under 5M "
                      "non-zeros (rounds of at least 1.25M); 1/max(4, 2(W-1)) of an epoch over all W workers with combine sum, "
                      "since deltas summed from too old a point overshoot, nor more than an "
                      "epoch with combine average",
                      commands=_RC))
    combine: str = field(
        default="auto",
        metadata=_doc("how the workers' deltas of a round add up: auto = momentum where "
                      "each worker holds at least 10,000 training rows, sum below; momentum "
                      "= each worker's change counts 1/W and a block momentum of 1 - 1/W "
                      "over the rounds (BMUF) moves the model as far as a sum would without "
                      "its overshoot, so rounds stay a quarter epoch at any W; sum = every "
                      "worker's steps count in full (HOGWILD! across nodes; needs rounds "
                      "that shrink as W grows); average = each counts 1/W (periodic model "
                      "averaging: stable, but slower to converge with many workers); see "
                      "docs/concepts/defaults.md",
                      choices=COMBINE_CHOICES, commands=_RC))
    topology: str = field(
        default="auto",
        metadata=_doc("auto = mesh up to 4 workers in sync mode (then tree) and up to 8 in "
                      "async mode (then star); "
                      "mesh = every worker sends its delta to every peer and the coordinator "
                      "(n(n+1) messages per round); star = workers send only to the "
                      "coordinator, which sends each one the sum of the others' deltas (2n); "
                      "tree = a k-ary tree rooted at the coordinator (tree_fanout): each edge "
                      "carries one sum up and one down per round (2n), depth O(log n), so no "
                      "node sends to more than k + 1 others",
                      choices=TOPOLOGY_CHOICES, commands=_RC))
    tree_fanout: int = field(
        default=4,
        metadata=_doc("topology tree: children per node (the coordinator included); worker i's "
                      "parent is worker i // k - 1 (-1: the coordinator)", commands=_RC))
    delta_threshold: float = field(
        default=0.0,
        metadata=_doc("send only delta entries with |value| at or above this; the rest stays "
                      "in the worker's residual for a later round (0 = off)", commands=_RC))
    delta_topk: int = field(
        default=0,
        metadata=_doc("send only the k largest |values| of each round's delta; the rest stays "
                      "in the residual (0 = off)", commands=_RC))
    delta_dtype: str = field(
        default="float32",
        metadata=_doc("type of delta values on the wire; float16 halves their bytes, the "
                      "rounding stays in the residual", choices=DELTA_DTYPES, commands=_RC))
    delta_norm_bound: float = field(
        default=0.0,
        metadata=_doc("refuse a delta whose L2 norm per round is more than this many times the "
                      "median over the senders of each one's recent median, and quarantine its "
                      "sender; checked by the coordinator (topology mesh, star) and by mesh "
                      "workers, which see each sender's own delta. For members not trusted: "
                      "honest deltas can stray far (right after a coordinator's resume they "
                      "were 3e7 times their recent median), so an honest worker may be refused "
                      "too; 20 refuses a member scaling its deltas by 100 (0 = off)",
                      commands=_RC))
    norm_clip: float = field(
        default=0.0,
        metadata=_doc("topology star only: a robust combine for members not trusted; the "
                      "coordinator scales each worker's delta down to at most this many times "
                      "the median norm per round of recent deltas before it sums and relays "
                      "it (0 = off; e.g. 3)", commands=_RC))
    # --- deadlines (seconds) --------------------------------------------------------------
    register_timeout: float = field(
        default=120.0, metadata=_doc("how long the coordinator waits for all workers to register "
                                     "(resumed: then it goes on with those back)",
                                     commands=_RCW))
    barrier_timeout: float = field(
        default=10.0,
        metadata=_doc("sync mode: how long a worker waits for a peer's round before dropping it",
                      commands=_RCW))
    rpc_timeout: float = field(default=10.0, metadata=_doc("deadline of every RPC", commands=_RCW))
    connect_timeout: float = field(
        default=120.0,
        metadata=_doc("how long a worker retries registering before it gives up", commands=_RW))
    stall_warning_after: float = field(
        default=30.0,
        metadata=_doc("seconds without any delta after which the coordinator warns that "
                      "training may be stalled (at least 4 barrier_timeouts and 10 times the "
                      "longest gap between deltas so far); it warns again after twice and four "
                      "times as long, and at the third warning ends the run (stop reason "
                      "stalled, exit 4)", commands=_RC))
    # --- model -------------------------------------------------------------------------
    loss: str = field(
        default="hinge",
        metadata=_doc("hinge (SVM), logistic or squared (linear regression)", choices=LOSSES,
                      commands=_TRC))
    learning_rate: float = field(
        default=0.5, metadata=_doc("initial step size gamma (a sync cluster whose block "
                                   "momentum has K rounds an epoch steps W/(4K) times as far "
                                   "on its W workers, where that is over 1)",
                                   commands=_TRC))
    lr_schedule: str = field(
        default="inverse",
        metadata=_doc("inverse = gamma / (1 + epochs done), decaying with every example "
                      "(converges steadily); constant = gamma, multiplied by lr_decay after "
                      "each epoch; invscaling = gamma / t^power_t, t = examples seen",
                      choices=SCHEDULES, commands=_TRC))
    lr_decay: float = field(default=0.9, metadata=_doc("beta: step size multiplier per epoch",
                                                       commands=_TRC))
    power_t: float = field(default=0.5, metadata=_doc("exponent of the invscaling schedule",
                                                      commands=_TRC))
    l2: float = field(
        default=1e-5, metadata=_doc("L2 regularisation, applied to the touched weights only",
                                    commands=_TRC))
    fit_bias: bool = field(default=True, metadata=_doc("learn an intercept", commands=_TRC))
    trainer: str = field(
        default="hogwild",
        metadata=_doc("in-node threading: hogwild (lock-free), locked (one lock), serial, or "
                      "syncsgd (threads share each mini-batch of batch_size rows, one update "
                      "per mini-batch)", choices=TRAINER_MODES, commands=_T))
    batch_size: int = field(
        default=1,
        metadata=_doc("rows per SGD step; 1 = per-example HOGWILD!, B > 1 = each thread "
                      "applies the mean gradient of B rows at once (workers always step per "
                      "example)", commands=_T))
    device: str = field(
        default="cpu",
        metadata=_doc("where train, or this worker, trains: cpu (threads) or cuda / "
                      "cuda:N (a CUDA GPU, numba.cuda: a warp per example, lock-free atomic "
                      "updates; train: one kernel launch per epoch, a worker: one per round "
                      "of threads x round_size rows; run gives it to every local worker, "
                      "or with cuda:N,M,... one GPU to each in turn, and keeps its "
                      "coordinator on the CPU; model linear, or mlp with at "
                      "most 256 hidden units in all; trainer hogwild or serial, "
                      "batch_size 1, not with multiclass data or out_of_core; "
                      "needs the gpu extra: pip install '.[gpu]' from a clone, and a CUDA "
                      "driver)", commands=_TRW))
    thread_buffer: bool = field(
        default=True,
        metadata=_doc("hogwild threads buffer their writes and publish them to the shared "
                      "weights every 64 rows or more (features renumbered by frequency, the "
                      "hottest published most often); false = every write goes straight to the "
                      "shared vector, which contends on frequent features", commands=_TRC))
    model: str = field(
        default="linear",
        metadata=_doc("linear, or mlp: a sparse-input MLP (an embedding-bag first layer over "
                      "the row's features, ReLU hidden layers, a linear output) trained with the "
                      "same losses and Hogwild threads", choices=MODEL_KINDS,
                      commands=_TRC))
    hidden: tuple[int, ...] = field(
        default=(64,),
        metadata=_doc("model mlp: sizes of the hidden layers, e.g. [64] or [128, 32]; the "
                      "first is the width of the embedding of each feature", commands=_TRC))
    binary_features: bool = field(
        default=False,
        metadata=_doc("model mlp: treat every stored value as 1 (skips the multiplications "
                      "of the first layer)", commands=_TRC))
    deep_lr_scale: float = field(
        default=0.01,
        metadata=_doc("model mlp: step size of the deep part (hidden and output layers, "
                      "embeddings) as a multiple of the wide part's, which is learning_rate "
                      "with its schedule; the default was chosen on validation data of the "
                      "bundled sets, where the deep part added no accuracy (see "
                      "docs/guides/mlp.md); raise it (0.2-1) when the features interact",
                      commands=_TRC))
    initial_model: str = field(
        default="",
        metadata=_doc("warm start: a saved model (run directory, its model.npz / model.json, "
                      "or runs/latest) whose weights training starts from instead of zeros "
                      "(or the MLP's random start); its model kind, loss, task, classes, "
                      "feature count and hashing must be this run's, else the run is refused "
                      "(empty = none)", commands=_TRC))
    class_weight: str = field(
        default="",
        metadata=_doc("weight of each class's rows in the loss: balanced = n_rows / (classes "
                      "x rows of the class), counted on the training rows (as scikit-learn's "
                      "class_weight='balanced'), or LABEL:WEIGHT pairs with the labels as the "
                      "data writes them, e.g. 1:2.0,-1:1.0 (a label not named weighs 1); each "
                      "row's gradient is scaled by its weight. Classifiers (hinge, logistic) "
                      "of model linear on the CPU; cluster runs give the weights to every "
                      "worker (balanced counts the coordinator's training rows, so not with "
                      "shipping local); empty = every row weighs 1", commands=_TRC))
    multiclass: str = field(
        default="ovr",
        metadata=_doc("data with more than two label values: ovr = one-vs-rest, one weight "
                      "vector per class, predicting the class of the highest score (train only: "
                      "run and coordinator refuse multiclass data)", choices=MULTICLASS_MODES,
                      commands=_T))
    # --- stopping ------------------------------------------------------------------------
    epochs: int = field(default=10, metadata=_doc("maximum passes over the training data",
                                                  commands=_TRC))
    time_budget: float = field(
        default=0.0, metadata=_doc("stop after this many seconds of training (0 = no limit)",
                                   commands=_TRC))
    target_loss: float | None = field(
        default=None, metadata=_doc("stop once validation loss is at or below this (null = off)",
                                    commands=_TRC))
    patience: int = field(
        default=3,
        metadata=_doc("early stopping: evaluations without validation-loss improvement "
                      "(0 = off)", commands=_TRC))
    swing_tolerance: float | None = field(
        default=0.02,
        metadata=_doc("cluster runs: when the validation accuracy falls more than this (and "
                      "than its noise) below the best seen, the coordinator halves every "
                      "worker's step size and, async, bounds the staleness at 1, and says so "
                      "(at most 4 times; without an accuracy, a validation loss a quarter above the "
                      "best does it); null = never act (the best model is saved either way)",
                      commands=_RC))
    min_delta: float = field(
        default=1e-4, metadata=_doc("smallest validation-loss decrease that counts as progress",
                                    commands=_TRC))
    eval_interval: float = field(
        default=0.25, metadata=_doc("seconds between the coordinator's validation evaluations",
                                    commands=_RC))
    trace_interval: float = field(
        default=0.0, metadata=_doc("seconds between copies of the global model kept while the "
                                   "workers train and scored after, into trace.jsonl: a fine "
                                   "learning curve that takes them no CPU (0 = off)",
                                   commands=_RC))
    # --- data ----------------------------------------------------------------------------
    data: str = field(
        default="bundled:spamassassin",
        metadata=_doc("training data: a svmlight/LIBSVM file (.gz ok), bundled:NAME, "
                      "synthetic:rcv1[?rows=N&...], synthetic:seed000[?...] or "
                      "lyrl2004:VECTORS[,VECTORS...]@QRELS[#TOPIC]", commands=_TRC))
    test_data: str = field(
        default="",
        metadata=_doc("test data in the same forms; empty = the bundled set's own test file, "
                      "or a test_fraction split of data", commands=_TRC))
    n_features: int | None = field(
        default=None, metadata=_doc("feature count (null = largest index seen)", commands=_TRC))
    zero_based: bool = field(default=False, metadata=_doc("feature ids in files start at 0",
                                                          commands=_TRC))
    val_fraction: float = field(
        default=0.1, metadata=_doc("share of the training data held out for validation",
                                   commands=_TRC))
    test_fraction: float = field(
        default=0.2, metadata=_doc("share held out for test when test_data is empty",
                                   commands=_TRC))
    seed: int = field(default=0, metadata=_doc("seed of splits, shards and sampling",
                                               commands=_TRC))
    shipping: str = field(
        default="partition",
        metadata=_doc("partition = disjoint shard per worker; replicate = whole train set "
                      "to every worker; local = every worker reads its own row ranges of the "
                      "data file (a path on a volume every node mounts, or an fsspec URL), or "
                      "its own row groups of a parquet: source, the coordinator ships none",
                      choices=SHIPPING, commands=_RC))
    local_plan: str = field(
        default="auto",
        metadata=_doc("shipping local: how the coordinator plans the workers' ranges. scan = "
                      "read the whole file (exact counts; held-out rows anywhere in it); "
                      "sample = read a bounded part: byte ranges whose rows the workers "
                      "count, held-out rows from windows of at most 64 MiB of the file "
                      "(fewer than val_fraction + test_fraction of a larger file), the "
                      "feature order and labels from them (needs n_features); auto = sample "
                      "for plain text of 1 GiB and more with n_features known (given, or a "
                      "bundled set), else scan. A parquet: source is always planned from its "
                      "footers and a sample", choices=LOCAL_PLANS, commands=_RC))
    local_data: str = field(
        default="",
        metadata=_doc("shipping local: where this worker reads the training file (a path or "
                      "URL); empty = where the coordinator reads it (its data; a path made "
                      "absolute). Set it where the shared volume is mounted elsewhere on this "
                      "node (parquet: its mount of the file or directory data names); the "
                      "files must be the same (their ranges are checked by digest)",
                      commands=_W))
    chunk_bytes: int = field(
        default=1 << 20, metadata=_doc("largest shard chunk on the wire (at most 1 MiB)",
                                       commands=_RCW))
    data_cache: bool = field(
        default=True,
        metadata=_doc("keep the parsed arrays of text data files under the user cache dir "
                      "($XDG_CACHE_HOME/hogwild or ~/.cache/hogwild), keyed by each file's "
                      "absolute path, size and mtime", commands=_TRC))
    out_of_core: bool = field(
        default=False,
        metadata=_doc("train from disk, for data larger than memory: train from the cache "
                      "(blocks in a random order, rows shuffled within one), a worker (shipping "
                      "local) from its rows shuffled into the cache dir and mapped", commands=_TRW))
    # --- security ------------------------------------------------------------------------
    tls_ca: str = field(
        default="",
        metadata=_doc("PEM file of the CA every certificate must chain to; with tls_cert and "
                      "tls_key it turns on mutual TLS on every connection (empty = plain text)",
                      commands=_RCW))
    tls_cert: str = field(
        default="", metadata=_doc("PEM certificate this process presents (server and client)",
                                    commands=_RCW))
    tls_key: str = field(default="", metadata=_doc("PEM private key of tls_cert",
                                                                  commands=_RCW))
    tls_server_name: str = field(
        default="",
        metadata=_doc("name a server's certificate must carry (empty = the host of the address "
                      "dialled); set it when peers are reached by IP addresses the certificates "
                      "do not list", commands=_RCW))
    insecure: bool = field(
        default=False,
        metadata=_doc("let `hogwild coordinator` and `hogwild worker` serve plain text when no "
                      "tls_* files are set (they refuse to start otherwise: anyone who reaches "
                      "a plain-text port can register and learn the run's keys); `hogwild run` "
                      "then uses no throw-away credentials either. No effect with TLS files",
                      commands=_RCW))
    auth_token: str = field(
        default="",
        metadata=_doc("shared run token every call must carry (empty = none); prefer "
                      "auth_token_file or HOGWILD_AUTH_TOKEN over a flag, which others can see",
                      commands=_RCW))
    auth_token_file: str = field(
        default="",
        metadata=_doc("file holding the shared run token (whitespace around it ignored)",
                      commands=_RCW))
    reflection: bool = field(
        default=False, metadata=_doc("serve gRPC server reflection (off: it lists the API)",
                                    commands=_CW))
    health_port: int | None = field(
        default=None,
        metadata=_doc("also serve grpc.health.v1 alone, in plain text and without a token, on "
                      "this port (for probes that cannot do TLS, e.g. Kubernetes'); null = off",
                      commands=_CW))
    # --- output --------------------------------------------------------------------------
    out_dir: str = field(
        default="runs", metadata=_doc("runs directory: each run writes its model, metrics and "
                                      "plot to a directory of its own in it (TIME-ID, "
                                      "TIME-ID.incomplete until every file is written) and "
                                      "then points out_dir/latest at it", commands=_TRC))
    keep_runs: int = field(
        default=20,
        metadata=_doc("when a run is published, remove the oldest complete runs of out_dir "
                      "beyond this many (0 = keep every run); only directories named as runs "
                      "(TIME-ID) that hold a run's files, never the one just written nor the "
                      "one out_dir/latest names, nor incomplete ones (rename a run to keep "
                      "it); `hogwild runs list|prune` do the same by hand", commands=_TRC))
    final_states: str = field(
        default="none",
        metadata=_doc("write each worker's final model beside the global one in the run's "
                      "final_states/ (worker-ID.npz, global.npz): none = no file (the counters "
                      "are in metrics.json either way); compact = the non-zero weights as "
                      "int32/int64 indices and float32 values", choices=FINAL_STATES,
                      commands=_RC))
    checkpoint_interval: float = field(
        default=10.0,
        metadata=_doc("seconds between the coordinator's checkpoints (global model, counters, "
                      "evaluations) in the run's directory (checkpoint.npz); 0 = none",
                      commands=_RC))
    on_sigterm: str = field(
        default="finish",
        metadata=_doc("what SIGTERM makes the coordinator do: finish = stop the workers, "
                      "write the outputs, exit 0 (130 before training: nothing to write); "
                      "checkpoint = write a checkpoint, send the workers to register again, "
                      "exit 143, for a supervisor that starts a coordinator with `resume` "
                      "(Kubernetes); SIGUSR1 always finishes", choices=SIGTERM_ACTIONS,
                      commands=_C))
    resume: str = field(
        default="",
        metadata=_doc("continue the run checkpointed in this directory (its checkpoint.npz), "
                      "or, given a runs directory (out_dir), its newest incomplete run that "
                      "has one; none found starts a new run; empty = a new run",
                      commands=("coordinator",)))
    metrics_port: int | None = field(
        default=None,
        metadata=_doc("serve Prometheus metrics (rounds, examples, deltas and bytes, staleness; "
                      "the coordinator's also validation loss and accuracy, dropped workers) "
                      "over HTTP at /metrics on bind_host and this port (HTTPS with "
                      "metrics_tls; without metrics_token_file anyone who reaches the port can "
                      "read them); 0 = any free port (logged); null = off. `hogwild run` gives "
                      "it to the coordinator and any free port to each worker", commands=_RCW))
    metrics_linger: float = field(
        default=0.0,
        metadata=_doc("seconds /metrics keeps serving after the process's work is done, so a "
                      "scrape sees the final counters of a short run (0 = close at once)",
                      commands=_RCW))
    metrics_token_file: str = field(
        default="",
        metadata=_doc("file holding the token (whitespace around it ignored) every request to "
                      "/metrics must carry as `Authorization: Bearer TOKEN`: 401 without it; "
                      "empty = no token, for trusted networks only", commands=_RCW))
    metrics_tls: bool = field(
        default=False,
        metadata=_doc("serve /metrics over HTTPS with the process's tls_cert and tls_key "
                      "(clients present no certificate); off = plain HTTP", commands=_RCW))
    tensorboard_dir: str = field(
        default="",
        metadata=_doc("also write the validation loss and accuracy of every evaluation as "
                      "TensorBoard scalars under this directory, one subdirectory per run "
                      "(needs the tensorboard extra: pip install '.[tensorboard]' from a clone); empty = off", commands=_TRC))
    log_level: str = field(
        default="info", metadata=_doc("debug, info, warning or error", choices=LOG_LEVELS))

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated."""
        return build({**dataclasses.asdict(self), **changes}, source="override")

    def for_run(self, train_rows: int | None = None, train_nnz: int | None = None,
                threads: int | None = None) -> Settings:
        """These settings as a run uses them: once the training non-zeros are known
        (``train_nnz``) ``workers`` the workers ``engage: auto`` trains on (of ``threads``
        each, the workers' own count where known, else ``threads``), ``topology: auto`` made
        the topology it stands for with them, and once the training rows are known
        (``train_rows``) ``combine: auto`` the combine rule."""
        changes: dict[str, Any] = {}
        workers = self.workers
        if train_nnz is not None:
            workers = engaged_workers(self.engage, self.workers, threads or self.threads,
                                      train_nnz, self.model, self.mode, train_rows)
            if workers != self.workers:
                changes["workers"] = workers
        topology = resolve_topology(self.topology, workers, self.mode)
        if topology != self.topology:
            changes["topology"] = topology
        if train_rows is not None:
            combine = resolve_combine(self.combine, train_rows, workers)
            if combine != self.combine:
                changes["combine"] = combine
        return self.replace(**changes) if changes else self


FIELDS = {f.name: f for f in fields(Settings)}
KEYS: tuple[str, ...] = tuple(FIELDS)


def default(key: str) -> Any:
    """The default of setting ``key`` (for code that fills in a value the wire left out)."""
    return FIELDS[key].default


def help_text(key: str) -> str:
    """The documentation of one setting."""
    return str(FIELDS[key].metadata["help"])


def commands(key: str) -> tuple[str, ...]:
    """The subcommands that use a setting (every one of COMMANDS when the field names none)."""
    value = FIELDS[key].metadata.get("commands")
    return tuple(value) if value is not None else COMMANDS


def used_by(key: str, command: str) -> bool:
    """Whether ``command`` reads the setting ``key``."""
    return command in commands(key)


def choices(key: str) -> tuple[str, ...] | None:
    """The allowed values of a setting with a closed set of values, else None."""
    value = FIELDS[key].metadata.get("choices")
    return tuple(value) if value is not None else None


def is_switch(key: str) -> bool:
    """Whether a setting is true/false (a --name / --no-name flag)."""
    return base_type(key)[0] is bool


def default_text(key: str) -> str:
    """A setting's built-in default as settings.yaml writes it (true, null, [64], "")."""
    value = FIELDS[key].default
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if value == "":
        return '""'
    return str(yaml.safe_dump(value, default_flow_style=True)).removesuffix("\n...\n").strip()


def base_type(key: str) -> tuple[type, bool]:
    """(python type, optional?) of a setting, from its annotation string."""
    annotation = str(FIELDS[key].type)
    optional = annotation.endswith(" | None")
    name = annotation.removesuffix(" | None")
    return {"str": str, "int": int, "float": float, "bool": bool,
            "tuple[int, ...]": tuple}[name], optional


def coerce(key: str, value: Any, source: str) -> Any:
    """Check one value against its field type; text (env, flags) is read as YAML first."""
    if key not in FIELDS:
        raise ConfigError(key, f"unknown setting (from {source}); known: {', '.join(KEYS)}")
    kind, optional = base_type(key)
    return read_as(key, value, source, kind, optional)


def check_values(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``values`` (any settings, by key, from ``source``) read as their types and checked by
    the schema's choices, bounds and cross-key rules (a key not given counts as its default):
    the one check of settings, and of their copies elsewhere; ConfigError names the key."""
    clean = {key: coerce(key, value, source) for key, value in values.items()}
    for key, value in clean.items():
        if (allowed := choices(key)) is not None and value not in allowed:
            raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {value!r}")
        if (rule := RULES.get(key)) is not None and value is not None and not rule[0](value):
            raise ConfigError(key, f"{rule[1]}, got {value!r}")
    check_together(clean)
    return clean


def build(values: Mapping[str, Any], source: str) -> Settings:
    """A validated Settings from ``values`` (see check_values), from ``source``."""
    return Settings(**check_values(values, source))
