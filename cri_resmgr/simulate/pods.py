"""A YAML list of pods as a workload: each pod started, in order, as kubelet would.

Accepted: a YAML list of pods, a `kind: List` with `items` (what `kubectl get pods
-o yaml` prints), or several documents. A pod is a Kubernetes Pod (metadata, spec
with containers and initContainers, each with resources.requests/limits), or the
short form {name, namespace, labels, annotations, containers}. Between pods, a step
`{resize: {pod, namespace, container, resources: {requests, limits}}}` resizes a
container of a pod listed before, in place, as kubelet forwards it. Errors name the
file, the pod and the field: "pods.yaml: pod 3 (default/web): containers[0]:
resources.limits.cpu: ...".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from cri_resmgr.bounded import InputError, clip, load_yaml_all, short
from cri_resmgr.policy.quantity import parse_bytes, parse_cpu_milli
from cri_resmgr.simulate.calls import Call, WorkloadError
from cri_resmgr.simulate.inputs import read_text
from cri_resmgr.simulate.podcalls import Container, Ids, Pod, Resize, Started, qos_class, resize_call, start_calls

__all__ = ["read_pods", "parse_pods", "pod_calls", "Resize"]

_POD_KEYS = {"name", "namespace", "uid", "labels", "annotations", "containers", "initContainers"}
_CONTAINER_KEYS = {"name", "resources", "requests", "limits", "labels", "annotations"}
_RESIZE_KEYS = {"pod", "namespace", "container", "resources", "requests", "limits"}
Item = Pod | Resize


def read_pods(path: str) -> list[Item]:
    return parse_pods(read_text(path, "pods file"), path)


def parse_pods(text: str, source: str) -> list[Item]:
    """The pods and resize steps of a YAML text, read at a bounded cost (bounded.py:
    alias bombs, deep nesting and huge numbers are refused); every error quotes what it
    shows short."""
    try:
        docs = [d for d in load_yaml_all(text, source) if d is not None]
    except InputError as e:
        raise WorkloadError(str(e)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise WorkloadError(f"{source}: not YAML{where}: {clip(str(getattr(e, 'problem', None) or e), 100)}") \
            from None
    items: list[Any] = []
    for d in docs:
        if isinstance(d, list):
            items += d
        elif isinstance(d, Mapping) and d.get("kind") == "List":
            items += d.get("items") or []
        else:
            items.append(d)
    if not items:
        raise WorkloadError(f"{source}: no pods")
    out: list[Item] = []
    seen: dict[str, Pod] = {}
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and "resize" in item:
            step = _resize(item, f"{source}: step {i + 1}", seen)
            seen[f"{step.namespace}/{step.pod}"] = step.applied(seen[f"{step.namespace}/{step.pod}"])
            out.append(step)
            continue
        p = _pod(item, f"{source}: pod {i + 1}")
        if str(p) in seen:
            raise WorkloadError(f"{source}: pod {i + 1}: {clip(str(p), 100)} is listed twice")
        seen[str(p)] = p
        out.append(p)
    return out


def pod_calls(items: list[Item]) -> list[Call]:
    ids = Ids()
    calls: list[Call] = []
    started: dict[str, Started] = {}
    for item in items:
        if isinstance(item, Resize):
            pod = f"{item.namespace}/{item.pod}"
            call, started[pod] = resize_call(started[pod], item, f"resize {item}")
            calls.append(call)
            continue
        new, started[str(item)] = start_calls(item, ids, f"pod {item}")
        calls += new
    return calls


def _resize(item: Mapping[str, Any], where: str, pods: Mapping[str, Pod]) -> Resize:
    """A resize step, checked against the pod as it is by then."""
    if set(item) != {"resize"} or not isinstance(item["resize"], Mapping):
        raise WorkloadError(f"{where}: expected {{resize: {{pod, namespace, container, resources}}}}")
    r = item["resize"]
    unknown = [k for k in r if k not in _RESIZE_KEYS]
    if unknown:
        raise WorkloadError(f"{where}: resize: unknown keys {_keys(unknown)} "
                            f"(known: {', '.join(sorted(_RESIZE_KEYS))})")
    namespace = r.get("namespace", "default")
    name, container = r.get("pod"), r.get("container")
    if not all(isinstance(v, str) and v for v in (name, namespace, container)):
        raise WorkloadError(f"{where}: resize: pod, namespace and container must be non-empty strings")
    pod = pods.get(f"{namespace}/{name}")
    who = f"{clip(str(namespace), 60)}/{clip(str(name), 60)}"
    if pod is None:
        raise WorkloadError(f"{where}: resize: no pod {who} listed before it")
    if container not in [c.name for c in pod.containers]:
        raise WorkloadError(f"{where}: resize: pod {who} has no container {short(container, 60)} "
                            "(init containers are not resized)")
    c = _container({"name": container, **{k: r[k] for k in ("resources", "requests", "limits") if k in r}},
                   f"{where}: resize")
    step = Resize(str(name), str(namespace), str(container), c.requests, c.limits)
    before, after = qos_class(pod), qos_class(step.applied(pod))
    if before != after:
        raise WorkloadError(f"{where}: resize of {clip(str(step), 120)} would change the pod's QoS class from "
                            f"{before} to {after}, which Kubernetes refuses")
    return step


def _pod(item: Any, where: str) -> Pod:
    if not isinstance(item, Mapping):
        raise WorkloadError(f"{where}: expected a pod (a mapping), got {type(item).__name__}")
    if "metadata" in item or "spec" in item:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
            raise WorkloadError(f"{where}: metadata and spec must be mappings")
        flat = {k: meta[k] for k in ("name", "namespace", "uid", "labels", "annotations") if k in meta}
        flat.update({k: spec[k] for k in ("containers", "initContainers") if k in spec})
    else:
        flat = dict(item)
        unknown = [k for k in flat if k not in _POD_KEYS]
        if unknown:
            raise WorkloadError(f"{where}: unknown keys {_keys(unknown)} (known: "
                                f"{', '.join(sorted(_POD_KEYS))}, or a Kubernetes Pod with metadata and spec)")
    name = flat.get("name")
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{where}: no name")
    namespace = flat.get("namespace", "default")
    if not isinstance(namespace, str) or not namespace:
        raise WorkloadError(f"{where} ({clip(name, 60)}): namespace: expected a string, got {short(namespace)}")
    where = f"{where} ({clip(namespace, 60)}/{clip(name, 60)})"
    uid = flat.get("uid") or ""
    if not isinstance(uid, (str, int)) or isinstance(uid, bool):
        raise WorkloadError(f"{where}: uid: expected a string, got {short(uid)}")
    containers = _containers(flat.get("containers"), f"{where}: containers", required=True)
    init = _containers(flat.get("initContainers"), f"{where}: initContainers", required=False)
    names = [c.name for c in containers + init]
    if len(set(names)) != len(names):
        raise WorkloadError(f"{where}: container names repeat: {clip(', '.join(names), 120)}")
    return Pod(name=name, namespace=namespace, uid=str(uid), containers=containers,
               init_containers=init, labels=_strings(flat.get("labels"), f"{where}: labels"),
               annotations=_strings(flat.get("annotations"), f"{where}: annotations"))


def _containers(value: Any, where: str, required: bool) -> tuple[Container, ...]:
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (required and not value):
        raise WorkloadError(f"{where}: expected a list of containers")
    return tuple(_container(c, f"{where}[{i}]") for i, c in enumerate(value))


def _container(c: Any, where: str) -> Container:
    if not isinstance(c, Mapping):
        raise WorkloadError(f"{where}: expected a container (a mapping)")
    name = c.get("name")
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{where}: no name")
    where = f"{where} ({clip(name, 60)})"
    resources = c.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise WorkloadError(f"{where}: resources: expected a mapping")
    unknown = [k for k in resources if k not in ("requests", "limits", "claims")]
    if unknown:
        raise WorkloadError(f"{where}: resources: unknown keys {_keys(unknown)}")
    requests = resources.get("requests", c.get("requests"))
    limits = resources.get("limits", c.get("limits"))
    return Container(name=name, requests=_quantities(requests, f"{where}: resources.requests"),
                     limits=_quantities(limits, f"{where}: resources.limits"),
                     labels=_strings(c.get("labels"), f"{where}: labels"),
                     annotations=_strings(c.get("annotations"), f"{where}: annotations"))


def _quantities(value: Any, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where}: expected a mapping such as {{cpu: 500m, memory: 64Mi}}")
    out: dict[str, int] = {}
    for key, text in value.items():
        if key not in ("cpu", "memory"):
            continue  # hugepages, ephemeral storage, devices: nothing a CPU policy reads
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise WorkloadError(f"{where}.{key}: expected a quantity, got {short(text)}")
        try:
            out[key] = parse_cpu_milli(text) if key == "cpu" else parse_bytes(text)
        except ValueError as e:
            raise WorkloadError(f"{where}.{key}: {clip(str(e), 120)}") from None
    return out


def _keys(keys: list[Any]) -> str:
    """Unknown keys for a message: a few, each short (keys need not be strings)."""
    shown = sorted(short(k, 40) if not isinstance(k, str) else clip(k, 40) for k in keys[:5])
    return ", ".join(shown) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where}: expected a mapping of strings")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list)) or v is None:
            raise WorkloadError(f"{where}: {short(k, 60)}: expected a string value, got {short(v)}")
        out[k] = v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
    return out
