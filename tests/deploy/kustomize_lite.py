"""A small kustomize renderer for offline checks: only the features k8s/kustomization.yaml uses.

Supported: resources (files, and directories holding a kustomization of their own), namespace,
nameSuffix (on workloads, which nothing refers to by name), labels (pairs; includeTemplates),
configMapGenerator (files/literals, kustomize's content-hash suffix, name references from pod
specs), images, replicas and replacements (source/targets with dotted field paths and
[key=value] list selectors, a source's delimiter/index options; objects are selected by their
names before or after nameSuffix, as kustomize does). Anything else in a kustomization is an
error, so a manifest never silently depends on a feature this renderer ignores. When a real
kustomize (or kubectl) is installed, the deploy tests also compare this output with it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

SUPPORTED_KEYS = {"apiVersion", "kind", "namespace", "nameSuffix", "labels", "resources",
                  "configMapGenerator", "images", "replicas", "replacements"}

# Kinds that live outside namespaces (the ones a small app may carry).
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole",
                  "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass"}

# kustomize's default ("legacy") output order: these kinds first, in this order, then the rest.
_ORDER_FIRST = ["Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition",
                "ServiceAccount", "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding",
                "ClusterRoleBinding", "ConfigMap", "Secret", "Endpoints", "Service", "LimitRange",
                "PriorityClass", "PersistentVolume", "PersistentVolumeClaim", "Deployment",
                "StatefulSet", "CronJob", "PodDisruptionBudget"]
_ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]

_WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
              "ReplicationController"}


class KustomizeError(Exception):
    """The kustomization uses something this renderer does not support, or is inconsistent."""


def load_kustomization(root: Path) -> Obj:
    """The parsed kustomization.yaml of directory ``root``."""
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        path = root / name
        if path.is_file():
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise KustomizeError(f"{path} is not a mapping")
            return data
    raise KustomizeError(f"no kustomization file in {root}")


def build(root: Path) -> list[Obj]:
    """Render the kustomization in ``root`` the way `kustomize build` does (for our features)."""
    return sorted(_build(Path(root), {}), key=_sort_key)


def _build(root: Path, previous: dict[int, list[str]]) -> list[Obj]:
    """The objects of the kustomization in ``root``, unsorted; ``previous`` records the names
    an object had before a nameSuffix (keyed by id of the object), for selectors."""
    kust = load_kustomization(root)
    unknown = set(kust) - SUPPORTED_KEYS
    if unknown:
        raise KustomizeError(f"unsupported kustomization fields: {sorted(unknown)}")

    objects: list[Obj] = []
    for entry in kust.get("resources", []):
        objects.extend(_load_resource(root, entry, previous))
    generated: dict[str, str] = {}
    for gen in kust.get("configMapGenerator", []):
        cm = _generate_configmap(root, gen)
        generated[gen["name"]] = cm["metadata"]["name"]
        objects.append(cm)
    _check_unique(objects)

    if "nameSuffix" in kust:
        _apply_name_suffix(objects, str(kust["nameSuffix"]), previous)
    if "namespace" in kust:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = kust["namespace"]
    for entry in kust.get("labels", []):
        _apply_labels(objects, entry)
    for entry in kust.get("replicas", []):
        _apply_replicas(objects, entry)
    for entry in kust.get("images", []):
        _apply_image(objects, entry)
    for entry in kust.get("replacements", []):
        _apply_replacement(objects, entry, previous)
    _fix_configmap_refs(objects, generated)
    return objects


def _apply_name_suffix(objects: list[Obj], suffix: str, previous: dict[int, list[str]]) -> None:
    for obj in objects:
        # kustomize also renames the references to a renamed object (a ConfigMap's in pod
        # specs, a Service's in Ingresses...); this renderer does not, so it renames only
        # workloads, which nothing refers to by name.
        if obj["kind"] not in _WORKLOADS:
            raise KustomizeError(f"nameSuffix on {obj['kind']}/{obj['metadata']['name']}: only "
                                 f"workloads ({', '.join(sorted(_WORKLOADS))}) are supported")
        previous.setdefault(id(obj), []).append(obj["metadata"]["name"])
        obj["metadata"]["name"] += suffix


def _sort_key(obj: Obj) -> tuple[int, str, str]:
    kind = obj["kind"]
    if kind in _ORDER_FIRST:
        rank = _ORDER_FIRST.index(kind)
    elif kind in _ORDER_LAST:
        rank = len(_ORDER_FIRST) + 1 + _ORDER_LAST.index(kind)
    else:
        rank = len(_ORDER_FIRST)
    return rank, kind if rank == len(_ORDER_FIRST) else "", obj["metadata"]["name"]


def _load_resource(root: Path, entry: str, previous: dict[int, list[str]]) -> list[Obj]:
    path = (root / entry).resolve()
    if not path.is_relative_to(root.resolve()):
        raise KustomizeError(f"resource {entry} is outside {root} (kustomize's load restrictor)")
    if path.is_dir():
        # A directory below: its own kustomization, built first (its nameSuffix, namespace and
        # replacements apply to its objects only; this one's apply to them afterwards).
        return _build(root / entry, previous)
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "metadata" not in doc:
            raise KustomizeError(f"{entry}: every document must be an object with kind+metadata")
    return docs


def _check_unique(objects: list[Obj]) -> None:
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in seen:
            raise KustomizeError(f"duplicate {key[0]}/{key[1]}")
        seen.add(key)


def configmap_hash(data: dict[str, str]) -> str:
    """kustomize's name suffix: sha256 of the ConfigMap's JSON form, 10 characters, no vowels.

    kustomize hashes ``{"data": ..., "kind": "ConfigMap", "name": ""}`` as Go's encoding/json
    writes it (sorted keys, HTML characters escaped), then maps 0,1,3,a,e to g,h,k,m,t.
    """
    text = json.dumps({"data": data, "kind": "ConfigMap", "name": ""}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _generate_configmap(root: Path, gen: Obj) -> Obj:
    allowed = {"name", "files", "literals", "options"}
    if set(gen) - allowed:
        raise KustomizeError(f"configMapGenerator fields not supported: {set(gen) - allowed}")
    data: dict[str, str] = {}
    for spec in gen.get("files", []):
        key, _, rel = spec.rpartition("=") if "=" in spec else ("", "", spec)
        # Like kustomize's default load restrictor: the file (symlinks resolved) must be in
        # or below the kustomization's directory.
        path = (root / rel).resolve()
        if not path.is_relative_to(root.resolve()):
            raise KustomizeError(f"{rel} is not in or below {root} (kustomize's load restrictor)")
        data[key or Path(rel).name] = path.read_text(encoding="utf-8")
    for literal in gen.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    options = gen.get("options", {})
    if set(options) - {"disableNameSuffixHash"}:
        raise KustomizeError(f"configMapGenerator options not supported: {options}")
    name = gen["name"]
    if not options.get("disableNameSuffixHash", False):
        name = f"{name}-{configmap_hash(data)}"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": dict(sorted(data.items()))}


def _apply_labels(objects: list[Obj], entry: Obj) -> None:
    if entry.get("includeSelectors"):
        raise KustomizeError("labels.includeSelectors is not supported")
    pairs = entry.get("pairs", {})
    for obj in objects:
        obj["metadata"].setdefault("labels", {}).update(pairs)
        if entry.get("includeTemplates") and obj["kind"] in _WORKLOADS:
            template = obj["spec"]["template"].setdefault("metadata", {})
            template.setdefault("labels", {}).update(pairs)


def _apply_replicas(objects: list[Obj], entry: Obj) -> None:
    matched = [o for o in objects if o["metadata"]["name"] == entry["name"]
               and o["kind"] in {"Deployment", "StatefulSet", "ReplicaSet",
                                 "ReplicationController"}]
    if not matched:
        raise KustomizeError(f"replicas: nothing named {entry['name']}")
    for obj in matched:
        obj["spec"]["replicas"] = int(entry["count"])


def pod_specs(obj: Obj) -> Iterator[Obj]:
    """The pod spec(s) inside a Pod, a workload's template or a CronJob's job template."""
    kind = obj.get("kind")
    if kind == "Pod":
        yield obj["spec"]
    elif kind in _WORKLOADS:
        yield obj["spec"]["template"]["spec"]
    elif kind == "CronJob":
        yield obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def containers(obj: Obj) -> Iterator[Obj]:
    """Every container and init container of an object's pod spec(s)."""
    for spec in pod_specs(obj):
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


def _apply_image(objects: list[Obj], entry: Obj) -> None:
    for obj in objects:
        for container in containers(obj):
            image = container.get("image", "")
            name, tag, digest = _split_image(image)
            if name != entry["name"]:
                continue
            name = entry.get("newName", name)
            if "digest" in entry:
                container["image"] = f"{name}@{entry['digest']}"
            elif "newTag" in entry:
                container["image"] = f"{name}:{entry['newTag']}"
            else:
                container["image"] = name + (f"@{digest}" if digest else f":{tag}" if tag else "")


def _split_image(image: str) -> tuple[str, str, str]:
    name, _, digest = image.partition("@")
    head, sep, tag = name.rpartition(":")
    if sep and "/" not in tag:
        return head, tag, digest
    return name, "", digest


_SEGMENT = re.compile(r"\[(?P<key>[^=\]]+)=(?P<value>[^\]]*)\]|(?P<field>[^.\[\]]+)")


def split_field_path(path: str) -> list[str | tuple[str, str]]:
    """``a.b.[name=x].c`` -> ["a", "b", ("name", "x"), "c"] (kustomize's replacement paths)."""
    out: list[str | tuple[str, str]] = []
    for part in path.split("."):
        match = _SEGMENT.fullmatch(part)
        if match is None:
            raise KustomizeError(f"unsupported field path segment {part!r} in {path!r}")
        if match.group("field") is not None:
            out.append(match.group("field"))
        else:
            out.append((match.group("key"), match.group("value")))
    return out


def get_field(obj: Any, path: str) -> Any:
    """The value at a replacement-style field path; KeyError if any step is missing."""
    node = obj
    for step in split_field_path(path):
        if isinstance(step, tuple):
            found = [item for item in node if isinstance(item, dict)
                     and str(item.get(step[0])) == step[1]]
            if len(found) != 1:
                raise KeyError(f"{path}: {len(found)} items match [{step[0]}={step[1]}]")
            node = found[0]
        elif isinstance(node, list) and step.isdigit():
            node = node[int(step)]
        else:
            node = node[step]
    return node


def _set_field(obj: Any, path: str, value: Any) -> None:
    steps = split_field_path(path)
    parent = get_field(obj, ".".join(_join(s) for s in steps[:-1])) if len(steps) > 1 else obj
    last = steps[-1]
    if not isinstance(last, str) or last not in parent:
        raise KustomizeError(f"replacement target {path} does not exist")
    current = parent[last]
    # Like kustomize: a scalar target keeps its own type (an int copied into a string field
    # stays a string), so env values remain strings.
    if isinstance(current, str) and not isinstance(value, (dict, list)):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    elif isinstance(current, bool) and isinstance(value, str):
        value = value == "true"
    elif isinstance(current, int) and isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    parent[last] = copy.deepcopy(value)


def _join(step: str | tuple[str, str]) -> str:
    return f"[{step[0]}={step[1]}]" if isinstance(step, tuple) else step


def _select(objects: list[Obj], selector: Obj, previous: dict[int, list[str]]) -> list[Obj]:
    allowed = {"kind", "name", "namespace", "group", "version"}
    if set(selector) - allowed:
        raise KustomizeError(f"selector fields not supported: {set(selector) - allowed}")
    chosen = []
    for obj in objects:
        if "kind" in selector and obj["kind"] != selector["kind"]:
            continue
        names = [obj["metadata"]["name"], *previous.get(id(obj), [])]
        if "name" in selector and selector["name"] not in names:
            continue
        if "namespace" in selector and obj["metadata"].get("namespace") != selector["namespace"]:
            continue
        chosen.append(obj)
    return chosen


def _apply_replacement(objects: list[Obj], entry: Obj, previous: dict[int, list[str]]) -> None:
    source = dict(entry["source"])
    field_path = source.pop("fieldPath", "metadata.name")
    options = source.pop("options", {})
    sources = _select(objects, source, previous)
    if len(sources) != 1:
        raise KustomizeError(f"replacement source {entry['source']} matches {len(sources)}")
    value = _source_part(get_field(sources[0], field_path), options)
    for target in entry["targets"]:
        if set(target) - {"select", "fieldPaths"}:
            raise KustomizeError(f"replacement target fields not supported: {set(target)}")
        chosen = _select(objects, target["select"], previous)
        if not chosen:
            raise KustomizeError(f"replacement target {target['select']} matches nothing")
        for obj in chosen:
            for path in target["fieldPaths"]:
                _set_field(obj, path, value)


def _source_part(value: Any, options: Obj) -> Any:
    """A replacement source's value, or with ``delimiter`` its piece number ``index`` (an
    error when there is no such piece, like kustomize's "options.index ... out of bounds")."""
    if set(options) - {"delimiter", "index"}:
        raise KustomizeError(f"replacement source options not supported: {options}")
    if not options.get("delimiter"):
        return value
    pieces = str(value).split(options["delimiter"])
    index = int(options.get("index", 0))
    if not 0 <= index < len(pieces):
        raise KustomizeError(f"options.index {index} is out of bounds for value {value}")
    return pieces[index]


def _fix_configmap_refs(objects: list[Obj], generated: dict[str, str]) -> None:
    """Point pod specs at the generated (hash-suffixed) ConfigMap names."""
    for obj in objects:
        for spec in pod_specs(obj):
            for volume in spec.get("volumes", []):
                if "configMap" in volume:
                    _rename(volume["configMap"], generated)
                for source in volume.get("projected", {}).get("sources", []):
                    if "configMap" in source:
                        _rename(source["configMap"], generated)
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("configMapKeyRef")
                    if ref is not None:
                        _rename(ref, generated)
                for env_from in container.get("envFrom", []):
                    if "configMapRef" in env_from:
                        _rename(env_from["configMapRef"], generated)


def _rename(ref: Obj, generated: dict[str, str]) -> None:
    if ref.get("name") in generated:
        ref["name"] = generated[ref["name"]]
