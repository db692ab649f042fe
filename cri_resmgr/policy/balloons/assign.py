"""Which balloon type a container belongs to, and which of the type's balloons suits it.

Type: the annotation `balloon.balloons.cri-resource-manager.intel.com` (container,
then pod, then pod-wide default key), then the reserved namespaces (and system
or prefer-reserved containers), then the first type whose Namespaces or
MatchExpressions match, then `default`.

Balloon: among the type's balloons that can hold the request (room to grow
within MaxCPUs and free CPUs), PreferPerNamespaceBalloon keeps namespaces
apart, PreferSpreadingPods puts a pod's containers in different balloons
(otherwise they are packed together), and then, as the references do, a
balloon that holds it without inflating comes first, the one with the most
room left (policy.py: the order of the choices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from cri_resmgr.bounded import short
from cri_resmgr.policy.api import Resources, Workload
from cri_resmgr.policy.balloons.types import DEFAULT, RESERVED, BalloonsConfig, BalloonType
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["ANNOTATION", "Balloon", "type_for", "preference"]

ANNOTATION = "balloon.balloons.cri-resource-manager.intel.com"


@dataclass(eq=False)
class Balloon:
    """One balloon: its own CPUs, the idle CPUs lent to it, and its containers."""

    type: BalloonType
    index: int
    cpus: CPUSet = field(default_factory=CPUSet)  # owned (whole cores under HideHyperthreads)
    members: dict[str, Workload] = field(default_factory=dict)
    requested: int = 0  # milli-CPU, sum over members
    lent: CPUSet = field(default_factory=CPUSet)  # idle CPUs its containers may also use
    resources: Resources | None = None  # what every member runs on
    share_region: CPUSet | None = None  # cached: where idle CPUs may come from
    pods: dict[tuple[str, str], int] = field(default_factory=dict)  # (namespace, pod) -> members

    def join(self, w: Workload) -> None:
        self.members[w.key] = w
        self.requested += w.cpu_request
        pod = (w.namespace, w.pod)
        self.pods[pod] = self.pods.get(pod, 0) + 1

    def leave(self, key: str) -> Workload:
        w = self.members.pop(key)
        self.requested -= w.cpu_request
        pod = (w.namespace, w.pod)
        left = self.pods[pod] - 1
        if left:
            self.pods[pod] = left
        else:
            del self.pods[pod]
        return w

    def resize(self, w: Workload) -> None:
        """Its member `w.key` with new requests (an in-place resize: same pod)."""
        old = self.members[w.key]
        if (old.namespace, old.pod) != (w.namespace, w.pod):
            self.leave(w.key)
            self.join(w)
            return
        self.members[w.key] = w  # (keeps its place among the members)
        self.requested += w.cpu_request - old.cpu_request

    @property
    def name(self) -> str:
        return f"{self.type.name}[{self.index}]"

    def namespaces(self) -> set[str]:
        return {ns for ns, _ in self.pods}

    def has_pod(self, w: Workload) -> bool:
        return (w.namespace, w.pod) in self.pods


def type_for(config: BalloonsConfig, w: Workload, has_reserved: bool) -> tuple[BalloonType, str | None]:
    """The container's balloon type, and a warning when its annotation names no type."""
    warning = None
    wanted = w.effective_annotation(ANNOTATION)
    if wanted is not None:
        t = config.type(wanted.strip())
        if t is not None and (t.name != RESERVED or has_reserved):
            return t, None
        warning = (f"annotation {ANNOTATION} of {w} ({w.short_key}): no balloon type {short(wanted)} "
                   f"(known: {', '.join(x.name for x in config.types)}); placed by namespace")
    reserved = config.reserved
    # An explicit prefer-reserved-cpus "false" takes it out of the reserved namespaces here too.
    if has_reserved and (w.system or w.prefer_reserved
                         or not w.declines_reserved()
                         and (any(fnmatchcase(w.namespace, g) for g in config.reserved_namespaces)
                              or reserved.matches(w))):
        return reserved, warning
    for t in config.types:
        if t.name not in (RESERVED, DEFAULT) and t.matches(w):
            return t, warning
    return config.default, warning


def preference(t: BalloonType, b: Balloon, w: Workload, growth: int, size: int, free: int) -> tuple[int, ...]:
    """Sort key (smaller first) among balloons of type `t` that can hold `w`, `size` its
    CPUs (cores) now, `free` those it could add: with PreferSpreadingPods those holding
    none of the pod's containers; then one that holds the request without inflating; then
    the most room left (balanced, as the references' fill methods), the fewest containers,
    the lowest index."""
    spread = (1 if b.has_pod(w) else 0,) if t.spread_pods else ()
    reach = size if not growth else (size + free if t.max_cpus is None else min(size + free, t.max_cpus))
    return (*spread, 1 if growth else 0, b.requested - reach * 1000, len(b.members), b.index)


def namespace_ok(t: BalloonType, b: Balloon, w: Workload) -> bool:
    """PreferPerNamespaceBalloon: a balloon holds one namespace's containers."""
    return not t.per_namespace or b.namespaces() <= {w.namespace}


def lowest_free_index(used: Iterable[int]) -> int:
    taken = set(used)
    i = 0
    while i in taken:
        i += 1
    return i
