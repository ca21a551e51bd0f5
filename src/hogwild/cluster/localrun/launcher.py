"""`hogwild run`: a coordinator and N workers as separate local processes on loopback.

The children are the same programs a cluster runs (``hogwild coordinator`` / ``worker``),
run as hogwild.cluster.localrun.prespawn roles that read their command line from stdin. As a whole
`hogwild run` process the launcher loads their libraries and kernels once and forks them (see
hogwild.cluster.localrun.forked); called from a larger program it starts them with subprocess as
``python -m hogwild.prespawned ROLE``, and each imports its libraries while the
launcher writes the run's credentials.
The coordinator binds port 0 and prints the port on its first line; the workers' command
line, which names that port, follows once the launcher has read it. Every child's output is
streamed with its name as prefix: ``coordinator``, and ``worker-N`` for the worker the
coordinator gave id N (``worker pid P`` until it has registered). The lines meant for the
launcher (ports, ids) show with -v only; with --json the children's lines go to stderr and
the coordinator's metrics, one JSON object, are the only line on stdout. On exit, a failed child (unless keep_going), Ctrl-C or
SIGTERM, every child still running gets SIGTERM (graceful stop) and, after a grace period,
SIGKILL.

Unless the settings name TLS files (or ``insecure`` is set) the run uses mutual TLS and a run
token all the same: throw-away certificates and a random token are written to a private
temporary directory, removed at the end. A token always reaches the children as a file,
never on their command line (which any local user can read).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

from hogwild import config
from hogwild.base.hosts import machine_cores
from hogwild.base.startup import single_blas_thread
from hogwild.cluster.localrun.forked import ForkedProcess, can_fork, preload
from hogwild.config import Settings, worker_devices
from hogwild.errors import EXIT_LEFT, EXIT_QUARANTINED, EXIT_STALLED, ClusterError
from hogwild.outputs.console import NORMAL, QUIET, VERBOSE, Verbosity
from hogwild.runtime.announce import READY_PREFIX, REGISTERED_PREFIX, RESULT_START

if TYPE_CHECKING:
    from hogwild.cluster.localrun.prespawn import CommandRunner
    from hogwild.outputs.plotter import BackgroundPlot

GRACE_SECONDS = 10.0
STARTUP_SECONDS = 60.0


def setting_flags(settings: Settings, command: str | None = None) -> list[str]:
    """Every setting (that ``command`` uses, when given) as a command-line flag, so a child
    sees exactly these settings."""
    flags = []
    for key in config.KEYS:
        if command is not None and not config.used_by(key, command):
            continue
        value = getattr(settings, key)
        if value is None:
            text = "null"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = yaml_float(value)
        elif isinstance(value, tuple):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        flags.append(f"--{key.replace('_', '-')}={text}")
    return flags


def yaml_float(value: float) -> str:
    """A float as text YAML reads back as that float (PyYAML wants 1.0e-05, not 1e-05)."""
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        mantissa += ".0"
    if e and exponent[:1] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}{e}{exponent}"


def child_env() -> dict[str, str]:
    """The environment of a child: ours, unbuffered, able to import this very hogwild."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    src = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in paths:
        env["PYTHONPATH"] = os.pathsep.join([src, *paths])
    return env


# A worker's own line with its port: for the launcher (and tests), not the person watching.
_WORKER_PORT = "worker listening on port "


_OUTPUT_LOCK = threading.Lock()  # children share the launcher's terminal


def say(out: TextIO, line: str) -> None:
    """Write one whole line to ``out``: print() writes the text and its newline apart, and
    two children's lines then ran together."""
    with _OUTPUT_LOCK:
        out.write(line + "\n")
        out.flush()


class Child:
    """One child process whose merged output is copied, prefixed, to ``out``."""

    def __init__(self, name: str, argv: Sequence[str] | ForkedProcess, out: TextIO,
                 watch_prefix: str | None = None, takes_arguments: bool = False,
                 verbose: bool = True, worker: bool = False, result: bool = False) -> None:
        """``argv``: the command to start, or a child forked already. ``takes_arguments``: a
        hogwild.cluster.localrun.prespawn process, whose command line follows through
        :meth:`hand_arguments` (a forked child always is one). ``verbose``: copy the lines
        meant for the launcher too. ``worker``: ``name pid P`` until it says which id the
        coordinator gave it, then ``worker-ID``. ``result``: keep the line of JSON the
        coordinator prints with --json (:attr:`result`) rather than copy it."""
        self.name = name
        self.out = out
        self.watch_prefix = watch_prefix
        self.verbose = verbose
        self.worker = worker
        self.wants_result = result
        self.result: str | None = None
        self.announced = threading.Event()
        self.announcement = ""
        self.proc: subprocess.Popen[str] | ForkedProcess
        if isinstance(argv, ForkedProcess):
            self.proc = argv
        else:
            self.proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE if takes_arguments else subprocess.DEVNULL,
                env=child_env(), text=True, bufsize=1, start_new_session=True)
        if worker:  # until it has its id, the one name that tells two workers apart
            self.name = f"{name} pid {self.proc.pid}"
        self._reader = threading.Thread(target=self._pump, name=f"out-{name}", daemon=True)
        self._reader.start()

    def hand_arguments(self, args: Sequence[str]) -> None:
        """Give a prespawned child its `hogwild` arguments (then its stdin is at its end)."""
        stdin = self.proc.stdin
        if stdin is None:
            return
        try:
            stdin.write(json.dumps(list(args)) + "\n")
            stdin.close()
        except OSError:
            pass  # it is gone already: its exit code tells why

    def _pump(self) -> None:
        stream: IO[str] | None = self.proc.stdout
        assert stream is not None
        for line in stream:
            text = line.rstrip("\n")
            for_launcher = False
            if (self.watch_prefix and not self.announced.is_set()
                    and text.startswith(self.watch_prefix)):
                self.announcement = text[len(self.watch_prefix):].strip()
                self.announced.set()
                for_launcher = True
            elif self.worker and text.startswith(REGISTERED_PREFIX):
                wid = text[len(REGISTERED_PREFIX):].strip()
                if wid.isdigit():  # (read by the supervisor thread: one str assignment)
                    self.name = f"worker-{wid}"
                for_launcher = True
            elif self.worker and text.startswith(_WORKER_PORT):
                for_launcher = True
            elif self.wants_result and text.startswith(RESULT_START):
                self.result = text
                continue
            if for_launcher and not self.verbose:
                continue
            say(self.out, f"[{self.name}] {text}")
        self.announced.set()  # the process is gone: stop waiting for its announcement

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def finish_output(self) -> None:
        self._reader.join(timeout=2.0)


def teardown(children: Sequence[Child], grace: float = GRACE_SECONDS,
             first: Child | None = None) -> None:
    """SIGTERM ``first`` (the coordinator) and wait for it, then every child still running,
    then SIGKILL what is still there after ``grace``.

    The coordinator first: sent SIGTERM it stops the workers itself, collects their final
    states and writes the outputs, as at the end of a run. Signalled together, a worker left
    mid-exchange and its peer's retries toward it outlasted the grace, so the coordinator
    was killed waiting for that peer's final state and no model was written (1 run in 6)."""
    deadline = time.monotonic() + grace
    if first is not None:
        first.terminate()
        first.wait(max(0.0, deadline - time.monotonic()))
    for child in children:
        child.terminate()
    for child in children:
        child.wait(max(0.0, deadline - time.monotonic()))
    for child in children:
        child.kill()
        child.wait(5.0)
        child.finish_output()


def _role_argv(role: str, settings: Settings, config_path: str | None,
               verbosity: Verbosity | None = None) -> list[str]:
    argv = [sys.executable, "-m", "hogwild.cli", role]
    if config_path:
        argv.append(f"--config={config_path}")
    if verbosity is not None and role == "coordinator":  # (the workers print only logs)
        argv += {QUIET: ["-q"], VERBOSE: ["-v"]}.get(verbosity.level, [])
        if verbosity.as_json:
            argv.append("--json")
    return argv + setting_flags(settings, role)


def _secure(base: Settings, secrets_dir: Path, insecure: bool
            ) -> tuple[Settings, Settings]:
    """(coordinator settings, worker settings) with credentials: the configured TLS files, or
    throw-away ones written to ``secrets_dir``; the token moved into a file."""
    coordinator, worker = base, base
    token = base.auth_token
    if not insecure and not base.tls_ca:
        # deferred: cryptography (about 40 ms) loads only for a run that makes its own certificates
        from hogwild.cluster.transport.certs import write_bundle

        bundle = write_bundle(secrets_dir, overwrite=True)
        tls = {"tls_ca": str(bundle.ca), "tls_server_name": ""}
        coordinator = coordinator.replace(**tls, tls_cert=str(bundle.cert("coordinator")),
                                          tls_key=str(bundle.key("coordinator")))
        worker = worker.replace(**tls, tls_cert=str(bundle.cert("worker")),
                                tls_key=str(bundle.key("worker")))
        if not token and not base.auth_token_file:
            token = bundle.token.read_text().strip()
    if token:
        path = secrets_dir / "run-token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        moved = {"auth_token": "", "auth_token_file": str(path)}
        coordinator, worker = coordinator.replace(**moved), worker.replace(**moved)
    if not coordinator.tls_ca:  # plain text was asked for: the children must not refuse it
        coordinator, worker = coordinator.replace(insecure=True), worker.replace(insecure=True)
    return coordinator, worker


def shared_cores(workers: int, threads: int, cores: int | None = None) -> str | None:
    """The line that says a local run's workers share this machine's cores (``cores``: the
    ones this process may use); None where each thread has one of its own."""
    if cores is None:
        cores = machine_cores()
    if workers * threads <= cores:
        return None
    return (f"[run] {workers} worker(s) x {threads} thread(s) on this machine's {cores} "
            "core(s): the processes take turns on the cores, so this run shows their "
            "contention more than what as many machines would do (`hogwild simulate "
            f"--workers {workers}` estimates that)")


def run_local(settings: Settings, config_path: str | None = None, keep_going: bool = False,
              out: TextIO | None = None, insecure: bool = False,
              fork: CommandRunner | None = None, verbosity: Verbosity | None = None) -> int:
    """Run a whole training job as local processes; returns the coordinator's exit code
    (1 if a worker failed and ``keep_going`` is off, 130 on Ctrl-C). ``insecure``: plain
    text and no token unless the settings ask for them. ``fork``: given when this is a whole
    process of its own, which may load the children's libraries once and fork them (done
    only while it has no other thread); each forked child runs its command line with it
    (hogwild.cli.main_process, which this package does not import). ``verbosity``: -q, -v and --json (the children's log
    level is the settings')."""
    v = Verbosity() if verbosity is None else verbosity
    out = (sys.stderr if v.as_json else sys.stdout) if out is None else out
    verbose = v.level >= VERBOSE
    crowded = shared_cores(settings.workers, settings.threads)
    if crowded is not None and v.level > QUIET:
        say(out, crowded)
    # staleness is dropped in sync mode, and on_sigterm is always finish (this process is
    # the coordinator's only supervisor and starts no successor): the CLI warned about both.
    base = settings.replace(bind_host="127.0.0.1", coordinator_port=0, worker_port=0,
                            advertise_address="", health_port=None, on_sigterm="finish",
                            staleness=settings.staleness if settings.mode == "async" else None)
    children: list[Child] = []
    plot: BackgroundPlot | None = None
    secrets_dir = Path(tempfile.mkdtemp(prefix="hogwild-secrets-"))  # mode 0700
    previous = _install_sigterm()
    try:
        # Every process starts now, with its libraries loaded or loading, while this one
        # writes the credentials; each gets its command line when it is known: the
        # coordinator's at once, the workers' once the coordinator's port is.
        # Each child is told the credentials' directory, to remove it should this process
        # be killed (-9, out of memory) and leave keys and the run token behind.
        if fork and can_fork():
            plot = _fork_children(settings.workers, out, children, str(secrets_dir), v, fork)
        else:
            entry = [sys.executable, "-m", "hogwild.prespawned"]
            children.append(Child("coordinator", [*entry, "coordinator", str(secrets_dir)], out,
                                  watch_prefix=READY_PREFIX, takes_arguments=True,
                                  verbose=verbose, result=v.as_json))
            for _ in range(settings.workers):
                children.append(Child("worker", [*entry, "worker", str(secrets_dir)], out,
                                      takes_arguments=True, verbose=verbose, worker=True))
        coordinator, workers = children[0], children[1:]
        base, worker_base = _secure(base, secrets_dir, insecure)
        coordinator.hand_arguments(_role_argv("coordinator", base, config_path, v)[3:])
        if not coordinator.announced.wait(STARTUP_SECONDS) or not coordinator.announcement:
            code = coordinator.wait(5.0)
            if code is not None:
                # Its own one-line reason is already printed; keep its exit code (2 = a bad
                # setting such as an unwritable out_dir) rather than turning it into 1.
                coordinator.finish_output()
                say(out, f"[run] the coordinator exited with code {code} before it announced "
                         "its port")
                return code
            raise ClusterError(f"the coordinator did not announce its port within "
                               f"{STARTUP_SECONDS:g}s")
        port = int(coordinator.announcement)
        # The coordinator has metrics_port; each worker, on this same host, any free port.
        worker_settings = worker_base.replace(
            coordinator_address=f"127.0.0.1:{port}",
            metrics_port=None if settings.metrics_port is None else 0)
        # Each its own device where several GPUs are named (cuda:0,1: in turn).
        devices = worker_devices(settings.device, len(workers))
        for worker, device in zip(workers, devices, strict=True):
            own = worker_settings.replace(device=device)
            worker.hand_arguments(_role_argv("worker", own, config_path)[3:])  # after -m cli
        code = _supervise(coordinator, workers, keep_going, out, v.level)
        if code in (0, EXIT_QUARANTINED, EXIT_STALLED) and v.as_json:  # outputs written
            if coordinator.result is None:
                raise ClusterError("the coordinator ended without its metrics (--json)")
            print(coordinator.result, file=sys.stdout, flush=True)
        return code
    except KeyboardInterrupt:
        say(out, "[run] interrupted: stopping every process")
        teardown(children, first=children[0] if children else None)
        return 130
    finally:
        teardown(children, first=children[0] if children else None)
        if plot is not None:
            plot.reap()
        shutil.rmtree(secrets_dir, ignore_errors=True)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _fork_children(workers: int, out: TextIO, children: list[Child],
                   secrets_dir: str, verbosity: Verbosity,
                   run_command: CommandRunner) -> BackgroundPlot:
    """Load the children's libraries and kernels here, once, then fork the coordinator and
    ``workers`` workers into ``children``; returns the coordinator's plot helper, which this
    process reaps at the end. ``secrets_dir``: as for hogwild.cluster.localrun.prespawn."""
    # deferred: the plotter loads numpy, which preload() imports long-lived once the plot
    # helper has started
    from hogwild.outputs.plotter import BackgroundPlot

    single_blas_thread()  # before numpy loads (and before the children's environment)
    env = child_env()
    plot = BackgroundPlot(env)  # imports matplotlib on the other core while this one loads
    forked: list[ForkedProcess] = []
    began = time.perf_counter()
    try:
        preload()
        loaded = time.perf_counter() - began
        forked.append(ForkedProcess("coordinator", env, run_command, plot=plot,
                                    secrets_dir=secrets_dir))
        plot.handed_over()
        for _ in range(workers):
            forked.append(ForkedProcess(
                "worker", env, run_command,
                foreign_fds=[fd for proc in forked for fd in proc.parent_fds],
                secrets_dir=secrets_dir))
    except BaseException:
        for proc in forked:  # each waits for its command line: an empty one ends it
            if proc.stdin is not None:
                proc.stdin.close()
            proc.kill()
            proc.wait()
        plot.close()
        raise
    verbose = verbosity.level >= VERBOSE
    if verbose:
        say(out, f"[run] libraries and kernels loaded once ({loaded:.2f}s); forked the "
                 f"coordinator and {workers} worker(s)")
    # Threads (the output pumps) only now that every fork is done: a fork copies none.
    children.append(Child("coordinator", forked[0], out, watch_prefix=READY_PREFIX,
                          verbose=verbose, result=verbosity.as_json))
    children.extend(Child("worker", proc, out, verbose=verbose, worker=True)
                    for proc in forked[1:])
    return plot


def _supervise(coordinator: Child, workers: list[Child], keep_going: bool, out: TextIO,
               level: int = NORMAL) -> int:
    """Wait for the coordinator; stop everything early if a worker fails (unless keep_going)."""
    failed: str | None = None
    reported: set[str] = set()
    while True:
        code = coordinator.poll()
        if code is not None:
            break
        for worker in workers:
            wcode = worker.poll()
            if wcode not in (None, 0) and worker.name not in reported:
                reported.add(worker.name)
                if wcode == EXIT_LEFT:  # sent SIGTERM: it left after its final delta
                    if level > QUIET:
                        say(out, f"[run] {worker.name} left the run (SIGTERM); the others go on")
                    continue
                if wcode == EXIT_QUARANTINED:  # its deltas were refused: the run goes on
                    say(out, f"[run] {worker.name} was quarantined (a delta it sent was "
                             "refused); the others go on")
                    continue
                say(out, f"[run] {worker.name} exited with code {wcode}")
                if not keep_going:
                    failed = worker.name
        if failed is not None:
            say(out, f"[run] stopping the run because {failed} failed (use --keep-going "
                     "to continue without it)")
            teardown([coordinator, *workers], first=coordinator)
            return 1
        time.sleep(0.1)
    if code != 0:
        say(out, f"[run] the coordinator exited with code {code}: stopping the workers")
        teardown(workers)
    else:
        # The coordinator is done; workers exit once their final state was collected.
        deadline = time.monotonic() + GRACE_SECONDS
        for worker in workers:
            worker.wait(max(0.0, deadline - time.monotonic()))
    coordinator.finish_output()
    return code


def _install_sigterm() -> Any:
    """SIGTERM to the launcher behaves like Ctrl-C: tear the children down."""
    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, on_sigterm)

