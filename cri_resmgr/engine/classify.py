"""Turns what the CRI tells about a pod and container into a policy Workload.

The CRI does not carry a container's requests and limits, only the
LinuxContainerResources kubelet derived from them; the webhook copies the real
ones into the pod annotation `intel.com/resources`, which wins when present.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.bounded import InputError, clip, load_json, load_yaml, short
from cri_resmgr.config.schema import DEFAULT_RESERVED_NAMESPACES
from cri_resmgr.policy.api import ANNOTATION_DOMAINS, ANNOTATION_PREFIX, FALSE_WORDS, QoS, Workload, annotation_keys
from cri_resmgr.policy.quantity import parse_bytes, parse_cpu_milli

log = logging.getLogger(__name__)

RESOURCES_ANNOTATION = "intel.com/resources"
BOOLEAN_KEYS = ("prefer-isolated-cpus", "prefer-shared-cpus", "prefer-reserved-cpus")

_CGROUPFS_QOS = re.compile(r"(?:^|/)kubepods(?:/(burstable|besteffort))?/pod[^/]+/?$")
_SYSTEMD_QOS = re.compile(r"kubepods(?:-(burstable|besteffort))?-pod[^/]+\.slice/?$")


@dataclass(frozen=True)
class Requirements:
    cpu_request: int = 0  # milli-CPU
    cpu_limit: int | None = None
    memory_request: int = 0
    memory_limit: int | None = None
    source: str = "none"  # "annotation" or "cri"


def qos_from_cgroup_parent(parent: str) -> QoS | None:
    """kubelet encodes the pod's QoS class in its cgroup parent (cgroupfs or systemd form)."""
    if not parent:
        return None
    m = _CGROUPFS_QOS.search(parent) or _SYSTEMD_QOS.search(parent)
    if m is None:
        return None
    return {None: QoS.GUARANTEED, "burstable": QoS.BURSTABLE, "besteffort": QoS.BESTEFFORT}[m.group(1)]


ANNOTATION_DEPTH = 8  # {"containers": {NAME: {"requests": {"cpu": "1"}}}} is 4
_QUANTITY_KEYS = ("requests", "limits")


def parse_resources_annotation(value: str) -> dict[str, dict[str, dict[str, dict[str, str]]]]:
    """Parses `intel.com/resources`; raises ValueError naming what is wrong (in a
    short line, whatever the value: it is the pod's, and anyone may write one)."""
    try:
        data = load_json(value, RESOURCES_ANNOTATION, max_depth=ANNOTATION_DEPTH)
    except InputError as e:
        raise ValueError(str(e)) from None
    if not isinstance(data, dict):
        raise ValueError(f"{RESOURCES_ANNOTATION}: expected a JSON object, got {short(data, 40)}")
    out: dict[str, Any] = {}
    for section in ("initContainers", "containers"):
        containers = data.get(section) or {}
        if not isinstance(containers, dict):
            raise ValueError(f"{RESOURCES_ANNOTATION}: {section} must be an object, got {short(containers, 40)}")
        out[section] = {}
        for name, reqs in containers.items():
            where = f"{RESOURCES_ANNOTATION}: {section}.{clip(name, 60)}"
            if not isinstance(reqs, dict):
                raise ValueError(f"{where} must be an object, got {short(reqs, 40)}")
            entry: dict[str, dict[str, str]] = {}
            for k in _QUANTITY_KEYS:
                given = reqs.get(k) or {}
                if not isinstance(given, dict):
                    raise ValueError(f"{where}.{k} must be an object of quantities, got {short(given, 40)}")
                for resource, quantity in given.items():
                    if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
                        raise ValueError(f"{where}.{k}.{clip(resource, 40)}: expected a quantity, "
                                         f"got {short(quantity, 40)}")
                entry[k] = given
            out[section][name] = entry
    return out


def requirements_from_annotation(annotations: Mapping[str, str], container: str) -> Requirements | None:
    value = annotations.get(RESOURCES_ANNOTATION)
    if not value:
        return None
    parsed = parse_resources_annotation(value)
    entry = parsed["containers"].get(container) or parsed["initContainers"].get(container)
    if entry is None:
        return None
    req, lim = entry["requests"], entry["limits"]
    # As in Kubernetes: a limit without a request makes the request equal the limit.
    cpu_req = req.get("cpu", lim.get("cpu"))
    mem_req = req.get("memory", lim.get("memory"))
    where = f"{RESOURCES_ANNOTATION}: containers.{clip(container, 60)}"
    try:
        return Requirements(
            cpu_request=parse_cpu_milli(cpu_req) if cpu_req is not None else 0,
            cpu_limit=parse_cpu_milli(lim["cpu"]) if "cpu" in lim else None,
            memory_request=parse_bytes(mem_req) if mem_req is not None else 0,
            memory_limit=parse_bytes(lim["memory"]) if "memory" in lim else None,
            source="annotation",
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def requirements_from_cri(cpu_shares: int, cpu_quota: int, cpu_period: int, memory_limit: int) -> Requirements:
    """Inverts kubelet's derivation: shares = milli*1024/1000, quota = milli*period/1000."""
    request = round(cpu_shares * 1000 / 1024) if cpu_shares > 2 else 0
    limit = None
    if cpu_quota > 0 and cpu_period > 0:
        limit = round(cpu_quota * 1000 / cpu_period)
    return Requirements(
        cpu_request=request,
        cpu_limit=limit,
        memory_request=0,
        memory_limit=memory_limit or None,
        source="cri",
    )


def pod_level(linux: pb.LinuxPodSandboxConfig) -> Requirements | None:
    """The pod-level resources (KEP-2837) kubelet puts in the sandbox's config; None
    when the pod has none."""
    if not linux.HasField("resources"):
        return None
    r = linux.resources
    return pod_requirements(r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes)


def pod_requirements(cpu_shares: int, cpu_quota: int, cpu_period: int, memory_limit: int) -> Requirements | None:
    """A pod's pod-level resources from their CRI fields; None when they say nothing."""
    found = requirements_from_cri(cpu_shares, cpu_quota, cpu_period, memory_limit)
    return found if (found.cpu_request, found.cpu_limit, found.memory_limit) != (0, None, None) else None


def qos_from_requirements(r: Requirements) -> QoS:
    """A single container's view; used only when the cgroup parent says nothing."""
    if r.cpu_request == 0 and r.cpu_limit is None and r.memory_limit is None:
        return QoS.BESTEFFORT
    if (r.cpu_limit is not None and r.cpu_request == r.cpu_limit
            and r.memory_limit is not None and r.memory_request in (0, r.memory_limit)):
        return QoS.GUARANTEED
    return QoS.BURSTABLE


def effective_annotation(pod_annotations: Mapping[str, str], container_annotations: Mapping[str, str],
                         key: str, container: str) -> str | None:
    """`K/container.C`, then `K/pod`, then `K`, under the cri-resource-manager namespace, in
    both of the references' forms (policy.api.annotation_keys)."""
    for candidate in annotation_keys(ANNOTATION_PREFIX + key, container):
        for source in (container_annotations, pod_annotations):
            if candidate in source:
                return source[candidate]
    return None


def parse_bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {short(value)}")


def parse_bool_for(value: str, container: str) -> bool | None:
    """A boolean annotation's value, or CRI Resource Manager's per-container object
    `{"c1": true, "c2": false}` (JSON or YAML; 0 or a negative number means true, as
    there): the container's entry, None when the object does not name it."""
    text = value.strip()
    if not text.startswith("{"):
        return parse_bool(text)
    try:
        data = load_yaml(text, "annotation", max_depth=4, max_nodes=10_000)
    except (InputError, yaml.YAMLError):
        raise ValueError(f"not a boolean nor an object of container names: {short(value)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a boolean nor an object of container names: {short(value)}")
    entry = data.get(container)
    if entry is None:
        return None
    if isinstance(entry, bool):
        return entry
    if isinstance(entry, int):
        return entry <= 0
    return parse_bool(str(entry))


def in_namespaces(namespace: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


def workload(*, key: str, namespace: str, pod: str, container: str, cgroup_parent: str,
             pod_annotations: Mapping[str, str], container_annotations: Mapping[str, str],
             cri_resources: Requirements, reserved_namespaces: tuple[str, ...] = DEFAULT_RESERVED_NAMESPACES,
             labels: Mapping[str, str] | None = None, pod_resources: Requirements | None = None) -> Workload:
    """Builds the policy's view of a container. Bad annotations are logged and ignored:
    they never fail the request. `pod_resources`: the pod-level resources of its
    sandbox (KEP-2837), if any: they give its QoS class when the cgroup parent does not
    (every container of the pod has the pod's class); what share of the pod's budget
    a container without requests of its own takes is engine/podsize.py's."""
    where = f"{namespace}/{pod}:{container}"
    reqs = cri_resources
    try:
        from_annotation = requirements_from_annotation(pod_annotations, container)
        if from_annotation is not None:
            reqs = from_annotation
    except ValueError as e:
        log.warning("%s: ignoring annotation %s: %s", where, RESOURCES_ANNOTATION, e)
    qos = qos_from_cgroup_parent(cgroup_parent)
    if qos is None:
        # A pod with pod-level resources has the class they give it, whatever its containers
        # have (KEP-2837; kubelet gives a container without limits the pod's, so a container
        # of a Guaranteed pod may well look Burstable on its own).
        qos = qos_from_requirements(pod_resources if pod_resources is not None else reqs)
    if qos is QoS.GUARANTEED and reqs.source == "cri" and not reqs.memory_request and reqs.memory_limit:
        # Guaranteed means requests equal limits: the memory request the CRI does not carry is
        # the limit it does, so memory pinning and widening need no webhook for these.
        reqs = replace(reqs, memory_request=reqs.memory_limit)
    # Every key effective_annotation looks for names one of our domains: those of the
    # annotations are all it can find (and what the Workload keeps); most pods have none.
    pod_ours, container_ours = _ours(pod_annotations), _ours(container_annotations)
    prefs: dict[str, bool | None] = {}
    for key_name in BOOLEAN_KEYS:
        raw = effective_annotation(pod_ours, container_ours, key_name, container) \
            if pod_ours or container_ours else None
        prefs[key_name] = None
        if raw is not None:
            try:
                prefs[key_name] = parse_bool_for(raw, container)
            except ValueError as e:
                log.warning("%s: ignoring annotation %s%s: %s", where, ANNOTATION_PREFIX, key_name, e)
    return Workload(
        key=key, namespace=namespace, pod=pod, name=container, qos=qos,
        cpu_request=reqs.cpu_request, cpu_limit=reqs.cpu_limit,
        memory_request=reqs.memory_request, memory_limit=reqs.memory_limit,
        prefer_isolated=prefs["prefer-isolated-cpus"],
        prefer_shared=prefs["prefer-shared-cpus"],
        prefer_reserved=bool(prefs["prefer-reserved-cpus"]),
        # An explicit prefer-reserved-cpus "false" takes it out of the reserved namespaces.
        system=in_namespaces(namespace, reserved_namespaces) and prefs["prefer-reserved-cpus"] is not False,
        labels=dict(labels or {}),
        pod_annotations=pod_ours,
        container_annotations=container_ours,
    )


def workload_or_plain(**kwargs: Any) -> Workload:
    """`workload(...)`; should that fail on what the pod or container carries (a bug
    its annotations hit), the container as its CRI resources alone say, with one
    warning: one odd pod must not stop a start-up, a reconcile or a placement."""
    try:
        return workload(**kwargs)
    except Exception as e:  # any failure here is the annotations'
        log.warning("%s/%s:%s: ignoring its annotations (%s: %s): placed by its CRI resources",
                    kwargs.get("namespace"), kwargs.get("pod"), kwargs.get("container"), type(e).__name__,
                    clip(str(e), 160))
        return plain(**kwargs)


def plain(**kwargs: Any) -> Workload:
    """The container as its CRI resources say, without any annotation of the pod or its own."""
    return workload(**{**kwargs, "pod_annotations": {}, "container_annotations": {}})


def _ours(annotations: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if any(d in k for d in ANNOTATION_DOMAINS)}
