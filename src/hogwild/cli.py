"""The `hogwild` command: assemble the commands' parsers, load the settings, run the command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hogwild import __version__, config
from hogwild.base.startup import (
    QuickExit,
    before_exit,
    import_long_lived,
    outlive_console,
    quiet_grpc_core,
    single_blas_thread,
    to_devnull,
)
from hogwild.commands import (
    data_tools,
    experiments,
    models,
    operations,
    roles,
    runs,
    simulate_flags,
)
from hogwild.commands.common import add_output_flags, setup_logging, verbosity_of
from hogwild.config import Settings
from hogwild.errors import ConfigError, HogwildError, UsageError
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


class _SubParser(_Parser):
    """A subcommand's parser: its own usage on any error of its command line (an unknown
    flag included, which the top-level parser would report with the top-level usage), and
    the arguments that may be given as a positional or a flag (``either``) resolved."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.either: list[tuple[str, str, str]] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        for dest, flag, metavar in self.either:
            positional, given = getattr(namespace, dest), getattr(namespace, f"{dest}_flag")
            if positional is not None and given is not None:
                self.error(f"{metavar} given twice (as an argument and as {flag}): give one")
            if positional is None and given is None:
                self.error(f"the following arguments are required: {metavar} (or {flag} "
                           f"{metavar})")
            setattr(namespace, dest, given if positional is None else positional)
            delattr(namespace, f"{dest}_flag")
        return namespace, []


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



# Commands a person starts and watches: their info logs (data cache reads, round sizes) show
# with -v or an explicit log_level; servers (coordinator, worker) keep theirs for operators.
_INTERACTIVE = ("train", "run", "simulate")

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



def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used by tests to check deployment command lines)."""
    parser = _Parser(
        prog="hogwild",
        description="Sparse linear models trained with HOGWILD! lock-free SGD, "
                    "on one machine or across many over gRPC.")
    parser.add_argument("--version", action="version", version=f"hogwild {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=_SubParser)
    for command in ("train", "run", "coordinator", "worker", "simulate"):
        cmd = sub.add_parser(command, help=_DESCRIPTIONS[command],
                             description=_DESCRIPTIONS[command])
        _add_setting_flags(cmd, command)
        if command != "worker":
            add_output_flags(cmd, command)
        if command == "run":
            roles.add_run_flags(cmd)
        if command == "simulate":
            simulate_flags.add_simulation_flags(cmd)

    data_tools.add_gen_data(sub)
    data_tools.add_analyze(sub)
    experiments.add_experiment(sub)
    data_tools.add_hash(sub)
    operations.add_health(sub)
    operations.add_certs(sub)
    runs.add_runs(sub)
    models.add_model_commands(sub)
    return parser


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


# The commands that read no settings: each one's handler (the command line, the environment).
_WITHOUT_SETTINGS: dict[str, Callable[[argparse.Namespace, Mapping[str, str]], int]] = {
    "gen-data": lambda args, env: data_tools.gen_data(args),
    "hash": lambda args, env: data_tools.hash_file(args),
    "analyze": lambda args, env: data_tools.analyze(args),
    "health": operations.health,
    "certs": lambda args, env: operations.certs(args),
    "predict": lambda args, env: models.predict_or_eval(args),
    "eval": lambda args, env: models.predict_or_eval(args),
    "experiment": experiments.experiment,
    "inspect": lambda args, env: models.inspect(args),
    "runs": runs.runs,
}

# The module each command imports first (numpy, numba, grpc, ...): loaded as long-lived
# objects when the command is the whole process (see hogwild.base.startup).
_HEAVY_MODULES = {
    "train": "hogwild.inprocess.local", "coordinator": "hogwild.cluster.coordinator.server",
    "worker": "hogwild.cluster.worker",
    "predict": "hogwild.commands.predict", "eval": "hogwild.commands.predict",
}
# Commands that draw the loss plot: as the whole process they start its helper before their
# own imports, so that it imports matplotlib while this process is busy on one core.
_PLOTTING = ("train", "coordinator")
# Commands that train: a run goes on when its standard output's reader goes away.
_TRAINING = ("train", "coordinator", "worker", "run", "experiment")
# The exit code of a command whose standard output's reader went away: a shell's for a
# command killed by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point of the `hogwild` console script; returns the process exit code.

    ``argv`` None (the console script, ``python -m hogwild.cli``): the call is the whole
    process, which ends when it returns; the garbage collector is then spared the objects
    of the command's imports and the final traversal of everything (hogwild.base.startup)."""
    if argv is None:
        ending = QuickExit()
        code = main_process(None)
        ending.arm(code)
        return code
    return _main(argv, environ, whole_process=False)


def main_process(argv: Sequence[str] | None, plot: BackgroundPlot | None = None) -> int:
    """Run one command line (default: sys.argv) as the whole process, which ends when this
    returns (see hogwild.base.startup). ``plot``: a loss plot helper started already (the command
    closes it)."""
    single_blas_thread()  # before anything imports numpy
    quiet_grpc_core()  # before anything imports grpc
    try:
        return _main(argv, None, whole_process=True, plot=plot)
    except BrokenPipeError:
        # The reader of standard output went away (`hogwild certs | head`): stop quietly, as
        # a command killed by SIGPIPE does (training commands go on instead, see
        # startup.outlive_console). What is still buffered goes nowhere, not to a traceback.
        to_devnull(sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        before_exit()


def _main(argv: Sequence[str] | None, environ: Mapping[str, str] | None,
          whole_process: bool, plot: BackgroundPlot | None = None) -> int:
    env = os.environ if environ is None else environ
    parser = build_parser()
    try:  # a plot helper handed in is closed whatever happens, a bad command line included
        args = parser.parse_args(argv)
        if whole_process and args.command in _TRAINING:
            outlive_console(args.command)
        if plot is None and whole_process and args.command in _PLOTTING:
            # deferred: the plotter loads numpy, which `hogwild --help` does without
            from hogwild.outputs.plotter import BackgroundPlot

            plot = BackgroundPlot()
        if whole_process and args.command in _HEAVY_MODULES:
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
            setup_logging("info")
        if args.command in ("predict", "eval") and verbosity_of(args).level == console.VERBOSE:
            setup_logging("debug")
        handler = _WITHOUT_SETTINGS.get(args.command)
        if handler is not None:
            return handler(args, env)
        settings = settings_from_args(args, env)
        level = log_level_of(settings, args, env)
        if level != settings.log_level:  # `run` hands it on to its processes
            settings = settings.replace(log_level=level)
        setup_logging(settings.log_level)
        for warning in ignored_flags(args) + _ignored_settings(settings, args):
            log.warning(warning)
        if args.command == "train":
            return roles.train(settings, plot)
        if args.command in ("coordinator", "worker"):
            # deferred: security loads grpc, which `hogwild --help` does without
            from hogwild.cluster.transport.security import require_tls

            require_tls(settings, args.command)  # before any port is bound
        if args.command == "coordinator":
            return roles.coordinator(settings, plot)
        if args.command == "run":
            # A whole process forks its children, which run their command lines as this does.
            return roles.run(settings, args, fork=main_process if whole_process else None)
        if args.command == "simulate":
            return simulate_flags.simulate(settings, args)
        return roles.worker(settings)  # the last of the four commands with settings
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
