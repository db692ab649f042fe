"""Pod specs for the kubelet-like driver, and what kubelet derives from them.

Everything here is pure: QoS class, pod cgroup parent (cgroupfs driver form)
and per-container Linux resources computed the way kubelet 1.2x computes
them (pkg/kubelet/kuberuntime/kuberuntime_container_linux.go,
pkg/kubelet/qos/policy.go, pkg/kubelet/cm/helpers_linux.go), after the API
server's defaulting of a missing request to its limit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cri_resmgr.policy.quantity import parse_bytes, parse_cpu_milli
from tests.harness.images import BUSYBOX_IMAGE

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BESTEFFORT = "BestEffort"

# kubelet constants
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
QUOTA_PERIOD = 100000
MIN_QUOTA_PERIOD = 1000
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000

# Exits at once on SIGTERM, so StopContainer does not wait out its timeout (a
# bare `sleep` as PID 1 ignores SIGTERM).
DEFAULT_COMMAND: tuple[str, ...] = (
    "/bin/sh", "-c", "trap 'kill $! 2>/dev/null; exit 0' TERM INT; while :; do sleep 3600 & wait $!; done",
)

_RESOURCE_KEYS = ("cpu", "memory")


def _parse_resources(owner: str, kind: str, values: Mapping[str, Any]) -> dict[str, int]:
    """{"cpu": "500m", "memory": "64Mi"} -> {"cpu": 500 (milli), "memory": bytes}."""
    parsed = {}
    for key, text in (values or {}).items():
        try:
            if key == "cpu":
                parsed[key] = parse_cpu_milli(text)
            elif key == "memory":
                parsed[key] = parse_bytes(text)
            # Other resources (hugepages, ephemeral-storage, extended ones) do
            # not enter the Linux resources this driver derives.
        except ValueError as e:
            raise ValueError(f"{owner}: {kind}.{key}: {e}") from None
    return parsed


@dataclass
class ContainerSpec:
    """One container. requests/limits hold Kubernetes quantity strings."""

    name: str
    image: str = BUSYBOX_IMAGE
    command: list[str] | None = None  # None: DEFAULT_COMMAND
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # What kubelet's CPU/memory managers put into CreateContainer.
    cpuset_cpus: str = ""
    cpuset_mems: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("container name must not be empty")
        # Validates now, so a bad quantity is reported with its container.
        self.request_values()
        self.limit_values()

    def limit_values(self) -> dict[str, int]:
        return _parse_resources(f"container {self.name!r}", "limits", self.limits)

    def request_values(self) -> dict[str, int]:
        """Requests after API-server defaulting: a missing request equals its limit."""
        requests = _parse_resources(f"container {self.name!r}", "requests", self.requests)
        for key, value in self.limit_values().items():
            requests.setdefault(key, value)
        return requests

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ContainerSpec:
        """Accepts a Kubernetes container ({"resources": {"requests", "limits"}})
        or the flat form with top-level "requests"/"limits"."""
        d = dict(d)
        resources = d.pop("resources", None) or {}
        unknown = set(resources) - {"requests", "limits"}
        if unknown:
            raise ValueError(f"container {d.get('name')!r}: unknown resources keys {sorted(unknown)}")
        d.setdefault("requests", resources.get("requests") or {})
        d.setdefault("limits", resources.get("limits") or {})
        if isinstance(d.get("env"), list):  # Kubernetes form: [{"name", "value"}]
            d["env"] = {e["name"]: str(e.get("value", "")) for e in d["env"]}
        allowed = set(cls.__dataclass_fields__)
        unknown = set(d) - allowed
        if unknown:
            raise ValueError(f"container {d.get('name')!r}: unknown keys {sorted(unknown)}")
        return cls(**d)


@dataclass
class PodSpec:
    name: str
    containers: list[ContainerSpec]
    namespace: str = "default"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # No CNI here: host-network sandboxes never call it.
    host_network: bool = True
    termination_grace_period: int = 30
    runtime_handler: str = ""  # RunPodSandbox's: "" is the runtime's default
    # Pod-level resources (KEP-2837): {"requests": {"cpu": "2"}, "limits": {...}}; {}: none.
    resources: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("pod name must not be empty")
        if not self.containers:
            raise ValueError(f"pod {self.name!r} has no containers")
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise ValueError(f"pod {self.name!r} has duplicate container names: {names}")

    def pod_limit_values(self) -> dict[str, int]:
        return _parse_resources(f"pod {self.name!r}", "limits", (self.resources or {}).get("limits") or {})

    def pod_request_values(self) -> dict[str, int]:
        """Pod-level requests after API-server defaulting (a missing request is its limit)."""
        requests = _parse_resources(f"pod {self.name!r}", "requests", (self.resources or {}).get("requests") or {})
        for key, value in self.pod_limit_values().items():
            requests.setdefault(key, value)
        return requests

    def container(self, name: str) -> ContainerSpec:
        for c in self.containers:
            if c.name == name:
                return c
        raise KeyError(f"pod {self.name!r} has no container {name!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PodSpec:
        """Accepts a Kubernetes Pod manifest ({"metadata", "spec"}) or the flat
        form {"name", "namespace", "uid", "labels", "annotations", "containers", ...}."""
        if "metadata" in d or "spec" in d:
            meta, spec = dict(d.get("metadata") or {}), dict(d.get("spec") or {})
            flat: dict[str, Any] = {k: meta[k] for k in ("name", "namespace", "uid", "labels", "annotations") if k in meta}
            if "containers" in spec:
                flat["containers"] = spec["containers"]
            if "hostNetwork" in spec:
                flat["host_network"] = bool(spec["hostNetwork"])
            if "terminationGracePeriodSeconds" in spec:
                flat["termination_grace_period"] = int(spec["terminationGracePeriodSeconds"])
            if "resources" in spec:
                flat["resources"] = dict(spec["resources"])
        else:
            flat = dict(d)
        unknown = set(flat) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"pod {flat.get('name')!r}: unknown keys {sorted(unknown)}")
        flat["containers"] = [
            c if isinstance(c, ContainerSpec) else ContainerSpec.from_dict(c) for c in flat.get("containers") or []
        ]
        if "name" not in flat:
            raise ValueError("pod spec has no name")
        return cls(**flat)


def as_pod_spec(pod: PodSpec | Mapping[str, Any]) -> PodSpec:
    return pod if isinstance(pod, PodSpec) else PodSpec.from_dict(pod)


@dataclass(frozen=True)
class LinuxResources:
    """The numbers kubelet puts into LinuxContainerResources."""

    cpu_shares: int
    cpu_quota: int
    cpu_period: int
    memory_limit_in_bytes: int
    oom_score_adj: int
    cpuset_cpus: str = ""
    cpuset_mems: str = ""


def qos_class(pod: PodSpec) -> str:
    """Kubernetes GetPodQOS, for cpu and memory (from the pod-level resources when the
    pod has them, KEP-2837)."""
    if pod.resources:
        requests, limits = pod.pod_request_values(), pod.pod_limit_values()
        if not requests and not limits:
            return BESTEFFORT
        if all(limits.get(k, 0) > 0 and requests.get(k) == limits[k] for k in _RESOURCE_KEYS):
            return GUARANTEED
        return BURSTABLE
    requests = {}
    limits = {}
    guaranteed = True
    for c in pod.containers:
        for key, value in c.request_values().items():
            if value > 0:
                requests[key] = requests.get(key, 0) + value
        container_limits = c.limit_values()
        for key, value in container_limits.items():
            if value > 0:
                limits[key] = limits.get(key, 0) + value
        if not all(container_limits.get(k, 0) > 0 for k in _RESOURCE_KEYS):
            guaranteed = False
    if not requests and not limits:
        return BESTEFFORT
    if guaranteed and requests.keys() == limits.keys() and all(requests[k] == limits[k] for k in requests):
        return GUARANTEED
    return BURSTABLE


def pod_cgroup_parent(pod: PodSpec, cgroup_root: str = "/kubepods", driver: str = "cgroupfs") -> str:
    """kubelet's pod cgroup, in the form of its cgroup driver: cgroupfs, a path under
    `cgroup_root`; systemd, a slice named after `cgroup_root` (kubelet's "kubepods"), which
    systemd nests by its dashes (kubepods.slice/kubepods-besteffort.slice/...)."""
    qos = qos_class(pod)
    if driver == "systemd":
        prefix = cgroup_root.strip("/")
        uid = pod.uid.replace("-", "_")  # a dash would nest one slice deeper
        if qos == GUARANTEED:
            return f"{prefix}-pod{uid}.slice"
        return f"{prefix}-{qos.lower()}-pod{uid}.slice"
    root = "/" + cgroup_root.strip("/")
    if qos == GUARANTEED:
        return f"{root}/pod{pod.uid}"
    return f"{root}/{qos.lower()}/pod{pod.uid}"


def milli_cpu_to_shares(milli_cpu: int) -> int:
    if milli_cpu == 0:
        return MIN_SHARES
    return min(max(milli_cpu * SHARES_PER_CPU // 1000, MIN_SHARES), MAX_SHARES)


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    if milli_cpu == 0:
        return 0
    return max(milli_cpu * period // 1000, MIN_QUOTA_PERIOD)


def oom_score_adj(pod: PodSpec, container: ContainerSpec, memory_capacity: int) -> int:
    qos = qos_class(pod)
    if qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BESTEFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ
    memory_request = container.request_values().get("memory", 0)
    adj = 1000 - (1000 * memory_request) // memory_capacity
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BESTEFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return adj


def _linux_resources(cpu_request: int | None, cpu_limit: int, memory_limit: int) -> tuple[int, int, int, int]:
    # kubelet's calculateLinuxResources: shares from the request (from the
    # limit when only that is known), quota from the limit, period always.
    if cpu_request is None and cpu_limit:
        shares = milli_cpu_to_shares(cpu_limit)
    else:
        shares = milli_cpu_to_shares(cpu_request or 0)
    return shares, milli_cpu_to_quota(cpu_limit), QUOTA_PERIOD, memory_limit


def container_resources(pod: PodSpec, container: ContainerSpec, memory_capacity: int) -> LinuxResources:
    requests, limits = container.request_values(), container.limit_values()
    shares, quota, period, memory = _linux_resources(requests.get("cpu"), limits.get("cpu", 0), limits.get("memory", 0))
    return LinuxResources(
        cpu_shares=shares,
        cpu_quota=quota,
        cpu_period=period,
        memory_limit_in_bytes=memory,
        oom_score_adj=oom_score_adj(pod, container, memory_capacity),
        cpuset_cpus=container.cpuset_cpus,
        cpuset_mems=container.cpuset_mems,
    )


def sandbox_resources(pod: PodSpec) -> LinuxResources:
    """kubelet's calculateSandboxResources: the pod-level resources when the pod has
    them (KEP-2837), else the pod's summed requests/limits (a container without a limit
    simply adds nothing)."""
    if pod.resources:
        requests, limits = pod.pod_request_values(), pod.pod_limit_values()
        shares, quota, period, memory = _linux_resources(requests.get("cpu"), limits.get("cpu", 0),
                                                         limits.get("memory", 0))
        return LinuxResources(shares, quota, period, memory, oom_score_adj=0)
    cpu_request: int | None = None
    cpu_limit = memory_limit = 0
    for c in pod.containers:
        requests, limits = c.request_values(), c.limit_values()
        if "cpu" in requests:
            cpu_request = (cpu_request or 0) + requests["cpu"]
        cpu_limit += limits.get("cpu", 0)
        memory_limit += limits.get("memory", 0)
    shares, quota, period, memory = _linux_resources(cpu_request, cpu_limit, memory_limit)
    return LinuxResources(shares, quota, period, memory, oom_score_adj=0)


def machine_memory_capacity(meminfo: str = "/proc/meminfo") -> int:
    with open(meminfo) as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"{meminfo} has no MemTotal")
