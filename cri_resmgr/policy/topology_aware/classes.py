"""What a container asks of the policy: its CPU class, exclusive CPUs, the part it runs
on shared CPUs, memory kinds and size, cold start, how high an unlimited Burstable
container may go, and its affinity rules.

CPU classes, as the original CRI Resource Manager:

* reserved: kube-system (the relay's reserved namespaces), the policy's
  ReservedPoolNamespaces and prefer-reserved-cpus containers, on the reserved CPUs;
* exclusive: Guaranteed with whole CPUs: that many CPUs of its own (isolated ones when
  preferred and free);
* mixed: Guaranteed with whole CPUs and a fraction: the fraction on the pool's shared CPUs;
* shared: Guaranteed fractional, Burstable, BestEffort, and whoever prefers shared CPUs.

A malformed annotation is ignored with a warning: kubelet's call never fails for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cri_resmgr.bounded import short
from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.topology_aware.affinity import Rule, parse_rules
from cri_resmgr.policy.topology_aware.memory import DEFAULT_KINDS, AnnotationError, parse_duration, parse_memory_type
from cri_resmgr.policy.topology_aware.options import Options

__all__ = ["CPUClass", "Request", "request_of", "LEVELS", "UNLIMITED_BURSTABLE"]

UNLIMITED_BURSTABLE = "unlimited-burstable"
# Tree levels from the top; unlimited-burstable names the lowest level allowed.
LEVELS = ("root", "package", "die", "node", "l3")
ALL_LEVELS: tuple[str, ...] = LEVELS
T = TypeVar("T")
_LEVEL_ALIASES = {"true": "root", "system": "root", "root": "root", "package": "package", "socket": "package",
                  "die": "die", "node": "node", "numa": "node", "l3": "l3", "l3cache": "l3"}


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
    levels: tuple[str, ...] = LEVELS  # tree levels it may be placed at
    rules: tuple[Rule, ...] = ()
    warnings: tuple[str, ...] = ()


def request_of(w: Workload, options: Options, have_reserved: bool) -> Request:
    warnings: list[str] = []

    def annotation(name: str, parse: Callable[[str | None], T], default: T) -> T:
        try:
            return parse(w.annotation(name))
        except AnnotationError as e:
            warnings.append(f"{w} ({w.key}): ignoring annotation {e}")
            return default

    no_rules: tuple[Rule, ...] = ()
    kinds = annotation("memory-type", parse_memory_type, DEFAULT_KINDS)
    cold = annotation("cold-start", parse_duration, None)
    rules = annotation("affinity", lambda _: parse_rules(w), no_rules)
    levels = annotation(UNLIMITED_BURSTABLE, lambda v: _levels(w, v), ALL_LEVELS)
    memory = w.memory_request or 0
    prefer_isolated = options.prefer_isolated if w.prefer_isolated is None else w.prefer_isolated
    common: dict[str, Any] = dict(prefer_isolated=prefer_isolated, kinds=kinds, memory=memory, cold_start=cold,
                  levels=levels, rules=rules, warnings=tuple(warnings))
    if have_reserved and (w.system or w.prefer_reserved or options.reserved_namespace(w.namespace)):
        return Request(CPUClass.RESERVED, **common)
    prefer_shared = options.prefer_shared if w.prefer_shared is None else w.prefer_shared
    whole, fraction = divmod(w.cpu_request, 1000)
    if w.qos is QoS.GUARANTEED and whole and not prefer_shared:
        cls = CPUClass.MIXED if fraction else CPUClass.EXCLUSIVE
        return Request(cls, exclusive=whole, shared_milli=fraction, **common)
    return Request(CPUClass.SHARED, shared_milli=w.cpu_request, **common)


def _levels(w: Workload, value: str | None) -> tuple[str, ...]:
    if value is None or w.qos is not QoS.BURSTABLE or w.cpu_limit is not None:
        return LEVELS
    text = value.strip().lower()
    if text in ("false", ""):
        return LEVELS
    level = _LEVEL_ALIASES.get(text)
    if level is None:
        raise AnnotationError(f"{UNLIMITED_BURSTABLE}: unknown level {short(value)} "
                              f"(one of {', '.join(sorted(_LEVEL_ALIASES))})")
    return LEVELS[:LEVELS.index(level) + 1]
