"""docker-compose.yml: the compose-spec schema, plus what the schema cannot see."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hogwild.cluster.transport.security import require_tls

try:  # imported as a package module or as a rootdir-relative script
    from . import composefile, deploycheck
except ImportError:
    import composefile  # type: ignore[no-redef]
    import deploycheck  # type: ignore[no-redef]

REPO = composefile.REPO
# Environments a user may run compose with: the defaults, and a scaled-up run.
ENVIRONMENTS = [{}, {"HOGWILD_WORKERS": "4"}, {"HOGWILD_WORKERS": "4", "HOST_UID": "1234"}]
_DURATION = re.compile(r"^(\d+(\.\d+)?(us|ms|s|m|h))+$")


def _services(env: dict[str, str]) -> dict[str, Any]:
    return composefile.load(env)["services"]  # type: ignore[no-any-return]


def test_compose_file_matches_the_compose_spec_schema() -> None:
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.compose-spec", str(composefile.COMPOSE_FILE)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_schema_check_rejects_a_broken_compose_file(tmp_path: Path) -> None:
    # The schema check above must be able to fail: a misspelt service key is caught.
    broken = composefile.COMPOSE_FILE.read_text().replace("stop_grace_period:",
                                                          "stop_grace_periods:", 1)
    target = tmp_path / "docker-compose.yml"
    target.write_text(broken)
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.compose-spec", str(target)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0


def test_both_roles_are_services_built_from_one_image() -> None:
    services = _services({})
    assert set(services) == set(deploycheck.ROLES)
    images = {s["image"] for s in services.values()}
    assert len(images) == 1
    for name, service in services.items():
        args = deploycheck.parse_command(service["command"])
        assert args.command == name
        assert "container_name" not in service, "a fixed name prevents scaling"


def test_depends_on_targets_exist_and_wait_for_health() -> None:
    services = _services({})
    for name, service in services.items():
        depends = service.get("depends_on", {})
        entries = depends if isinstance(depends, dict) else {d: {} for d in depends}
        for target, spec in entries.items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
            if spec.get("condition") == "service_healthy":
                assert "healthcheck" in services[target], f"{target} has no healthcheck"
    assert services["worker"]["depends_on"]["coordinator"]["condition"] == "service_healthy"


def _schema() -> dict[str, Any]:
    import check_jsonschema

    path = Path(check_jsonschema.__file__).parent / "builtin_schemas/vendor/compose-spec.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _numeric_fields(doc: Any, schema: dict[str, Any], root: dict[str, Any],
                    path: str = "") -> Iterator[tuple[str, Any, str]]:
    """(path, value, type) for every value the schema declares as a number.

    The compose spec types such fields ["integer", "string"] (the string only so that
    ${VAR} can stand there); fields that are really text or mixed ("expose": ["string",
    "number"], environment values with booleans and null) are not numbers.
    """
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if (types and types[0] in ("integer", "number") and set(types) <= {"integer", "number",
                                                                        "string"}
            and not isinstance(doc, (dict, list))):
        yield path, doc, types[0]
    branches = schema.get("allOf", []) + schema.get("anyOf", []) + schema.get("oneOf", [])
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        branches.append(root.get("definitions", root.get("$defs", {}))[name])
    for branch in branches:
        yield from _numeric_fields(doc, branch, root, path)
    if isinstance(doc, dict):
        for key, value in doc.items():
            sub = schema.get("properties", {}).get(key)
            if sub is None:
                for pattern, candidate in schema.get("patternProperties", {}).items():
                    if re.search(pattern, str(key)):
                        sub = candidate
                        break
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                yield from _numeric_fields(value, sub, root, f"{path}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(doc):
            yield from _numeric_fields(item, schema["items"], root, f"{path}[{index}]")


def test_numeric_fields_are_numbers() -> None:
    schema = _schema()
    raw = composefile.load_raw()
    seen = {path for path, _, _ in _numeric_fields(raw, schema, schema)}
    # The walk reaches the numeric fields we use.
    assert {".services.worker.deploy.replicas", ".services.worker.healthcheck.retries"} <= seen
    for path, value, kind in _numeric_fields(raw, schema, schema):
        if isinstance(value, str):
            assert "$" in value, f"{path}: write {value!r} as a number, not a string"
    for env in ENVIRONMENTS:
        for path, value, kind in _numeric_fields(composefile.load(env), schema, schema):
            if isinstance(value, str):
                pattern = r"-?\d+" if kind == "integer" else r"-?\d+(\.\d+)?"
                assert re.fullmatch(pattern, value), f"{path} = {value!r} is not an {kind}"


def test_durations_use_compose_duration_syntax() -> None:
    for name, service in _services({}).items():
        durations = {k: v for k, v in service.get("healthcheck", {}).items()
                     if k in ("interval", "timeout", "start_period", "start_interval")}
        durations["stop_grace_period"] = service["stop_grace_period"]
        for key, value in durations.items():
            assert isinstance(value, str) and _DURATION.match(value), f"{name}.{key}={value!r}"


def test_healthchecks_call_the_hogwild_cli_on_the_settings_ports() -> None:
    ports = {"coordinator": deploycheck.settings().coordinator_port,
             "worker": deploycheck.settings().worker_port}
    for name, service in _services({}).items():
        test = service["healthcheck"]["test"]
        assert isinstance(test, list) and test[0] == "CMD", "exec form: no shell in between"
        assert test[1] == "hogwild", "the image's console script"
        args = deploycheck.parse_command(test[2:])
        assert args.command == "health"
        assert args.address == f"localhost:{ports[name]}"
        assert args.timeout < _seconds(service["healthcheck"]["timeout"])
        metrics = service["environment"]["HOGWILD_METRICS_PORT"]
        assert [str(p) for p in service["expose"]] == [str(ports[name]), str(metrics)]


def _seconds(duration: str) -> float:
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * units[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(us|ms|s|m|h)",
                                                               duration))


def test_volumes_exist_and_settings_are_mounted_read_only() -> None:
    raw = composefile.load_raw()
    named = set(raw.get("volumes") or {})
    for name, service in _services({}).items():
        entries = {target: (host, ro) for host, target, ro in composefile.mounts(service)}
        for host, target, _ in composefile.mounts(service):
            if isinstance(host, Path):
                spec = next(v for v in service["volumes"] if isinstance(v, dict)
                            and v["target"] == target)
                created = spec.get("bind", {}).get("create_host_path", False)
                assert created or host.exists(), f"{name}: bind source {host} does not exist"
            else:
                assert host in named, f"{name}: volume {host!r} is not declared"
        env = composefile.environment(service)
        settings_target = env["HOGWILD_CONFIG"]
        assert settings_target in entries, f"{name}: {settings_target} is not mounted"
        host, read_only = entries[settings_target]
        assert host == deploycheck.SETTINGS_FILE and read_only


def test_environment_is_valid_settings_for_every_role_and_scale() -> None:
    for env in ENVIRONMENTS:
        for name, service in _services(env).items():
            environ = composefile.environment(service)
            settings_path = composefile.host_path(service, environ["HOGWILD_CONFIG"])
            loaded = deploycheck.load_with(environ, settings_path, service["command"])
            # Mutual TLS, not plain text asked for: the role starts (it refuses plain text).
            require_tls(loaded, name)
            assert loaded.tls_ca and not loaded.insecure
            if name == "worker":
                # advertise_address left empty: each container announces its own address.
                assert loaded.advertise_address == ""
                host, _, port = loaded.coordinator_address.rpartition(":")
                assert host == "coordinator" and int(port) == loaded.coordinator_port
            else:
                # Outputs land on the host (./runs), in a volume the coordinator can write.
                out = composefile.host_path(service, loaded.out_dir)
                assert out.is_relative_to(REPO / "runs")


def test_worker_count_drives_replicas_and_the_coordinator_together() -> None:
    for count in ("1", "3", "7"):
        services = _services({"HOGWILD_WORKERS": count})
        replicas = int(services["worker"]["deploy"]["replicas"])
        waits_for = composefile.environment(services["coordinator"])["HOGWILD_WORKERS"]
        sized_for = composefile.environment(services["worker"])["HOGWILD_WORKERS"]
        assert replicas == int(waits_for) == int(sized_for) == int(count)
    default = _services({})
    assert int(default["worker"]["deploy"]["replicas"]) == int(
        composefile.environment(default["coordinator"])["HOGWILD_WORKERS"])


def test_interpolation_variables_cannot_break_a_local_hogwild() -> None:
    # A variable a user exports for compose stays in their shell: any HOGWILD_* one must be a
    # real setting, or a plain `hogwild` started from that shell would refuse to run.
    for name in composefile.variables(composefile.load_raw()):
        if name.startswith("HOGWILD_"):
            deploycheck.check_env_keys({name: ""})


def test_sigterm_drain_has_time_and_an_init_process() -> None:
    for name, service in _services({}).items():
        assert service.get("init") is True, f"{name}: PID 1 must forward signals"
        assert _seconds(service["stop_grace_period"]) >= 30
        assert service.get("restart") == "no"


@pytest.mark.parametrize("text, expected", [
    ("${HOGWILD_WORKERS:-2}", "2"), ("$${literal}", "${literal}"), ("a${X-b}c", "abc")])
def test_interpolation_helper(text: str, expected: str) -> None:
    assert composefile.interpolate_text(text, {}) == expected


def test_tls_credentials_come_from_compose_secrets() -> None:
    """Both roles run mutual TLS with a token; the files come from `secrets:` made by
    `hogwild certs --out secrets`, each service mounting only its own role's key."""
    from hogwild.cluster.transport.certs import FILES

    declared = composefile.load_raw()["secrets"]
    for name, service in _services({}).items():
        environ = composefile.environment(service)
        settings_path = composefile.host_path(service, environ["HOGWILD_CONFIG"])
        loaded = deploycheck.load_with(environ, settings_path, service["command"])
        targets = {f"/run/secrets/{s['target']}": s["source"] for s in service["secrets"]}
        for path in (loaded.tls_ca, loaded.tls_cert, loaded.tls_key, loaded.auth_token_file):
            assert path in targets, f"{name}: {path} is not a mounted secret"
            source = Path(declared[targets[path]]["file"])
            assert source.parent == Path("secrets") and source.name in FILES
            assert source.name == Path(path).name
        assert loaded.tls_cert.endswith(f"{name}.crt") and loaded.tls_key.endswith(f"{name}.key")
        other = "worker" if name == "coordinator" else "coordinator"
        assert not any(t.endswith(f"{other}.key") for t in targets), f"{name} holds {other}.key"
        # Containers are reached by addresses no certificate can list: one name is checked.
        assert loaded.tls_server_name
