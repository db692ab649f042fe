"""What a policy sees and decides. No I/O: topology, allocation state and a
container in; resources for that container and for the others it changed out."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cri_resmgr.bounded import short
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.policy.usage import PolicyUsage
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

ANNOTATION_PREFIX = "cri-resource-manager.intel.com/"
# A boolean annotation's words for false (engine/classify.py parse_bool reads the same).
FALSE_WORDS = ("false", "no", "0", "off")
# Annotations whose key contains this are kept on a Workload (and in the state file).
ANNOTATION_DOMAIN = "cri-resource-manager.intel.com"
# nri-plugins' domain for the same annotations (`balloon.balloons.resource-policy.nri.io`,
# `prefer-shared-cpus.resource-policy.nri.io/container.C`, `resource-policy.nri.io/affinity`).
NRI_ANNOTATION_DOMAIN = "resource-policy.nri.io"
ANNOTATION_DOMAINS = (ANNOTATION_DOMAIN, NRI_ANNOTATION_DOMAIN)


def annotation_keys(key: str, container: str) -> tuple[str, ...]:
    """The keys that may carry annotation `key` for `container`, first found wins: the
    container's own, then the pod's, then the plain key, each in the forms the references
    use: `cri-resource-manager.intel.com/NAME[/container.C|/pod]` and
    `NAME.cri-resource-manager.intel.com[/container.C|/pod]` (CRI Resource Manager's own
    form; balloon.balloons... has only this one), then the same two in nri-plugins' domain
    `resource-policy.nri.io`. `key` may be given in either form of our domain; a key
    outside it is looked up as it is."""
    suffix = "." + ANNOTATION_DOMAIN
    if key.startswith(ANNOTATION_PREFIX):
        name = key[len(ANNOTATION_PREFIX):]
    elif key.endswith(suffix):
        name = key[:-len(suffix)]
    else:
        return (f"{key}/container.{container}", f"{key}/pod", key)
    bases = [ANNOTATION_PREFIX + name, name + suffix]
    if key.endswith(suffix):
        bases = bases[::-1]
    bases += [f"{NRI_ANNOTATION_DOMAIN}/{name}", f"{name}.{NRI_ANNOTATION_DOMAIN}"]
    return tuple(f"{base}{scope}" for scope in (f"/container.{container}", "/pod", "") for base in bases)


class QoS(str, enum.Enum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BESTEFFORT = "BestEffort"


@dataclass(frozen=True)
class Workload:
    """One container as a policy sees it."""

    key: str  # stable identity (the container id)
    namespace: str
    pod: str
    name: str
    qos: QoS
    cpu_request: int = 0  # milli-CPU
    cpu_limit: int | None = None  # milli-CPU, None when unlimited
    memory_request: int = 0  # bytes
    memory_limit: int | None = None  # bytes
    # Effective annotations (cri-resource-manager.intel.com/...); None: not given.
    prefer_isolated: bool | None = None
    prefer_shared: bool | None = None
    prefer_reserved: bool = False
    # In a reserved namespace (kube-system by default) and not declining the reserved CPUs
    # with an explicit `prefer-reserved-cpus: "false"` (engine/classify.py).
    system: bool = False
    # The pod's labels with the container's over them, and the annotations a policy may
    # read (those naming cri-resource-manager.intel.com), for matching and per-policy keys.
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    pod_annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    container_annotations: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}:{self.name}"

    @property
    def short_key(self) -> str:
        """The key as the logs show ids, 12 characters of each long one: the engine's key is
        `SANDBOX:NAME:ATTEMPT` with the sandbox's 64-character id, shown `0123456789ab:c:0`
        (still one container's, unlike the sandbox id alone, which its pod's containers share)."""
        head, sep, rest = self.key.partition(":")
        return head[:12] + sep + rest if sep else self.key[:12]

    def effective_annotation(self, key: str) -> str | None:
        """The value of annotation `key` for this container: `key/container.NAME`, then
        `key/pod`, then `key` (each in both forms, annotation_keys), each looked up in the
        container's and then the pod's annotations."""
        if not self.container_annotations and not self.pod_annotations:
            return None  # the common case (they hold only our domains' keys): no keys to build
        for candidate in annotation_keys(key, self.name):
            for source in (self.container_annotations, self.pod_annotations):
                if candidate in source:
                    return source[candidate]
        return None

    def annotation(self, name: str) -> str | None:
        """effective_annotation() of `cri-resource-manager.intel.com/NAME`."""
        return self.effective_annotation(ANNOTATION_PREFIX + name)

    def declines_reserved(self) -> bool:
        """An explicit `prefer-reserved-cpus: "false"`: not on the reserved CPUs, whatever
        namespace rules of the policy's own would say (`system` already says it for the
        engine's reserved namespaces)."""
        raw = self.annotation("prefer-reserved-cpus")
        return raw is not None and raw.strip().lower() in FALSE_WORDS


@dataclass(frozen=True)
class Assignment:
    """A container's allocation as remembered across restarts. Never changed once
    handed out (its details included): a changed allocation is a new Assignment."""

    pool: str  # "shared", "reserved", "isolated"...: where its non-exclusive part runs
    exclusive: CPUSet = field(default_factory=CPUSet)
    # Whatever else a policy must remember to restore the container exactly (JSON values).
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pool": self.pool, "exclusive": str(self.exclusive)}
        if self.details:
            out["details"] = dict(self.details)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Assignment:
        details = data.get("details") or {}
        if not isinstance(details, Mapping):
            raise ValueError(f"assignment details: expected an object, got {short(details)}")
        return cls(pool=str(data["pool"]), exclusive=CPUSet.parse(str(data.get("exclusive", ""))),
                   details=dict(details))


@dataclass(frozen=True)
class Resources:
    """What a policy sets on a container; fields left None are not owned."""

    cpuset_cpus: CPUSet
    cpuset_mems: str | None = None


@dataclass
class Decision:
    resources: Resources | None = None  # for the container asked about
    others: dict[str, Resources] = field(default_factory=dict)  # key -> new resources
    # Set when the policy could not honour a request but placed the container
    # anyway (e.g. too few free CPUs for exclusive ones: it runs shared).
    warning: str | None = None


@dataclass(frozen=True)
class PolicyContext:
    """Everything a policy is built from."""

    topology: Topology
    available: CPUSet  # CPUs the policy may use at all
    reserved: CPUSet  # CPUs for system (kube-system) work, a subset of available
    options: Mapping[str, Any] = field(default_factory=dict)  # the policy's own config section


class Policy(Protocol):
    def allocate(self, workload: Workload) -> Decision:
        """Places a new container. Raises PolicyError on what it cannot decide."""

    def release(self, key: str) -> Decision:
        """Frees a container's CPUs; unknown keys are a no-op (empty decision)."""

    def restore(self, items: list[tuple[Workload, Assignment | None]], live: bool = False) -> Decision:
        """Rebuilds state after a restart or a policy switch. Items with an
        assignment keep it when it is still valid; the rest are placed anew.
        The decision's `others` holds the resources of EVERY restored container.
        `live`: the assignments come from a policy running in this process that this
        one replaces (a reconfiguration or a switch); a policy then refuses, with
        PolicyError naming why and its state as it was, a change that cannot hold the
        running containers. Not live (start-up, from the state file): everything must
        be placed, best-effort. The built-in policies share the procedure of
        policy/restore.py."""

    def resources(self, key: str) -> Resources | None:
        """The current resources of a known container."""

    def assignments(self) -> Mapping[str, Assignment]:
        """The state to persist, a mapping the caller may keep. A policy that returns
        the very same object for an assignment unchanged since the last call spares
        each state save re-encoding it (engine/cache.py); one built anew is compared."""

    def assignment(self, key: str) -> Assignment | None:
        """One known container's allocation (for the engine's log lines); None when unknown."""

    def usage(self) -> PolicyUsage:
        """The pools and who holds which CPUs, copied: for metrics, the Node export and
        `cri-resmgr status` (policy/usage.py)."""


class PolicyError(CriResmgrError):
    pass


class ResizeError(PolicyError):
    """A resize the policy cannot meet (e.g. too few free CPUs for the new exclusive
    set). Raised before anything changed: the container keeps what it has."""


@runtime_checkable
class Resizable(Protocol):
    """A policy that re-decides a placed container in place when its requests change
    (an in-place pod resize), keeping what it can of the CPUs the container has.
    Policies without it are resized by release and allocate (engine/resize.py)."""

    def resize(self, workload: Workload) -> Decision:
        """`workload`: the placed container (same key and QoS class) with its new
        requests and limits. The decision's resources are its new ones, `others` the
        other containers whose resources changed. Raises ResizeError, with nothing
        changed, when the new size cannot be met."""
