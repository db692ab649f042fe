"""What a container asks of the policy: its CPU class, exclusive CPUs, the part it runs
on shared CPUs, memory kinds and size, cold start, how high an unlimited Burstable
container may go, and its affinity rules.

CPU classes, as the original CRI Resource Manager:

* reserved: kube-system (the relay's reserved namespaces), the policy's
  ReservedPoolNamespaces and prefer-reserved-cpus containers, on the reserved CPUs;
  `prefer-reserved-cpus: "false"` takes a container out of a reserved namespace, and
  one whose CPU request is more than the reserved CPUs hold runs shared (with a warning);
* exclusive: Guaranteed with whole CPUs: that many CPUs of its own (isolated ones when
  preferred and free; for 2 CPUs or more only when the annotation says so);
* mixed: Guaranteed with whole CPUs and a fraction: the fraction on the pool's shared CPUs
  (2.x CPUs and more only with `prefer-shared-cpus: "false"`, else shared);
* shared: Guaranteed fractional, Burstable, BestEffort, and whoever prefers shared CPUs.

Burstable containers are placed by their limits, as in the references: a CPU limit asks
for a pool with that much free CPU, a memory limit for memory nodes that hold it; a
Burstable container without a CPU limit goes no lower than the `unlimited-burstable`
level (annotation, else the policy's UnlimitedBurstable), and one without a memory limit
gets the memory of the whole machine.

A malformed annotation is ignored with a warning: kubelet's call never fails for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.topology_aware.affinity import Rule, parse_rules
from cri_resmgr.policy.topology_aware.memory import DEFAULT_KINDS, AnnotationError, parse_duration, parse_memory_type
from cri_resmgr.policy.topology_aware.options import Options, parse_level

__all__ = ["CPUClass", "Request", "request_of", "UNLIMITED_BURSTABLE"]

UNLIMITED_BURSTABLE = "unlimited-burstable"
T = TypeVar("T")


class CPUClass(str, enum.Enum):
    RESERVED = "reserved"
    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    MIXED = "mixed"


@dataclass(frozen=True)
class Request:
    cls: CPUClass
    exclusive: int = 0  # CPUs of its own
    shared_milli: int = 0  # what runs on the pool's shared CPUs
    prefer_isolated: bool = True
    kinds: tuple[str, ...] = ("dram",)
    memory: int = 0  # bytes
    cold_start: float | None = None  # seconds on PMEM before DRAM
    level: str | None = None  # the lowest tree level it may be placed at (None: any)
    cpu_limit: int = 0  # milli-CPU a Burstable container may burst to: its pool should have it free
    memory_limit: int | None = 0  # bytes its memory nodes should hold; None: the whole machine's
    rules: tuple[Rule, ...] = ()
    warnings: tuple[str, ...] = ()


def request_of(w: Workload, options: Options, reserved_cpus: int) -> Request:
    """`reserved_cpus`: how many CPUs are reserved (0: none)."""
    warnings: list[str] = []

    def annotation(name: str, parse: Callable[[str | None], T], default: T) -> T:
        try:
            return parse(w.annotation(name))
        except AnnotationError as e:
            warnings.append(f"{w} ({w.short_key}): ignoring annotation {e}")
            return default

    no_rules: tuple[Rule, ...] = ()
    kinds = annotation("memory-type", parse_memory_type, DEFAULT_KINDS)
    cold = annotation("cold-start", parse_duration, None)
    rules = annotation("affinity", lambda _: parse_rules(w), no_rules)
    burstable = w.qos is QoS.BURSTABLE
    level = None
    if burstable and w.cpu_limit is None:
        level = annotation(UNLIMITED_BURSTABLE, lambda v: options.unlimited_burstable if v is None else parse_level(
            v, UNLIMITED_BURSTABLE, AnnotationError), options.unlimited_burstable)
    memory = w.memory_request or 0
    memory_limit: int | None = 0
    if burstable:
        memory_limit = w.memory_limit if w.memory_limit else None
    prefer_isolated = options.prefer_isolated if w.prefer_isolated is None else w.prefer_isolated
    common: dict[str, Any] = dict(prefer_isolated=prefer_isolated, kinds=kinds, memory=memory, cold_start=cold,
                                  level=level, memory_limit=memory_limit, rules=rules)
    if reserved_cpus and _wants_reserved(w, options):
        if w.cpu_request <= 1000 * reserved_cpus:
            return Request(CPUClass.RESERVED, warnings=tuple(warnings), **common)
        warnings.append(f"{w} ({w.short_key}) requests {w.cpu_request}m CPU, more than the {reserved_cpus} reserved "
                        f"CPUs hold; running it on shared CPUs")
        return Request(CPUClass.SHARED, shared_milli=w.cpu_request, warnings=tuple(warnings), **common)
    prefer_shared = options.prefer_shared if w.prefer_shared is None else w.prefer_shared
    whole, fraction = divmod(w.cpu_request, 1000)
    if whole >= 2:
        # As the references: a container of several CPUs uses isolated ones, and splits into
        # exclusive CPUs and a shared fraction, only when annotated so (it must spread its
        # own threads over them); one of 1.x CPUs does by default.
        common["prefer_isolated"] = bool(w.prefer_isolated)
        if fraction and w.prefer_shared is not False:
            prefer_shared = True
    if w.qos is QoS.GUARANTEED and whole and not prefer_shared:
        cls = CPUClass.MIXED if fraction else CPUClass.EXCLUSIVE
        return Request(cls, exclusive=whole, shared_milli=fraction, warnings=tuple(warnings), **common)
    limit = w.cpu_limit if burstable and w.cpu_limit and w.cpu_limit > w.cpu_request else 0
    return Request(CPUClass.SHARED, shared_milli=w.cpu_request, cpu_limit=limit, warnings=tuple(warnings),
                   **common)


def _wants_reserved(w: Workload, options: Options) -> bool:
    """prefer-reserved-cpus wins either way (the engine read a true into `prefer_reserved`);
    else a reserved namespace puts it there."""
    if w.declines_reserved():
        return False
    return w.prefer_reserved or w.system or options.reserved_namespace(w.namespace)
