"""k8s/: render the kustomization offline, validate every object, check it against the CLI."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hogwild.engine.tree import children, parent
from hogwild.errors import EXIT_LEFT
from hogwild.protocol.security import require_tls

try:  # imported as a package module or as a rootdir-relative script
    from . import deploycheck, kustomize_lite
except ImportError:
    import deploycheck  # type: ignore[no-redef]
    import kustomize_lite  # type: ignore[no-redef]

REPO = deploycheck.REPO
K8S = REPO / "k8s"
EXTRAS = sorted((K8S / "extras").glob("*.yaml"))
# Validated against the oldest release the worker Job needs (backoffLimitPerIndex: 1.29,
# beta and on by default) and the newest schema kubernetes-validate ships.
K8S_VERSIONS = ["1.29.0", "latest"]
# The annotation an Indexed Job's controller puts on each pod: its completion index.
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# Sample downward-API values for expanding $(POD_NAMESPACE)-style references.
DOWNWARD = {"metadata.name": "hogwild-worker-0-x7k2q", "metadata.namespace": "hogwild",
            INDEX_FIELD: "0"}

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return kustomize_lite.build(K8S)


def _by_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def _one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _settings_configmap(objects: list[Obj]) -> Obj:
    maps = [o for o in _by_kind(objects, "ConfigMap")
            if o["metadata"]["name"].startswith("hogwild-settings-")]
    assert len(maps) == 1
    return maps[0]


def _pods(objects: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(object, pod spec) for every pod template in the rendered output and the extras."""
    for obj in objects:
        for spec in kustomize_lite.pod_specs(obj):
            yield obj, spec


def _extras() -> list[Obj]:
    docs: list[Obj] = []
    for path in EXTRAS:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_k8s_settings_is_a_copy_of_the_top_level_settings() -> None:
    # kustomize only reads files in or below k8s/ (a symlink pointing out is refused too),
    # so the ConfigMap is generated from a copy that must never drift.
    copy, top = K8S / "settings.yaml", deploycheck.SETTINGS_FILE
    assert not copy.is_symlink()
    assert copy.read_bytes() == top.read_bytes(), (
        "k8s/settings.yaml differs from settings.yaml: run `cp settings.yaml k8s/settings.yaml`")


def test_renders_the_expected_objects(rendered: list[Obj]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in rendered)
    cm = _settings_configmap(rendered)["metadata"]["name"]
    assert kinds == sorted([
        ("Namespace", "hogwild"), ("ConfigMap", cm), ("PersistentVolumeClaim", "hogwild-runs"),
        ("Service", "hogwild-workers"), ("Job", "hogwild-worker"),
        ("Service", "hogwild-coordinator"), ("Job", "hogwild-coordinator")])
    for obj in rendered:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "hogwild"
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "hogwild"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_passes_strict_schema_validation(rendered: list[Obj], version: str) -> None:
    import kubernetes_validate

    if version == "latest":
        version = kubernetes_validate.utils.latest_version()
    for obj in [*rendered, *_extras()]:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("field, value", [
    ("readinesProbe", {}), ("env", [{"name": "HOGWILD_WORKERS", "value": 2}])])
def test_strict_validation_rejects_typos_and_numbers_in_env(rendered: list[Obj], field: str,
                                                            value: Any) -> None:
    import kubernetes_validate

    job = _one(rendered, "Job", "hogwild-coordinator")
    broken = yaml.safe_load(yaml.safe_dump(job))
    broken["spec"]["template"]["spec"]["containers"][0][field] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_generated_configmap_holds_settings_and_is_referenced(rendered: list[Obj]) -> None:
    cm = _settings_configmap(rendered)
    assert cm["data"] == {"settings.yaml": deploycheck.SETTINGS_FILE.read_text()}
    names = {o["metadata"]["name"] for o in _by_kind(rendered, "ConfigMap")}
    claims = {o["metadata"]["name"] for o in _by_kind(rendered, "PersistentVolumeClaim")}
    for obj, spec in _pods([*rendered, *_extras()]):
        declared = {v["name"] for v in spec.get("volumes", [])}
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in names, f"{obj['kind']}: unknown ConfigMap"
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in declared, f"{container['name']}: {mount['name']}?"


def _with_count(count: int, tmp_path: Path) -> list[Obj]:
    """The kustomization rendered after editing the one worker count, `completions:`."""
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    docs = list(yaml.safe_load_all((root / "workers.yaml").read_text()))
    (job,) = [d for d in docs if d["kind"] == "Job"]
    job["spec"]["completions"] = count
    (root / "workers.yaml").write_text(yaml.safe_dump_all(docs))
    return kustomize_lite.build(root)


def _workers(objects: list[Obj]) -> Obj:
    return _one(objects, "Job", "hogwild-worker")


def _coordinator_env(objects: list[Obj]) -> dict[str, Any]:
    job = _one(objects, "Job", "hogwild-coordinator")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_one_count_sets_workers_their_parallelism_and_what_the_coordinator_waits_for(
        rendered: list[Obj], tmp_path: Path) -> None:
    spec = _workers(rendered)["spec"]
    assert spec["parallelism"] == spec["completions"] == 2
    assert _coordinator_env(rendered)["HOGWILD_WORKERS"] == "2"
    for count in (1, 5):
        objects = _with_count(count, tmp_path / str(count))
        spec = _workers(objects)["spec"]
        # Fewer pods at once than indexes would start some workers only after others end.
        assert (spec["completions"], spec["parallelism"]) == (count, count)
        value = _coordinator_env(objects)["HOGWILD_WORKERS"]
        assert value == str(count), "env values must stay strings"
        # The workers get it too: each sizes its server's threads by it.
        (worker,) = _workers(objects)["spec"]["template"]["spec"]["containers"]
        assert _container_env(worker)["HOGWILD_WORKERS"] == str(count)


def test_sixty_four_workers_form_a_tree_by_the_worker_count(tmp_path: Path) -> None:
    """64 workers and `topology: tree` (set on the coordinator, which ships it to the
    workers): the settings load, and every worker reaches its tree neighbours at names of
    the headless Service that the workers' wildcard certificate covers."""
    objects = _with_count(64, tmp_path)
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(_settings_configmap(objects)["data"]["settings.yaml"])
    job = _one(objects, "Job", "hogwild-coordinator")
    (coordinator,) = job["spec"]["template"]["spec"]["containers"]
    env = {**_container_env(coordinator), "HOGWILD_TOPOLOGY": "tree", "HOGWILD_TREE_FANOUT": "4"}
    loaded = deploycheck.load_with(env, settings_file, coordinator["args"])
    assert (loaded.workers, loaded.topology, loaded.tree_fanout) == (64, "tree", 4)
    workers = _workers(objects)
    assert workers["spec"]["completions"] == workers["spec"]["parallelism"] == 64
    (worker,) = workers["spec"]["template"]["spec"]["containers"]
    namespace = DOWNWARD["metadata.namespace"]
    advertised = [_container_env(worker, {**DOWNWARD, INDEX_FIELD: str(i)})
                  ["HOGWILD_ADVERTISE_ADDRESS"] for i in range(64)]
    assert len(set(advertised)) == 64
    wildcard = f".{workers['spec']['template']['spec']['subdomain']}.{namespace}.svc.cluster.local"
    for i in range(64):
        for j in [parent(i, 4), *children(i, 4, 64)]:
            if j < 0:
                continue  # the coordinator, at its Service name
            host = advertised[j].rpartition(":")[0]
            label, _, rest = host.partition(".")
            assert "." + rest == wildcard and label == f"hogwild-worker-{j}", host


def _container_env(container: Obj, downward: dict[str, str] = DOWNWARD) -> dict[str, str]:
    """Env as the kubelet builds it: fieldRefs filled in, $(VAR) expanded in order."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "valueFrom" in item:
            env[item["name"]] = downward[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[item["name"]] = deploycheck.expand_k8s(item["value"], env)
    return env


def _hogwild_containers(objects: list[Obj]) -> Iterator[tuple[Obj, Obj, Obj]]:
    for obj, spec in _pods(objects):
        for container in spec["containers"]:
            if container.get("image", "").split(":")[0].endswith("hogwild") and \
                    "command" not in container:
                yield obj, spec, container


def test_commands_and_settings_are_valid_for_each_role(rendered: list[Obj],
                                                       tmp_path: Path) -> None:
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(_settings_configmap(rendered)["data"]["settings.yaml"])
    roles = set()
    for obj, spec, container in _hogwild_containers(rendered):
        args = deploycheck.parse_command(container["args"])
        roles.add(args.command)
        assert args.command == container["name"]
        env = _container_env(container)
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert str(Path(env["HOGWILD_CONFIG"]).parent) in mounts
        loaded = deploycheck.load_with(env, settings_file, container["args"])
        # Mutual TLS, not plain text asked for: the role starts (it refuses plain text).
        require_tls(loaded, args.command)
        assert loaded.tls_ca and not loaded.insecure
        if args.command == "coordinator":
            assert any(loaded.out_dir == p or loaded.out_dir.startswith(p + "/")
                       for p in mounts), "out_dir not mounted"
            assert loaded.workers == _workers(rendered)["spec"]["completions"]
    assert roles == set(deploycheck.ROLES)


def test_ports_probes_and_addresses_agree_with_settings(rendered: list[Obj]) -> None:
    settings = deploycheck.settings()
    port = {"coordinator": settings.coordinator_port, "worker": settings.worker_port}
    for obj, spec, container in _hogwild_containers(rendered):
        role = container["name"]
        env = _container_env(container)
        # Probes cannot do TLS: they ask the plain-text, health-only port of the settings.
        health = int(env["HOGWILD_HEALTH_PORT"])
        assert health != port[role]
        assert [p["containerPort"] for p in container["ports"]] == [port[role], health]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == health, f"{role} {probe}"
        if role == "worker":
            coordinator = env["HOGWILD_COORDINATOR_ADDRESS"]
            host, _, _ = coordinator.rpartition(":")
            assert deploycheck.port_of(coordinator) == settings.coordinator_port
            svc = _one(rendered, "Service", host)
            assert svc["spec"]["ports"][0]["port"] == settings.coordinator_port
            assert deploycheck.port_of(env["HOGWILD_ADVERTISE_ADDRESS"]) == settings.worker_port
    workers_svc = _one(rendered, "Service", "hogwild-workers")
    assert workers_svc["spec"]["ports"][0]["port"] == settings.worker_port


def test_workers_advertise_stable_names_from_the_headless_service(rendered: list[Obj]) -> None:
    """An Indexed Job names each pod's host <job name>-<completion index>, and a pod with a
    subdomain that is a headless Service gets <host>.<subdomain>.<namespace>.svc... in DNS:
    the name each worker must advertise, whatever random suffix its pod name has."""
    job = _workers(rendered)
    assert job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    svc = _one(rendered, "Service", pod["subdomain"])
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    (container,) = pod["containers"]
    namespace = DOWNWARD["metadata.namespace"]
    port = deploycheck.settings().worker_port
    for index in (0, 3):
        env = _container_env(container, {**DOWNWARD, INDEX_FIELD: str(index)})
        assert env["HOGWILD_ADVERTISE_ADDRESS"] == (
            f"{job['metadata']['name']}-{index}.{svc['metadata']['name']}.{namespace}"
            f".svc.cluster.local:{port}")


# A coordinator address where nothing listens (a privileged port): connections are refused.
NOBODY = "127.0.0.1:1"


def _exit_code(argv: list[str], env: dict[str, str], when: str = "",
               signum: int = signal.SIGTERM, cwd: Path | None = None) -> int:
    """The exit code of a real `hogwild` process (``argv`` after `hogwild`, ``env`` on top
    of this one's); with ``when``, sent ``signum`` once a line of its output contains that
    text, by the shell command the README gives for signalling one (`kill -NAME PID`). Each
    process given here ends on its own (a timeout of its settings)."""
    with subprocess.Popen([sys.executable, "-m", "hogwild.cli", *argv],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, **env}, cwd=cwd) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if when and when in line:
                    name = signal.Signals(signum).name.removeprefix("SIG")
                    subprocess.run(["sh", "-c", f"kill -{name} {proc.pid}"], check=True)
                    when = ""
            return proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()


def _worker_exit_code(*args: str, env: dict[str, str] | None = None,
                      sigterm_when: str = "") -> int:
    """The exit code of a real `hogwild worker`; with ``sigterm_when``, SIGTERM it once a
    line of its output contains that text (bounded: it gives up after connect_timeout)."""
    # Plain text on loopback, asked for: the pods' TLS files are not this test's subject.
    return _exit_code(["worker", "--insecure", *args], env or {}, sigterm_when)


def test_worker_job_fails_at_once_only_where_a_new_pod_cannot_help(rendered: list[Obj]) -> None:
    """The worker Job's podFailurePolicy, against the exit codes of a real `hogwild worker`:
    a bad setting fails the Job at once; a worker that lost its coordinator (exit 1, what a
    worker does while the coordinator pod is replaced for longer than connect_timeout) or
    was sent SIGTERM before the run ended (an evicted pod) is replaced by a new pod of the
    same index, which registers again. Only the end of the run may exit 0: a pod that
    exits 0 is complete and never replaced."""
    spec = _workers(rendered)["spec"]
    # Per index: a limit for the whole Job would let one failure of each of many workers
    # (all of them, when the coordinator pod is replaced) end the run.
    assert spec["backoffLimitPerIndex"] >= 1 and "backoffLimit" not in spec
    assert spec["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
    rules = spec["podFailurePolicy"]["rules"]
    (fail_job,) = [r for r in rules if r["action"] == "FailJob"]
    assert fail_job["onExitCodes"]["containerName"] == "worker"
    assert fail_job["onExitCodes"]["operator"] == "In"
    fail_at_once = set(fail_job["onExitCodes"]["values"])
    (ignore,) = [r for r in rules if r["action"] == "Ignore"]
    assert ignore["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]

    bad_setting = _worker_exit_code(env={"HOGWILD_WORKER_PORT": "not-a-port"})
    lost_coordinator = _worker_exit_code(
        "--coordinator", NOBODY, "--connect-timeout", "1",
        "--port", "0")
    evicted = _worker_exit_code(
        "--coordinator", NOBODY, "--connect-timeout", "60",
        "--port", "0", sigterm_when="worker listening on port")
    assert bad_setting in fail_at_once
    assert lost_coordinator != 0 and lost_coordinator not in fail_at_once
    assert evicted == EXIT_LEFT and evicted not in fail_at_once


def _coordinator_exit_code(env: dict[str, str], tmp_path: Path, *args: str,
                           signum: int = 0) -> int:
    """The exit code of a real `hogwild coordinator` with the pod's hogwild settings from
    ``env`` (on loopback, port 0, outputs in ``tmp_path``); with ``signum``, sent that signal
    once it waits for its workers, by the shell command the README gives for it."""
    own = {k: v for k, v in env.items() if k in ("HOGWILD_ON_SIGTERM", "HOGWILD_RESUME")}
    if "HOGWILD_RESUME" in own:
        own["HOGWILD_RESUME"] = str(tmp_path / "out")  # the pod's volume, here
    argv = ["coordinator", "--port", "0", "--bind-host", "127.0.0.1", "--out",
            str(tmp_path / "out"), "--workers", "2", "--register-timeout", "60", "--insecure",
            *args]
    # Bounded: it gives up after register_timeout.
    return _exit_code(argv, own, "waiting for 2 worker(s)" if signum else "",
                      signum or signal.SIGTERM, cwd=tmp_path)


def test_coordinator_job_resumes_where_a_new_pod_can_and_fails_where_it_cannot(
        rendered: list[Obj], tmp_path: Path) -> None:
    """The coordinator Job's podFailurePolicy, against a real `hogwild coordinator` with the
    pod's settings: SIGTERM (an eviction, a deleted pod) hands the run over and exits 143,
    which gets a new pod that resumes (evictions not even counted); a bad setting fails the
    Job at once; SIGUSR1, the README's way to end a run early, does not hand over."""
    spec = _one(rendered, "Job", "hogwild-coordinator")["spec"]
    rules = spec["podFailurePolicy"]["rules"]
    (fail_job,) = [r for r in rules if r["action"] == "FailJob"]
    fail_at_once = set(fail_job["onExitCodes"]["values"])
    (ignore,) = [r for r in rules if r["action"] == "Ignore"]
    assert ignore["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    env = _coordinator_env(rendered)
    assert env["HOGWILD_ON_SIGTERM"] == "checkpoint" and env["HOGWILD_RESUME"]

    evicted = _coordinator_exit_code(env, tmp_path, signum=signal.SIGTERM)
    assert evicted == EXIT_LEFT and evicted not in fail_at_once
    bad_setting = _coordinator_exit_code({**env, "HOGWILD_ON_SIGTERM": "resume"}, tmp_path)
    assert bad_setting in fail_at_once
    # Before training there is nothing to write either way; SIGUSR1 is the finishing signal.
    ended = _coordinator_exit_code(env, tmp_path, signum=signal.SIGUSR1)
    assert ended not in (0, EXIT_LEFT) and ended not in fail_at_once


def test_service_selectors_match_their_pods_and_only_those(rendered: list[Obj]) -> None:
    for job, service in [("hogwild-worker", "hogwild-workers"),
                         ("hogwild-coordinator", "hogwild-coordinator")]:
        svc = _one(rendered, "Service", service)
        selector = svc["spec"]["selector"].items()
        template = _one(rendered, "Job", job)["spec"]["template"]
        assert selector <= template["metadata"]["labels"].items(), f"{service} selects no pod"
        others = [o for o in _by_kind(rendered, "Job") if o["metadata"]["name"] != job]
        for other in others:
            assert not selector <= other["spec"]["template"]["metadata"]["labels"].items(), \
                f"{service} also selects the pods of {other['metadata']['name']}"
        assert svc["spec"]["ports"][0]["targetPort"] in {
            p["name"] for c in template["spec"]["containers"] for p in c["ports"]}


def test_pods_are_hardened_bounded_and_drain_on_sigterm(rendered: list[Obj]) -> None:
    for obj, spec in _pods([*rendered, *_extras()]):
        # Service links would inject HOGWILD_<SERVICE>_PORT=tcp://... variables, which
        # hogwild reads as settings (and rejects).
        assert spec["enableServiceLinks"] is False, obj["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["terminationGracePeriodSeconds"] >= 1
        for container in spec["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"])
            assert "memory" in resources["limits"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            if container["securityContext"]["readOnlyRootFilesystem"] and "command" not in \
                    container:
                assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    for obj, spec, _ in _hogwild_containers(rendered):
        assert spec["terminationGracePeriodSeconds"] >= 30
    for job in _by_kind(rendered, "Job"):
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_extras_target_the_rendered_namespace_and_volume(rendered: list[Obj]) -> None:
    assert EXTRAS, "k8s/extras/results-reader.yaml is missing"
    namespace = kustomize_lite.load_kustomization(K8S)["namespace"]
    claims = {o["metadata"]["name"] for o in _by_kind(rendered, "PersistentVolumeClaim")}
    for doc in _extras():
        assert doc["metadata"]["namespace"] == namespace
        for _, spec in _pods([doc]):
            used = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]
                    if "persistentVolumeClaim" in v}
            assert used and used <= claims


def test_renderer_refuses_files_outside_the_kustomization(tmp_path: Path) -> None:
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    (root / "settings.yaml").unlink()
    (root / "settings.yaml").symlink_to(deploycheck.SETTINGS_FILE)
    with pytest.raises(kustomize_lite.KustomizeError, match="not in or below"):
        kustomize_lite.build(root)


def test_renderer_refuses_unknown_kustomization_fields(tmp_path: Path) -> None:
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    with (root / "kustomization.yaml").open("a") as handle:
        handle.write("\nnamePrefix: x-\n")
    with pytest.raises(kustomize_lite.KustomizeError, match="unsupported"):
        kustomize_lite.build(root)


def test_configmap_hash_matches_kustomize() -> None:
    # Value printed by `kubectl kustomize` (kustomize v5.5.0) for this exact data.
    assert kustomize_lite.configmap_hash({"settings.yaml": "workers: 2\n"}) == "khf8ghgm2c"


def _real_kustomize() -> list[str] | None:
    """A real kustomize: $KUSTOMIZE (a binary), `kustomize`, or kubectl's built-in one (v4+)."""
    explicit = os.environ.get("KUSTOMIZE")
    if explicit:
        return [explicit, "build"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if kubectl:
        try:
            out = subprocess.run([kubectl, "version", "--client"], capture_output=True,
                                 text=True, timeout=60, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = re.search(r"Kustomize Version: v(\d+)", out)
        if match and int(match.group(1)) >= 4:  # replacements need kustomize >= 4.1
            return [kubectl, "kustomize"]
    return None


def test_same_output_as_real_kustomize(rendered: list[Obj]) -> None:
    command = _real_kustomize()
    if command is None:
        pytest.skip("no kustomize binary or kubectl with kustomize >= v4 on PATH "
                    "(set KUSTOMIZE or KUBECTL to one)")
    done = subprocess.run([*command, str(K8S)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    real = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert real == rendered


def test_liveness_probes_ask_the_liveness_service(rendered: list[Obj]) -> None:
    # Readiness follows the overall status (NOT_SERVING while loading and draining); startup
    # and liveness ask the `liveness` service, which stays SERVING unless the process stalls.
    from hogwild.protocol.health import LIVENESS

    for _, _, container in _hogwild_containers(rendered):
        assert "service" not in container["readinessProbe"]["grpc"]
        for name in ("startupProbe", "livenessProbe"):
            assert container[name]["grpc"]["service"] == LIVENESS, name
    # Workers must reach the coordinator while it is NOT_SERVING (loading, draining).
    for service in ("hogwild-coordinator", "hogwild-workers"):
        assert _one(rendered, "Service", service)["spec"]["publishNotReadyAddresses"] is True


def test_tls_credentials_come_from_a_read_only_secret(rendered: list[Obj],
                                                      tmp_path: Path) -> None:
    """Every hogwild container runs mutual TLS with a token, from the Secret `hogwild-tls`
    holding the files `hogwild certs` writes (its own role's certificate), mounted read-only
    and readable by the pod's group only."""
    from hogwild.certs import FILES

    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(_settings_configmap(rendered)["data"]["settings.yaml"])
    for obj, spec, container in _hogwild_containers(rendered):
        role = container["name"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        loaded = deploycheck.load_with(_container_env(container), settings_file,
                                       container["args"])
        assert loaded.tls_cert.endswith(f"/{role}.crt") and loaded.tls_key.endswith(f"/{role}.key")
        for path in (loaded.tls_ca, loaded.tls_cert, loaded.tls_key, loaded.auth_token_file):
            directory, name = path.rsplit("/", 1)
            assert name in FILES, f"{role}: {name} is not a file `hogwild certs` writes"
            mount = mounts[directory]
            assert mount.get("readOnly") is True
            secret = volumes[mount["name"]]["secret"]
            assert secret["secretName"] == "hogwild-tls"
            assert secret["defaultMode"] & 0o007 == 0, "keys readable by others"
