"""The `hogwild` command: parse arguments, load the settings, build the role, run it."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hogwild import __version__, config
from hogwild.config import Settings
from hogwild.engine.network import DEFAULT_SPEED, LATENCIES, Network
from hogwild.errors import ConfigError, DataError, HogwildError, UsageError
from hogwild.outputs import console

if TYPE_CHECKING:
    from hogwild.outputs.plotter import BackgroundPlot

log = logging.getLogger("hogwild")

# Short spellings of the most used settings, per command (flag -> setting key).
_ALIASES: dict[str, dict[str, str]] = {
    "train": {"--test": "test_data", "--out": "out_dir", "--tensorboard": "tensorboard_dir"},
    "run": {"--test": "test_data", "--out": "out_dir", "--tensorboard": "tensorboard_dir"},
    "simulate": {"--test": "test_data", "--out": "out_dir"},
    "coordinator": {"--port": "coordinator_port", "--test": "test_data", "--out": "out_dir",
                    "--tensorboard": "tensorboard_dir"},
    "worker": {"--port": "worker_port", "--advertise": "advertise_address",
               "--coordinator": "coordinator_address"},
}

_DESCRIPTIONS = {
    "train": "train on this machine: T lock-free Hogwild threads in one process",
    "run": "start a coordinator and N workers as local processes on loopback and train",
    "coordinator": "serve the coordinator: load and split data, ship shards, evaluate, stop",
    "worker": "serve a worker: register, receive a shard, train, exchange deltas with peers",
    "simulate": "simulate `run` with W virtual workers in one process: simulated machine "
                "speeds and network delays, the same round engine, deterministic for a seed",
}
# The settings a command follows are those of another (simulate: a run's).
_SETTINGS_OF = {"simulate": "run"}


_YES, _NO = ("true", "yes", "on"), ("false", "no", "off")


class _HelpFormatter(argparse.HelpFormatter):
    """--help shows each option's default, unless its text already says it or there is none
    to show (None, a bare switch that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        if (not text or text is argparse.SUPPRESS or not action.option_strings
                or "default" in text or default in (None, "") or default is argparse.SUPPRESS
                or (action.nargs == 0 and default is False)):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An argument parser (and, through add_subparsers, every subcommand's) that takes no
    abbreviations (``--epoch`` is not ``--epochs``) and shows defaults in --help.

    Switches are ``--name`` / ``--no-name``; ``--name true|false`` (or ``--name=false``),
    the spelling of earlier versions and of command lines that pass settings as text, is
    read as one of the two."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._switch_values(words), namespace)

    def _switch_values(self, words: list[str]) -> list[str]:
        switches = {flag for action in self._actions
                    if isinstance(action, argparse.BooleanOptionalAction)
                    for flag in action.option_strings if not flag.startswith("--no-")}
        out: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--":
                out += words[i:]
                break
            flag, eq, value = word.partition("=")
            if flag in switches:
                if not eq and i + 1 < len(words) and words[i + 1].lower() in _YES + _NO:
                    eq, value = "=", words[i + 1]
                    i += 1
                if eq:
                    if value.lower() not in _YES + _NO:
                        self.error(f"argument {flag}: expected true or false, got {value!r} "
                                   f"(or write {flag} / --no-{flag[2:]})")
                    word = flag if value.lower() in _YES else f"--no-{flag[2:]}"
            out.append(word)
            i += 1
        return out


def _add_setting_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """One --flag per setting (help from the settings schema), plus the command's aliases.

    Settings the command does not use are still accepted (a shared command line or the
    launcher may pass them) but hidden from --help; :func:`ignored_flags` names them."""
    parser.add_argument("--config", metavar="PATH",
                        help="settings file (default: $HOGWILD_CONFIG, else ./settings.yaml "
                             "if present, else built-in defaults)")
    aliases = {key: flag for flag, key in _ALIASES.get(command, {}).items()}
    command = _SETTINGS_OF.get(command, command)
    group = parser.add_argument_group("settings (override settings.yaml and HOGWILD_* variables)")
    for key in config.KEYS:
        flags = [f"--{key.replace('_', '-')}"]
        if key in aliases:
            flags.insert(0, aliases[key])
        allowed = config.choices(key)
        shown = (f"{config.help_text(key)} (default: {config.default_text(key)})"
                 if config.used_by(key, command) else argparse.SUPPRESS)
        if config.is_switch(key):
            # --name / --no-name; None when not given, so that the file and HOGWILD_* apply.
            group.add_argument(*flags, dest=f"setting_{key}", default=None, help=shown,
                               action=argparse.BooleanOptionalAction)
            continue
        group.add_argument(*flags, dest=f"setting_{key}", metavar=key.upper() if not allowed
                           else "{" + ",".join(allowed) + "}", help=shown)


# Commands whose result --json prints as one object on standard output.
_JSON_RESULT = ("train", "run", "coordinator", "predict", "eval")
# Commands a person starts and watches: their info logs (data cache reads, round sizes) show
# with -v or an explicit log_level; servers (coordinator, worker) keep theirs for operators.
_INTERACTIVE = ("train", "run", "simulate")


def _add_output_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """-q / -v (and --json where the command has one result to print)."""
    group = parser.add_argument_group("output")
    level = group.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true",
                       help="print only errors and the final result line")
    level.add_argument("-v", "--verbose", action="store_true",
                       help="print every progress row and debug logs")
    if command in _JSON_RESULT and command != "eval":  # eval's --json is documented with it
        what = ("the run's metrics (as metrics.json has them)" if command != "predict"
                else "the summary (rows, metrics); needs --out for the predictions")
        group.add_argument("--json", action="store_true",
                           help=f"print {what} as one JSON object on standard output; "
                                "human lines go to standard error")


def verbosity_of(args: argparse.Namespace) -> console.Verbosity:
    """The command line's -q / -v / --json (normal, no JSON, for commands without them)."""
    level = (console.QUIET if getattr(args, "quiet", False)
             else console.VERBOSE if getattr(args, "verbose", False) else console.NORMAL)
    return console.Verbosity(level, bool(getattr(args, "json", False)))


def log_level_of(settings: Settings, args: argparse.Namespace,
                 environ: Mapping[str, str]) -> str:
    """The log level a command runs at: -q errors only, -v debug; the interactive commands
    show warnings and errors unless log_level was given as a flag or HOGWILD_LOG_LEVEL."""
    level = verbosity_of(args).level
    if level == console.QUIET:
        return "error"
    if level == console.VERBOSE:
        return "debug"
    if (args.command in _INTERACTIVE and settings.log_level == "info"
            and getattr(args, "setting_log_level", None) is None
            and "HOGWILD_LOG_LEVEL" not in environ):
        return "warning"
    return settings.log_level


def _add_simulation_flags(parser: argparse.ArgumentParser) -> None:
    """The simulated machines and network (the run's own settings come from the schema)."""
    net = Network()
    group = parser.add_argument_group("simulated machines and network")
    group.add_argument("--speed", type=float, default=DEFAULT_SPEED, metavar="NNZ_PER_S",
                       help="non-zeros one training thread processes per second")
    group.add_argument("--speeds", default="", metavar="LIST",
                       help="one speed per worker, comma-separated (overrides --speed)")
    group.add_argument("--speed-spread", type=float, default=0.0, metavar="SIGMA",
                       help="scatter the workers' speeds log-normally with this sigma "
                            "(seeded): stragglers")
    group.add_argument("--latency", type=float, default=net.latency, metavar="SECONDS",
                       help="mean time a message is in flight, per hop")
    group.add_argument("--jitter", choices=LATENCIES, default=net.jitter,
                       help="latency distribution: fixed, exponential, or uniform on "
                            "[0, 2 x latency]")
    group.add_argument("--overhead", type=float, default=net.overhead, metavar="SECONDS",
                       help="sender time per message (encoding, TLS, the RPC)")
    group.add_argument("--bandwidth", type=float, default=net.bandwidth, metavar="BYTES_PER_S",
                       help="bytes per second out of one node")
    group.add_argument("--slices", type=int, default=4, metavar="N",
                       help="steps per round between which arrived deltas are applied")
    group.add_argument("--evals-per-epoch", type=float, default=4.0, metavar="N",
                       help="validation evaluations of the coordinator's model per epoch")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used by tests to check deployment command lines)."""
    parser = _Parser(
        prog="hogwild",
        description="Sparse linear models trained with HOGWILD! lock-free SGD, "
                    "on one machine or across many over gRPC.")
    parser.add_argument("--version", action="version", version=f"hogwild {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in ("train", "run", "coordinator", "worker", "simulate"):
        cmd = sub.add_parser(command, help=_DESCRIPTIONS[command],
                             description=_DESCRIPTIONS[command])
        _add_setting_flags(cmd, command)
        if command != "worker":
            _add_output_flags(cmd, command)
        if command == "run":
            cmd.add_argument("--keep-going", action="store_true",
                             help="do not stop the other processes when a worker fails")
        if command == "simulate":
            _add_simulation_flags(cmd)

    gen = sub.add_parser("gen-data", help="write a synthetic data set as svmlight text",
                         description="write a synthetic data set as svmlight text (.gz by suffix)")
    gen.add_argument("kind", choices=("rcv1", "seed000"),
                     help="rcv1: RCV1-shaped tf-idf rows; seed000: uniform sparse rows")
    gen.add_argument("--rows", type=int, default=100_000, help="number of rows")
    gen.add_argument("--features", type=int, default=None,
                     help="feature count (default 47236 for rcv1, 1000000 for seed000)")
    gen.add_argument("--noise", type=float, default=None, help="share of flipped labels")
    gen.add_argument("--min-nnz", type=int, default=None, help="seed000: fewest non-zeros per row")
    gen.add_argument("--max-nnz", type=int, default=None, help="seed000: most non-zeros per row")
    gen.add_argument("--binary", action="store_true", help="seed000: all values 1.0")
    gen.add_argument("--seed", type=int, default=0, help="random seed")
    gen.add_argument("--test-rows", type=int, default=0,
                     help="also write this many test rows (same separator) to OUT's .test twin")
    gen.add_argument("--out", required=True, metavar="FILE", help="output file (.gz to compress)")

    analyze = sub.add_parser(
        "analyze", help="conflict statistics of a data set and a safe HOGWILD! concurrency",
        description="feature popularity, the row conflict graph (Ω, Δ, ρ) and the safe number "
                    "of examples in flight, τ <= n/(2Δ), as threads x workers x round size")
    analyze.add_argument("data", metavar="DATA", help="a data source, as the `data` setting")
    analyze.add_argument("--threads", type=int, default=2, help="threads per worker")
    analyze.add_argument("--workers", type=int, default=1, help="workers")
    analyze.add_argument("--round-size", type=int, default=1,
                         help="examples per thread between exchanges")
    analyze.add_argument("--zero-based", action=argparse.BooleanOptionalAction, default=None,
                         help="svmlight ids start at 0 (default: off)")
    analyze.add_argument("--exact-budget", type=int, default=None,
                         help="largest Σ df(f)² for an exact conflict graph (default 4e8)")
    analyze.add_argument("--sample-rows", type=int, default=None,
                         help="rows whose degree is estimated when sampling (default 1000)")
    analyze.add_argument("--partners", type=int, default=None,
                         help="rows each sampled row is checked against (default 4096)")
    analyze.add_argument("--seed", type=int, default=0, help="sampling seed")
    analyze.add_argument("--json", action="store_true", help="print the statistics as JSON")

    from hogwild.experiment.command import add_arguments as experiment_arguments

    experiment = sub.add_parser(
        "experiment", help="reproduce the HOGWILD! paper's comparisons: threads, trainers, "
        "data sizes, mini-batch sizes; writes runs.csv, runs.jsonl and plots",
        description="sweep threads x trainers (hogwild, locked, serial, syncsgd), data sizes, "
                    "mini-batch sizes, a regression set and optionally cluster workers; "
                    "writes runs.csv, runs.jsonl, summary.txt and plots/*.png under --out")
    experiment_arguments(experiment)

    hsh = sub.add_parser(
        "hash", help="hash a CSV/TSV file's categorical, text and numeric columns to svmlight",
        description="feature hashing of a CSV/TSV file (header line required): one-hot for "
                    "categorical columns of up to --onehot-max values, signed hashing (xxh3) "
                    "into 2**18 buckets for larger ones and for text (--buckets sqrt: about "
                    "sqrt(distinct) buckets), numeric columns as values; writes OUT and "
                    "OUT.hashing.json")
    hsh.add_argument("input", metavar="IN", help="CSV or TSV file (.gz ok)")
    hsh.add_argument("--out", required=True, metavar="FILE", help="svmlight output (.gz ok)")
    hsh.add_argument("--label", help="label column (numeric)")
    hsh.add_argument("--categorical", default="", metavar="A,B", help="categorical columns")
    hsh.add_argument("--text", default="", metavar="A,B", help="text columns (word counts)")
    hsh.add_argument("--numeric", default=None, metavar="A,B",
                     help="numeric columns (default: every column not named otherwise)")
    hsh.add_argument("--ignore", default="", metavar="A,B", help="columns to leave out")
    hsh.add_argument("--hash-bits", type=int, default=None,
                     help="2**B buckets per sub-block of a hashed column (default: 18)")
    hsh.add_argument("--buckets", choices=("bits", "sqrt"), default="bits",
                     help="bits: 2**hash_bits signed buckets; sqrt: about sqrt(distinct values) "
                          "unsigned buckets, k=2 (small blocks, e.g. for an MLP's first layer)")
    hsh.add_argument("--k", type=int, default=None,
                     help="hashes (sub-blocks) per value, 1-4 (default: 1; 2 with --buckets "
                          "sqrt)")
    hsh.add_argument("--onehot-max", type=int, default=2 ** 16,
                     help="one-hot for categorical columns with at most this many values")
    hsh.add_argument("--scale", choices=("maxabs", "none"), default="maxabs",
                     help="maxabs: numeric columns divided by their largest magnitude; "
                          "none: as they are")
    hsh.add_argument("--sep", default=None,
                     help="field separator (default: tab for .tsv/.tab, else comma)")
    hsh.add_argument("--seed", type=int, default=0, help="hash seed")
    hsh.add_argument("--params", default=None, metavar="JSON",
                     help="hash with these parameters (OUT.hashing.json of an earlier run, or "
                          "a model.json) instead of fitting new ones")

    health = sub.add_parser("health", help="ask a server's grpc.health.v1 service if it is serving",
                            description="exit 0 if the server at ADDRESS reports SERVING, else 1")
    health.add_argument("address", metavar="ADDRESS", help="host:port of a coordinator or worker")
    health.add_argument("--timeout", type=float, default=3.0, help="deadline in seconds")
    health.add_argument("--service", default="",
                        help="service name to ask about (default: the whole server)")
    health.add_argument("--tls", action="store_true",
                        help="connect with mutual TLS, using tls_ca/tls_cert/tls_key from "
                             "$HOGWILD_CONFIG or ./settings.yaml and HOGWILD_TLS_* variables")

    certs = sub.add_parser("certs", help="write a development CA, per-role certificates and a "
                                         "run token for mutual TLS",
                           description="write ca.crt, coordinator/worker/client certificates "
                                       "and keys (0600) and a random token into --out")
    certs.add_argument("--out", required=True, metavar="DIR", help="output directory")
    certs.add_argument("--hosts", default="", metavar="H1,H2,...",
                       help="names (DNS, *.wildcard, or IP) the coordinator and workers are "
                            "reached by; localhost and 127.0.0.1 are always added")
    certs.add_argument("--days", type=int, default=365, help="validity in days")
    certs.add_argument("--force", action="store_true", help="replace existing files")
    _add_model_commands(sub)
    return parser


def _add_model_commands(sub: Any) -> None:
    """`predict`, `eval` and `inspect`: use a saved model (they take no settings)."""
    predict = sub.add_parser(
        "predict", help="predict a data file with a saved model",
        description="one prediction per line (the label, --raw margin or --proba probability); "
                    "accuracy and loss when the file's labels fit the model")
    evaluate = sub.add_parser(
        "eval", help="every metric of a saved model on a labelled data file",
        description="accuracy, precision, recall, F1, ROC AUC (classification) or RMSE, MAE, "
                    "R^2 (regression), and the model's loss")
    inspect = sub.add_parser(
        "inspect", help="a saved model's summary and its largest positive and negative weights",
        description="feature count, nonzero weights, bias, norm (an MLP's layer shapes) and "
                    "the top weights, each named: the feature id, or for a model trained on a "
                    "csv: source the column and value it stands for")
    inspect.add_argument("model", metavar="MODEL",
                         help="run directory (runs/latest), or its model.npz / model.json")
    inspect.add_argument("--top", type=int, default=10, metavar="N",
                         help="weights shown of each sign (0: the summary only)")
    inspect.add_argument("--json", action="store_true", help="one JSON object on stdout")
    for name, cmd in (("predict", predict), ("eval", evaluate)):
        _add_output_flags(cmd, name)
        cmd.add_argument("--model", required=True, metavar="DIR|model.npz",
                         help="run directory, or its model.npz / model.json")
        cmd.add_argument("--data", required=True, metavar="FILE",
                         help="svmlight file (.gz ok) or bundled:NAME[/test], synthetic:...")
        cmd.add_argument("--threads", type=int, default=None,
                         help="scoring threads (default: one per core, at most 8)")
        cmd.add_argument("--zero-based", action=argparse.BooleanOptionalAction, default=None,
                         help="feature ids start at 0 (default: as when the model was trained)")
    predict.add_argument("--out", metavar="FILE", default=None,
                         help="write the predictions here (default: standard output)")
    kind = predict.add_mutually_exclusive_group()
    kind.add_argument("--raw", action="store_true", help="the margin w.x + b instead of a label")
    kind.add_argument("--proba", action="store_true",
                      help="the probability of the positive class (logistic models only)")
    predict.add_argument("--metrics", action="store_true",
                         help="print every metric, not only accuracy and loss")
    evaluate.add_argument("--json", action="store_true", help="one JSON object on stdout")


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Defaults < settings file < HOGWILD_* < flags, validated into one Settings."""
    flags = {key: getattr(args, f"setting_{key}") for key in config.KEYS
             if getattr(args, f"setting_{key}", None) is not None}
    path = args.config or config.default_config_path(environ)
    return config.load(path, environ, flags)


def ignored_flags(args: argparse.Namespace) -> list[str]:
    """One warning per setting given as a flag that ``args.command`` does not use, plus
    staleness given in sync mode (it bounds async runs only)."""
    command = _SETTINGS_OF.get(args.command, args.command)
    warnings = []
    for key in config.KEYS:
        if getattr(args, f"setting_{key}", None) is None or config.used_by(key, command):
            continue
        users = ", ".join(config.commands(key))
        warnings.append(f"setting '{key}' is not used by `hogwild {args.command}` (only by "
                        f"{users}); "
                        "ignored")
    return warnings


def _ignored_settings(settings: Settings, args: argparse.Namespace) -> list[str]:
    """Settings from a file or HOGWILD_* that this run will not follow (flags are named by
    ignored_flags)."""
    command = _SETTINGS_OF.get(args.command, args.command)
    warnings = []
    # (Its default bounds async runs; only a value someone chose is worth a word in sync.)
    if (config.used_by("staleness", command) and settings.mode == "sync"
            and settings.staleness is not None
            and settings.staleness != Settings().staleness):
        warnings.append(f"setting 'staleness' ({settings.staleness}) applies to async mode "
                        "only; ignored in sync mode")
    # `run` owns its coordinator: no supervisor would start a successor to resume a
    # hand-over, so SIGTERM (or Ctrl-C) must end the run with its outputs.
    if (command == "run" and settings.on_sigterm != "finish"
            and getattr(args, "setting_on_sigterm", None) is None):
        warnings.append(f"setting 'on_sigterm' ({settings.on_sigterm}) is for a coordinator "
                        "that a supervisor starts again; `hogwild run` ignores it: SIGTERM "
                        "or Ctrl-C ends the run and writes its outputs")
    return warnings


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _cmd_train(settings: Settings, plot: BackgroundPlot | None = None) -> int:
    from hogwild.inprocess.local import train_job

    train_job(settings, plot=plot)  # prints (and with --json, the metrics) as console says
    return 0


def _cmd_run(settings: Settings, args: argparse.Namespace, whole_process: bool) -> int:
    from hogwild.runtime.launcher import run_local

    return run_local(settings, config_path=args.config, keep_going=args.keep_going,
                     insecure=settings.insecure, fork=whole_process,
                     verbosity=verbosity_of(args))


def _cmd_simulate(settings: Settings, args: argparse.Namespace) -> int:
    from hogwild.commands.simulate import SimOptions, simulate_job

    if settings.initial_model:  # the simulator's workers start from zeros
        raise ConfigError("initial_model", "not supported by `hogwild simulate`")

    try:
        speeds = tuple(float(x) for x in args.speeds.split(",") if x.strip())
        options = SimOptions(
            speeds=speeds, speed=args.speed, spread=args.speed_spread,
            network=Network(latency=args.latency, jitter=args.jitter,
                            overhead=args.overhead, bandwidth=args.bandwidth),
            slices=args.slices, evals_per_epoch=args.evals_per_epoch)
        if not all(math.isfinite(v) and v > 0 for v in (*speeds, args.speed)):
            raise ValueError("--speed and --speeds must be positive numbers")
        if args.speed_spread < 0 or args.slices < 1 or not args.evals_per_epoch > 0:
            raise ValueError("--speed-spread must be >= 0, --slices and --evals-per-epoch "
                             "positive")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    simulate_job(settings, options)
    return 0


def _cmd_coordinator(settings: Settings, plot: BackgroundPlot | None = None) -> int:
    from hogwild.coordinator import serve

    # --json: standard output is the metrics' alone (the port line goes to stderr too).
    return serve(settings, out=sys.stderr if console.current().as_json else None, plot=plot)


def _cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from hogwild.worker import serve

    return serve(settings)


def _cmd_gen_data(args: argparse.Namespace) -> int:
    from hogwild.data import make_rcv1_like, make_seed000, write_svmlight
    from hogwild.data.sources import describe
    from hogwild.outputs import artifacts

    if args.rows < 1 or args.test_rows < 0:
        raise ConfigError("rows", "must be at least 1 (and --test-rows non-negative)")
    # The files are written once every row is made: prove them writable before that.
    artifacts.check_out_file(args.out)
    test_path = _test_twin(args.out) if args.test_rows else None
    if test_path is not None:
        artifacts.check_out_file(test_path)
    total = args.rows + args.test_rows
    options: dict[str, Any] = {"seed": args.seed}
    if args.features is not None:
        options["n_features"] = args.features
    if args.noise is not None:
        options["noise"] = args.noise
    if args.kind != "rcv1":
        if args.min_nnz is not None:
            options["min_nnz"] = args.min_nnz
        if args.max_nnz is not None:
            options["max_nnz"] = args.max_nnz
    try:
        data = (make_rcv1_like(total, **options) if args.kind == "rcv1"
                else make_seed000(total, binary=args.binary, **options))
    except ValueError as exc:  # flags that do not fit together: a usage error, exit 2
        raise ConfigError("gen-data", str(exc)) from None
    train = data.slice(0, args.rows)
    with artifacts.writing(args.out):
        write_svmlight(train, args.out)
    print(f"wrote {args.out}: {describe(train)}")
    if test_path is not None:
        test = data.slice(args.rows, total)
        with artifacts.writing(test_path):
            write_svmlight(test, test_path)
        print(f"wrote {test_path}: {describe(test)}")
    return 0


def _test_twin(path: str) -> str:
    """data.svm -> data.test.svm; data.svm.gz -> data.test.svm.gz."""
    head, gz = (path[:-3], ".gz") if path.endswith(".gz") else (path, "")
    stem, dot, ext = head.rpartition(".")
    return f"{stem}.test.{ext}{gz}" if dot and "/" not in ext else f"{head}.test{gz}"


def _cmd_analyze(args: argparse.Namespace) -> int:
    from hogwild.commands.analyze import analyze_command

    if min(args.threads, args.workers, args.round_size) < 1:
        raise ConfigError("threads", "--threads, --workers and --round-size must be at least 1")
    options = {key: value for key, value in (("exact_budget", args.exact_budget),
                                             ("sample_rows", args.sample_rows),
                                             ("partners", args.partners)) if value is not None}
    analyze_command(args.data, threads=args.threads, workers=args.workers,
                    round_size=args.round_size, zero_based=bool(args.zero_based), seed=args.seed,
                    as_json=args.json, **options)
    return 0


def _cmd_experiment(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from hogwild.experiment.command import options_from_args, run_experiment

    opts = options_from_args(args)
    base = config.load(args.config or config.default_config_path(environ), environ)
    _setup_logging(base.log_level)
    result = run_experiment(opts, base)
    if result["failed"]:
        print(f"hogwild experiment: error: {result['failed']} run(s) failed (see runs.csv)",
              file=sys.stderr)
        return 1
    return 0


def _cmd_hash(args: argparse.Namespace) -> int:
    from hogwild.commands.hash_csv import hash_command
    from hogwild.data.hashing import HashOptions, names

    sep = {"tab": "\t", "\\t": "\t"}.get(args.sep, args.sep)
    try:
        options = HashOptions(label=args.label, categorical=names(args.categorical),
                              text=names(args.text), ignore=names(args.ignore),
                              numeric=None if args.numeric is None else names(args.numeric),
                              hash_bits=args.hash_bits, k=args.k, buckets=args.buckets,
                              onehot_max=args.onehot_max,
                              scale=args.scale, sep=sep, seed=args.seed)
    except DataError as exc:  # a bad flag: a usage error, exit 2
        raise ConfigError("hash", str(exc).removeprefix("hashing: ")) from None
    hash_command(args.input, args.out, options, params_file=args.params)
    return 0


def _cmd_health(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from hogwild.protocol.health import check

    if args.tls:
        from hogwild.protocol.security import from_settings

        settings = config.load(config.default_config_path(environ), environ)
        if not settings.tls_ca:
            raise ConfigError("tls_ca", "--tls needs tls_ca, tls_cert and tls_key settings")
        status = check(args.address, timeout=args.timeout, service=args.service,
                       channel_factory=from_settings(settings).channel)
    else:
        status = check(args.address, timeout=args.timeout, service=args.service)
    print(status)
    return 0 if status == "SERVING" else 1


def _cmd_model(args: argparse.Namespace) -> int:
    from hogwild.commands.predict import eval_command, predict_command

    if args.threads is not None and args.threads < 1:
        raise ConfigError("threads", f"must be at least 1, got {args.threads}")
    zero_based: bool | None = args.zero_based
    level = verbosity_of(args).level
    if args.command == "eval":
        eval_command(args.model, args.data, as_json=args.json, threads=args.threads,
                     zero_based=zero_based, level=level)
    else:
        if args.json and not args.out:
            raise UsageError("--json prints the summary on standard output: give --out FILE "
                             "for the predictions")
        output = "raw" if args.raw else "proba" if args.proba else "label"
        predict_command(args.model, args.data, out=args.out, output=output,
                        full_metrics=args.metrics, threads=args.threads, zero_based=zero_based,
                        as_json=args.json, level=level)
    return 0


# The module each command imports first (numpy, numba, grpc, ...): loaded as long-lived
# objects when the command is the whole process (see hogwild.runtime.startup).
_HEAVY_MODULES = {
    "train": "hogwild.inprocess.local", "coordinator": "hogwild.coordinator", "worker": "hogwild.worker",
    "predict": "hogwild.commands.predict", "eval": "hogwild.commands.predict",
}
# Commands that draw the loss plot: as the whole process they start its helper before their
# own imports, so that it imports matplotlib while this process is busy on one core.
_PLOTTING = ("train", "coordinator")
# Commands that train: a run goes on when its standard output's reader goes away.
_TRAINING = ("train", "coordinator", "worker", "run", "experiment")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point of the `hogwild` console script; returns the process exit code.

    ``argv`` None (the console script, ``python -m hogwild.cli``): the call is the whole
    process, which ends when it returns; the garbage collector is then spared the objects
    of the command's imports and the final traversal of everything (hogwild.runtime.startup)."""
    if argv is None:
        return main_process(None)
    return _main(argv, environ, whole_process=False)


def main_process(argv: Sequence[str] | None, plot: BackgroundPlot | None = None) -> int:
    """Run one command line (default: sys.argv) as the whole process, which ends when this
    returns (see hogwild.runtime.startup). ``plot``: a loss plot helper started already (the command
    closes it)."""
    from hogwild.runtime.startup import single_blas_thread

    single_blas_thread()  # before anything imports numpy
    try:
        return _main(argv, None, whole_process=True, plot=plot)
    finally:
        from hogwild.runtime.startup import before_exit

        before_exit()


def _main(argv: Sequence[str] | None, environ: Mapping[str, str] | None,
          whole_process: bool, plot: BackgroundPlot | None = None) -> int:
    env = os.environ if environ is None else environ
    parser = build_parser()
    try:  # a plot helper handed in is closed whatever happens, a bad command line included
        args = parser.parse_args(argv)
        if whole_process and args.command in _TRAINING:
            from hogwild.runtime.startup import outlive_console

            outlive_console(args.command)
        if plot is None and whole_process and args.command in _PLOTTING:
            from hogwild.outputs.plotter import BackgroundPlot

            plot = BackgroundPlot()
        if whole_process and args.command in _HEAVY_MODULES:
            from hogwild.runtime.startup import import_long_lived

            import_long_lived(_HEAVY_MODULES[args.command])
        return _run_command(args, env, plot if args.command in _PLOTTING else None,
                            whole_process)
    finally:
        if plot is not None:
            plot.close()


def _run_command(args: argparse.Namespace, env: Mapping[str, str],
                 plot: BackgroundPlot | None, whole_process: bool) -> int:
    console.use(verbosity_of(args))
    try:
        return _run_verbose(args, env, plot, whole_process)
    finally:
        console.use(console.Verbosity())  # a caller in this process gets the default back


def _run_verbose(args: argparse.Namespace, env: Mapping[str, str],
                 plot: BackgroundPlot | None, whole_process: bool) -> int:
    try:
        if args.command == "gen-data":
            _setup_logging("info")
            return _cmd_gen_data(args)
        if args.command == "hash":
            return _cmd_hash(args)
        if args.command == "analyze":
            return _cmd_analyze(args)
        if args.command == "health":
            return _cmd_health(args, env)
        if args.command == "certs":
            from hogwild.commands.certs import main as certs_main

            return certs_main(args.out, args.hosts, args.days, args.force)
        if args.command in ("predict", "eval"):
            if verbosity_of(args).level == console.VERBOSE:
                _setup_logging("debug")
            return _cmd_model(args)
        if args.command == "experiment":
            return _cmd_experiment(args, env)
        if args.command == "inspect":
            from hogwild.commands.inspect import inspect_command

            inspect_command(args.model, top=args.top, as_json=args.json)
            return 0
        settings = settings_from_args(args, env)
        level = log_level_of(settings, args, env)
        if level != settings.log_level:  # `run` hands it on to its processes
            settings = settings.replace(log_level=level)
        _setup_logging(settings.log_level)
        for warning in ignored_flags(args) + _ignored_settings(settings, args):
            log.warning(warning)
        if args.command == "train":
            return _cmd_train(settings, plot)
        if args.command in ("coordinator", "worker"):
            from hogwild.protocol.security import require_tls

            require_tls(settings, args.command)  # before any port is bound
        if args.command == "coordinator":
            return _cmd_coordinator(settings, plot)
        if args.command == "run":
            return _cmd_run(settings, args, whole_process)
        if args.command == "simulate":
            return _cmd_simulate(settings, args)
        return _cmd_worker(settings, args)  # the last of the four commands with settings
    except (ConfigError, UsageError) as exc:
        print(f"hogwild {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except HogwildError as exc:
        print(f"hogwild {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"hogwild {args.command}: error: out of memory (for data larger than memory: "
              "hogwild train --out-of-core)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"hogwild {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
