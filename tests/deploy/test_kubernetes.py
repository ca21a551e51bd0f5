"""k8s/: render the kustomization offline, validate every object, check it against the CLI."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hogwild.cluster.transport.security import require_tls
from hogwild.engine.treeshape import children, parent
from hogwild.errors import EXIT_LEFT, EXIT_QUARANTINED, EXIT_STALLED

try:  # imported as a package module or as a rootdir-relative script
    from . import deploycheck, kustomize_lite
except ImportError:
    import deploycheck  # type: ignore[no-redef]
    import kustomize_lite  # type: ignore[no-redef]

REPO = deploycheck.REPO
K8S = REPO / "k8s"
# The Jobs of one run, named after its run id (run/kustomization.yaml's nameSuffix).
RUN_DIR = "run"
FIRST_RUN = "run1"  # the run id as shipped
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


def _job(objects: list[Obj], role: str) -> Obj:
    """The one Job of a role (its component label), whatever run id its name carries."""
    found = [o for o in _by_kind(objects, "Job")
             if o["metadata"]["labels"]["app.kubernetes.io/component"] == role]
    assert len(found) == 1, f"expected one {role} Job, found {len(found)}"
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
        ("Service", "hogwild-workers"), ("Job", f"hogwild-worker-{FIRST_RUN}"),
        ("Job", f"hogwild-coordinator-{FIRST_RUN}")])
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

    job = _job(rendered, "coordinator")
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
    workers_file = root / RUN_DIR / "workers.yaml"
    docs = list(yaml.safe_load_all(workers_file.read_text()))
    (job,) = [d for d in docs if d["kind"] == "Job"]
    job["spec"]["completions"] = count
    workers_file.write_text(yaml.safe_dump_all(docs))
    return kustomize_lite.build(root)


def _workers(objects: list[Obj]) -> Obj:
    return _job(objects, "worker")


def _coordinator_env(objects: list[Obj]) -> dict[str, Any]:
    job = _job(objects, "coordinator")
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
    job = _job(objects, "coordinator")
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
                continue  # the coordinator, at its own name under the same Service
            host = advertised[j].rpartition(":")[0]
            label, _, rest = host.partition(".")
            assert "." + rest == wildcard and label == f"{workers['metadata']['name']}-{j}", host


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
        # Prometheus scrapes the metrics port the pod's annotations name.
        metrics = int(env["HOGWILD_METRICS_PORT"])
        assert [p["containerPort"] for p in container["ports"]] == [port[role], health, metrics]
        annotations = obj["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(metrics)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == health, f"{role} {probe}"
        if role == "worker":
            coordinator = env["HOGWILD_COORDINATOR_ADDRESS"]
            assert deploycheck.port_of(coordinator) == settings.coordinator_port
            # The name the coordinator's pod gets, on the port it listens on.
            assert coordinator.rpartition(":")[0] == _pod_fqdn(rendered, "coordinator")
            assert deploycheck.port_of(env["HOGWILD_ADVERTISE_ADDRESS"]) == settings.worker_port
    workers_svc = _one(rendered, "Service", "hogwild-workers")
    assert workers_svc["spec"]["ports"][0]["port"] == settings.worker_port


def _pod_fqdn(objects: list[Obj], role: str, index: int = 0) -> str:
    """The DNS name Kubernetes gives a role's pod: <hostname>.<subdomain>.<namespace>.svc...,
    the subdomain being a headless Service that selects the pod (publishing it unready too);
    an Indexed Job's pod is named <Job name>-<index> unless its template sets a hostname."""
    job = _job(objects, role)
    template = job["spec"]["template"]
    spec = template["spec"]
    svc = _one(objects, "Service", spec["subdomain"])
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"].items() <= template["metadata"]["labels"].items(), \
        f"{svc['metadata']['name']} does not select the {role} pods: they get no DNS name"
    if "hostname" in spec:
        hostname = spec["hostname"]
    else:
        assert job["spec"]["completionMode"] == "Indexed"
        hostname = f"{job['metadata']['name']}-{index}"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", hostname), hostname
    return f"{hostname}.{spec['subdomain']}.{job['metadata']['namespace']}.svc.cluster.local"


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
    text, by the shell command the docs give for signalling one (`kill -NAME PID`). Each
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


def test_workers_wait_for_the_name_of_their_coordinator_to_appear(rendered: list[Obj]) -> None:
    """The headless Service publishes the coordinator's name only once its pod has an
    address, so workers that start first find no such name: a real `hogwild worker` keeps
    trying until connect_timeout, then ends as with a lost coordinator (a new pod), not as
    with a bad setting (the Job failed at once)."""
    rules = _workers(rendered)["spec"]["podFailurePolicy"]["rules"]
    (fail_job,) = [r for r in rules if r["action"] == "FailJob"]
    unresolved = "hogwild-coordinator-run1.hogwild-workers.hogwild.invalid:50051"  # RFC 6761
    done = subprocess.run([sys.executable, "-m", "hogwild.cli", "worker", "--insecure",
                           "--coordinator", unresolved, "--connect-timeout", "3", "--port", "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and done.returncode not in fail_job["onExitCodes"]["values"]
    assert f"cannot reach the coordinator at {unresolved} within connect_timeout" in \
        done.stdout + done.stderr


def _coordinator_exit_code(env: dict[str, str], tmp_path: Path, *args: str,
                           signum: int = 0) -> int:
    """The exit code of a real `hogwild coordinator` with the pod's hogwild settings from
    ``env`` (on loopback, port 0, outputs in ``tmp_path``); with ``signum``, sent that signal
    once it waits for its workers, by the shell command the docs give for it."""
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
    Job at once; SIGUSR1, the docs' way to end a run early, does not hand over."""
    spec = _job(rendered, "coordinator")["spec"]
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
    # A run that ended with its outputs written but not as asked (members quarantined,
    # training stalled) is over: a new pod would find nothing to resume and start afresh.
    assert {EXIT_QUARANTINED, EXIT_STALLED} <= fail_at_once
    # Before training there is nothing to write either way; SIGUSR1 is the finishing signal.
    ended = _coordinator_exit_code(env, tmp_path, signum=signal.SIGUSR1)
    assert ended not in (0, EXIT_LEFT) and ended not in fail_at_once


def test_the_headless_service_selects_every_hogwild_pod_and_only_those(
        rendered: list[Obj]) -> None:
    """One headless Service names the pods of both roles (each gets <hostname>.<subdomain>
    only if the Service selects it), and no other pod, such as the results reader."""
    svc = _one(rendered, "Service", "hogwild-workers")
    selector = svc["spec"]["selector"].items()
    for role in deploycheck.ROLES:
        template = _job(rendered, role)["spec"]["template"]
        assert selector <= template["metadata"]["labels"].items(), f"no DNS name for {role}"
        assert template["spec"]["subdomain"] == svc["metadata"]["name"]
        assert svc["spec"]["ports"][0]["targetPort"] in {
            p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    for doc in _extras():
        assert not selector <= doc["metadata"]["labels"].items(), doc["metadata"]["name"]


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


def _real_build(root: Path) -> list[Obj]:
    """`kustomize build` by the real thing (the test skips without one)."""
    command = _real_kustomize()
    if command is None:
        pytest.skip("no kustomize binary or kubectl with kustomize >= v4 on PATH "
                    "(set KUSTOMIZE or KUBECTL to one)")
    done = subprocess.run([*command, str(root)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("run", ["as shipped", "run2 with other settings"])
def test_same_output_as_real_kustomize(run: str, tmp_path: Path) -> None:
    root = K8S if run == "as shipped" else _next_run(tmp_path, "-run2", epochs=3)
    assert _real_build(root) == kustomize_lite.build(root)


def test_liveness_probes_ask_the_liveness_service(rendered: list[Obj]) -> None:
    # Readiness follows the overall status (NOT_SERVING while loading and draining); startup
    # and liveness ask the `liveness` service, which stays SERVING unless the process stalls.
    from hogwild.cluster.transport.health import LIVENESS

    for _, _, container in _hogwild_containers(rendered):
        assert "service" not in container["readinessProbe"]["grpc"]
        for name in ("startupProbe", "livenessProbe"):
            assert container[name]["grpc"]["service"] == LIVENESS, name
    # Workers must reach the coordinator while it is NOT_SERVING (loading, draining): the
    # Service that publishes its name does so for pods not ready too.
    assert _one(rendered, "Service", "hogwild-workers")["spec"]["publishNotReadyAddresses"]


def test_tls_credentials_come_from_a_read_only_secret(rendered: list[Obj],
                                                      tmp_path: Path) -> None:
    """Every hogwild container runs mutual TLS with a token, from the Secret `hogwild-tls`
    holding the files `hogwild certs` writes (its own role's certificate), mounted read-only
    and readable by the pod's group only."""
    from hogwild.cluster.transport.certs import FILES

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


# --- Runs: each run's Jobs are named after its id; everything else is shared ---------------

def _set_run_id(root: Path, suffix: str) -> None:
    """What the Kubernetes page's `(cd k8s/run && kustomize edit set namesuffix -- SUFFIX)` does: with
    a kustomize program, that very command; without one, the same one-line edit by hand."""
    run = root / RUN_DIR
    kustomize = os.environ.get("KUSTOMIZE") or shutil.which("kustomize")
    if kustomize:
        subprocess.run([kustomize, "edit", "set", "namesuffix", "--", suffix], cwd=run,
                       check=True, timeout=60, capture_output=True)
        return
    path = run / "kustomization.yaml"
    text, count = re.subn(r"(?m)^nameSuffix: .*$", f"nameSuffix: {suffix}", path.read_text())
    assert count == 1, f"{path}: no single nameSuffix line to set the run id on"
    path.write_text(text)


def _next_run(tmp_path: Path, suffix: str, epochs: int | None = None) -> Path:
    """A copy of k8s/ set to the run id ``suffix`` (and, given ``epochs``, other settings)."""
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    _set_run_id(root, suffix)
    if epochs is not None:
        path = root / "settings.yaml"
        text, count = re.subn(r"(?m)^epochs: .*$", f"epochs: {epochs}", path.read_text())
        assert count == 1
        path.write_text(text)
    return root


def test_two_runs_have_their_own_jobs_names_and_outputs_and_share_the_rest(
        tmp_path: Path) -> None:
    """A second run renders two Jobs of its own, whose workers dial the coordinator of the
    same run at the name its pod gets; the namespace, outputs volume, settings and Service
    are the same objects for both, so an apply leaves them as they are."""
    import kubernetes_validate

    runs = {FIRST_RUN: kustomize_lite.build(K8S),
            "run2": kustomize_lite.build(_next_run(tmp_path, "-run2"))}
    shared = {run: [o for o in objects if o["kind"] != "Job"] for run, objects in runs.items()}
    assert shared[FIRST_RUN] == shared["run2"]
    assert {o["kind"] for o in shared["run2"]} == {
        "Namespace", "ConfigMap", "PersistentVolumeClaim", "Service"}
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(_settings_configmap(runs["run2"])["data"]["settings.yaml"])
    dns: dict[str, set[str]] = {}
    for run, objects in runs.items():
        for obj in objects:
            kubernetes_validate.validate(obj, K8S_VERSIONS[0], strict=True)
        jobs = _by_kind(objects, "Job")
        assert {j["metadata"]["name"] for j in jobs} == {
            f"hogwild-coordinator-{run}", f"hogwild-worker-{run}"}
        # No TTL: re-applying a finished run's id must stay a no-op, not a new run.
        assert all("ttlSecondsAfterFinished" not in j["spec"] for j in jobs)
        coordinator = _pod_fqdn(objects, "coordinator")
        assert coordinator.startswith(f"hogwild-coordinator-{run}.")
        (worker,) = _workers(objects)["spec"]["template"]["spec"]["containers"]
        envs = [_container_env(worker, {**DOWNWARD, INDEX_FIELD: str(i)}) for i in range(2)]
        port = deploycheck.settings().coordinator_port
        assert {env["HOGWILD_COORDINATOR_ADDRESS"] for env in envs} == {f"{coordinator}:{port}"}
        advertised = {env["HOGWILD_ADVERTISE_ADDRESS"].rpartition(":")[0] for env in envs}
        assert advertised == {_pod_fqdn(objects, "worker", i) for i in range(2)}
        dns[run] = {coordinator, *advertised}
        # Outputs in the run's own directory on the one volume, and resumed only from there.
        job = _job(objects, "coordinator")
        (container,) = job["spec"]["template"]["spec"]["containers"]
        loaded = deploycheck.load_with(_container_env(container), settings_file,
                                       container["args"])
        assert loaded.out_dir == loaded.resume == f"/out/{run}"
        claims = {v["persistentVolumeClaim"]["claimName"]
                  for v in job["spec"]["template"]["spec"]["volumes"]
                  if "persistentVolumeClaim" in v}
        assert claims == {"hogwild-runs"}
    assert not dns[FIRST_RUN] & dns["run2"], "two runs' pods would share a DNS name"


# Fields of an existing object the API server refuses to change: a batch/v1 Job's spec but
# these (its pod template above all), a PersistentVolumeClaim's spec but its size.
_JOB_MUTABLE = {"parallelism", "suspend", "activeDeadlineSeconds", "ttlSecondsAfterFinished",
                "backoffLimit"}


def _apply(store: dict[tuple[str, str, str], Obj], objects: list[Obj]) -> dict[str, str]:
    """`kubectl apply` of ``objects`` onto ``store`` (a cluster's objects by kind, namespace
    and name; no cluster here), each object on its own as kubectl sends them, the update
    refused where it changes an immutable field. Returns kubectl's word for each object."""
    said = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        name = f"{obj['kind'].lower()}/{meta['name']}"
        old = store.get(key)
        if old is None or old == obj:
            said[name] = "created" if old is None else "unchanged"
            store[key] = obj
            continue
        fixed: list[str] = []
        if obj["kind"] == "Job":
            fixed = sorted(k for k in old["spec"].keys() | obj["spec"].keys()
                           if k not in _JOB_MUTABLE and old["spec"].get(k) != obj["spec"].get(k))
        elif obj["kind"] == "PersistentVolumeClaim":
            sizeless = [{k: v for k, v in o["spec"].items() if k != "resources"}
                        for o in (old, obj)]
            fixed = ["spec"] if sizeless[0] != sizeless[1] else []
        if fixed:
            said[name] = f"invalid: spec.{fixed[0]}: field is immutable"
        else:
            said[name] = "configured"
            store[key] = obj
    return said


def test_a_new_run_is_one_apply_beside_the_runs_before(tmp_path: Path) -> None:
    """The first run's objects are created; its id applied again changes nothing; other
    settings under the same id are refused on the Jobs (what every second run met when the
    Jobs had fixed names); a new id, with other settings too, creates only its own Jobs and
    settings, and leaves everything else, the first run's Jobs included, as it was."""
    store: dict[tuple[str, str, str], Obj] = {}
    first = kustomize_lite.build(K8S)
    assert set(_apply(store, first).values()) == {"created"}
    assert set(_apply(store, first).values()) == {"unchanged"}

    refused = _apply(dict(store), kustomize_lite.build(
        _next_run(tmp_path / "same", f"-{FIRST_RUN}", epochs=3)))
    assert sorted(n for n, said in refused.items() if said.endswith("field is immutable")) == [
        f"job/hogwild-coordinator-{FIRST_RUN}", f"job/hogwild-worker-{FIRST_RUN}"]

    second = kustomize_lite.build(_next_run(tmp_path / "next", "-run2", epochs=3))
    said = _apply(store, second)
    created = sorted(n for n, word in said.items() if word == "created")
    assert created == sorted([f"configmap/{_settings_configmap(second)['metadata']['name']}",
                              "job/hogwild-coordinator-run2", "job/hogwild-worker-run2"])
    assert {word for n, word in said.items() if n not in created} == {"unchanged"}
    assert sorted(name for kind, _, name in store if kind == "Job") == sorted([
        f"hogwild-coordinator-{FIRST_RUN}", f"hogwild-worker-{FIRST_RUN}",
        "hogwild-coordinator-run2", "hogwild-worker-run2"])


def _readme_kubernetes() -> str:
    """The documentation's Kubernetes page (docs/operations/kubernetes.md)."""
    return (REPO / "docs" / "operations" / "kubernetes.md").read_text(encoding="utf-8")


def _readme_commands() -> list[str]:
    """The shell commands of the Kubernetes page's code blocks, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", _readme_kubernetes(), re.DOTALL):
        for line in block.splitlines():
            line = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if line:
                commands.append(line)
    return commands


def test_the_readme_commands_for_a_first_run_and_a_rerun_work(tmp_path: Path) -> None:
    """The Kubernetes page's commands in order, on a copy of k8s/: each `kubectl apply -k k8s/` is
    rendered (by real kustomize too, where there is one) and applied, each `kustomize edit
    set namesuffix` sets the next run id, and every Job a command names exists by then."""
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    store: dict[tuple[str, str, str], Obj] = {}
    applied = edits = 0
    for command in _readme_commands():
        edit = re.fullmatch(r"\(cd k8s/run && kustomize edit set namesuffix -- (\S+)\)", command)
        if edit:
            _set_run_id(root, edit.group(1))
            edits += 1
        elif command == "kubectl apply -k k8s/":
            objects = kustomize_lite.build(root)
            if _real_kustomize() is not None:
                assert _real_build(root) == objects
            said = _apply(store, objects)
            assert not [s for s in said.values() if s.startswith("invalid")], said
            applied += 1
        for job in re.findall(r"\bjob/(\S+)", command):
            assert ("Job", "hogwild", job) in store, f"`{command}`: no Job {job} by then"
    assert (applied, edits) == (2, 1)
    # Job names in the prose (cleanup, failures) are those of a rendered run.
    runs = set(re.findall(r"\bhogwild-(?:coordinator|worker)-(run\d+)\b", _readme_kubernetes()))
    for run in runs:
        objects = kustomize_lite.build(_next_run(tmp_path / run, f"-{run}"))
        names = {j["metadata"]["name"] for j in _by_kind(objects, "Job")}
        for job in re.findall(rf"\bhogwild-(?:coordinator|worker)-{run}\b", _readme_kubernetes()):
            assert job in names


def test_a_run_id_must_begin_with_a_dash(tmp_path: Path) -> None:
    """The run id is the nameSuffix after its '-': a suffix without one stops the build
    with kustomize's own message, here as in kustomize."""
    root = _next_run(tmp_path, "run2")
    with pytest.raises(kustomize_lite.KustomizeError, match="options.index 1 is out of bounds"):
        kustomize_lite.build(root)
    command = _real_kustomize()
    if command is not None:
        done = subprocess.run([*command, str(root)], capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode != 0 and "options.index 1 is out of bounds" in done.stderr


def test_renderer_suffixes_only_objects_nothing_refers_to(tmp_path: Path) -> None:
    # kustomize renames the references to a suffixed ConfigMap, Service or claim; this
    # renderer does not, so it refuses rather than render references to missing names.
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    run = root / RUN_DIR / "kustomization.yaml"
    run.write_text(run.read_text().replace("  - workers.yaml\n",
                                           "  - workers.yaml\n  - claim.yaml\n"))
    shutil.copy(K8S / "storage.yaml", root / RUN_DIR / "claim.yaml")
    with pytest.raises(kustomize_lite.KustomizeError, match="nameSuffix on PersistentVolumeClaim"):
        kustomize_lite.build(root)


def _started(argv: list[str], env: dict[str, str], cwd: Path, ready: str) -> tuple[
        subprocess.Popen[bytes], int]:
    """A real `hogwild` process and the port it printed in its line ``ready`` + PORT
    (its output goes to a file: nothing need read it while it runs)."""
    log = cwd / f"{argv[0]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hogwild.cli", *argv], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=cwd)
    for _ in range(600):
        found = re.search(re.escape(ready) + r"(\d+)", log.read_text(errors="replace"))
        if found:
            return proc, int(found.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError(f"hogwild {argv[0]} did not start:\n{log.read_text()}")


def test_the_documented_certificates_cover_every_runs_names(tmp_path: Path) -> None:
    """Credentials made as the Kubernetes page says (`hogwild certs --hosts ...`, once) serve every
    run: a worker of run2 checks the certificates of its coordinator and of its peers against
    the names it dials, run2's, over real mutual TLS. A name of a per-run Service
    (hogwild-coordinator-run2) would not be covered."""
    (hosts,) = re.findall(r"hogwild certs --out certs --hosts '([^']+)'", _readme_kubernetes())
    subprocess.run([sys.executable, "-m", "hogwild.cli", "certs", "--out", "certs", "--hosts",
                    hosts], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    objects = kustomize_lite.build(_next_run(tmp_path, "-run2"))

    def tls(role: str) -> dict[str, str]:
        return {"HOGWILD_TLS_CA": "certs/ca.crt", "HOGWILD_TLS_CERT": f"certs/{role}.crt",
                "HOGWILD_TLS_KEY": f"certs/{role}.key", "HOGWILD_AUTH_TOKEN_FILE": "certs/token"}

    def answers(port: int, name: str) -> bool:
        """`hogwild health --tls` as a worker, checking the server's certificate for name."""
        done = subprocess.run([sys.executable, "-m", "hogwild.cli", "health", "--tls",
                               "--service", "liveness", f"127.0.0.1:{port}"],
                              env={**os.environ, **tls("worker"),
                                   "HOGWILD_TLS_SERVER_NAME": name},
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              check=False)
        return done.returncode == 0 and done.stdout.strip() == "SERVING"

    servers = [
        _started(["coordinator", "--port", "0", "--bind-host", "127.0.0.1", "--workers", "2",
                  "--out", "out", "--register-timeout", "60"], tls("coordinator"), tmp_path,
                 "coordinator listening on port "),
        _started(["worker", "--port", "0", "--bind-host", "127.0.0.1", "--coordinator", NOBODY,
                  "--connect-timeout", "60"], tls("worker"), tmp_path,
                 "worker listening on port "),
    ]
    try:
        (_, coordinator_port), (_, worker_port) = servers
        assert answers(coordinator_port, _pod_fqdn(objects, "coordinator"))
        assert answers(worker_port, _pod_fqdn(objects, "worker", 1))
        assert not answers(coordinator_port, "hogwild-coordinator-run2")
    finally:
        for proc, _ in servers:
            proc.kill()
            proc.wait()
