"""Which balloon type a container belongs to, and which of the type's balloons suits it.

Type: the annotation `balloon.balloons.cri-resource-manager.intel.com` (container,
then pod, then pod-wide default key), then the reserved namespaces (and system
or prefer-reserved containers), then the first type whose Namespaces or
MatchExpressions match, then `default`.

Balloon: among the type's balloons that can hold the request (room to grow
within MaxCPUs and free CPUs), PreferPerNamespaceBalloon keeps namespaces
apart, PreferSpreadingPods puts a pod's containers in different balloons
(otherwise they are packed together), and ties go to the balloon needing the
fewest new CPUs.
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

    @property
    def name(self) -> str:
        return f"{self.type.name}[{self.index}]"

    def namespaces(self) -> set[str]:
        return {w.namespace for w in self.members.values()}

    def has_pod(self, w: Workload) -> bool:
        return any(m.pod == w.pod and m.namespace == w.namespace for m in self.members.values())


def type_for(config: BalloonsConfig, w: Workload, has_reserved: bool) -> tuple[BalloonType, str | None]:
    """The container's balloon type, and a warning when its annotation names no type."""
    warning = None
    wanted = w.effective_annotation(ANNOTATION)
    if wanted is not None:
        t = config.type(wanted.strip())
        if t is not None and (t.name != RESERVED or has_reserved):
            return t, None
        warning = (f"annotation {ANNOTATION} of {w} ({w.key}): no balloon type {short(wanted)} "
                   f"(known: {', '.join(x.name for x in config.types)}); placed by namespace")
    reserved = config.reserved
    if has_reserved and (w.system or w.prefer_reserved
                         or any(fnmatchcase(w.namespace, g) for g in config.reserved_namespaces)
                         or reserved.matches(w)):
        return reserved, warning
    for t in config.types:
        if t.name not in (RESERVED, DEFAULT) and t.matches(w):
            return t, warning
    return config.default, warning


def preference(t: BalloonType, b: Balloon, w: Workload, growth: int) -> tuple[int, ...]:
    """Sort key (smaller first) among balloons of type `t` that can hold `w`."""
    has_pod = 1 if b.has_pod(w) else 0
    same_ns = 0 if w.namespace in b.namespaces() else 1
    if t.spread_pods:
        return (has_pod, same_ns, len(b.members), b.requested, growth, b.index)
    return (1 - has_pod, same_ns, growth, -b.requested, b.index)


def namespace_ok(t: BalloonType, b: Balloon, w: Workload) -> bool:
    """PreferPerNamespaceBalloon: a balloon holds one namespace's containers."""
    return not t.per_namespace or b.namespaces() <= {w.namespace}


def lowest_free_index(used: Iterable[int]) -> int:
    taken = set(used)
    i = 0
    while i in taken:
        i += 1
    return i
