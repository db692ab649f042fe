"""The `static` policy: kubelet's CPU manager static policy, as a decision module.

* A Guaranteed container with an integer CPU request (a positive multiple of
  1000 milli-CPU) gets that many exclusive CPUs, picked by the CPUAllocator
  from the available CPUs minus the reserved and the already exclusive
  ones, unless it prefers shared CPUs (prefer_shared=True).
* Every other container runs on the shared pool: the available CPUs minus
  all exclusive ones.  Reserved CPUs stay in the shared pool and are never
  handed out as exclusive (kubelet's default).
* Option `StrictReservation: true` keeps the reserved CPUs for system work
  only (kubelet's strict-cpu-reservation): the shared pool then also
  excludes them.
* A system container (or one with prefer_reserved) that does not get
  exclusive CPUs runs on the reserved CPUs, when there are any.
* When too few CPUs are free for an exclusive request, the container runs
  on the shared pool (reserved CPUs for system ones) and the decision
  carries a warning.  The shared pool always keeps at least one CPU.
"""

from __future__ import annotations

from cri_resmgr.bounded import short
from cri_resmgr.flags import plural
from cri_resmgr.policy.api import Assignment, Decision, PolicyContext, QoS, Resources, Workload
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import LAYOUT_KEYS, parse_layout
from cri_resmgr.policy.pools import (
    POOL_EXCLUSIVE,
    POOL_RESERVED,
    POOL_SHARED,
    Book,
    Kind,
    MemsOf,
    PoolPolicy,
    check_options,
    checked_cpus,
    option_bool,
)
from cri_resmgr.policy.tuning import TUNING_OPTIONS, ExclusiveTuning
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["StaticPolicy", "NAME", "DESCRIPTION", "OPTIONS", "exclusive_cpus_wanted"]

NAME = "static"
DESCRIPTION = "kubelet CPU manager static policy: exclusive CPUs for integer Guaranteed containers"
OPTIONS = ("StrictReservation", *LAYOUT_KEYS, *TUNING_OPTIONS)


def exclusive_cpus_wanted(workload: Workload) -> int:
    """How many exclusive CPUs kubelet's static policy would give the container."""
    request = workload.cpu_request
    if (
        workload.qos is QoS.GUARANTEED
        and request > 0
        and request % 1000 == 0
        and workload.prefer_shared is not True
    ):
        return request // 1000
    return 0


class StaticPolicy(PoolPolicy, ExclusiveTuning):
    name = NAME

    def __init__(self, context: PolicyContext) -> None:
        check_options(context.options, OPTIONS, NAME)
        self._parse_tuning(context.options, f"policy.{NAME}")  # scheduling classes, interrupts
        self._strict = option_bool(context.options, "StrictReservation", NAME)
        self._cpu_layout = parse_layout(context.options, NAME)
        available, reserved = checked_cpus(context)
        self._available = available
        self._reserved = reserved
        # CPUs exclusive allocations may come from (minus those in use).
        self._assignable = available - reserved
        self._base_shared = self._assignable if self._strict else available
        if not self._base_shared:
            raise ConfigValueError(
                f"policy.{NAME}.StrictReservation: all available CPUs ({available}) are reserved; "
                "no shared pool left"
            )
        self._allocator = CPUAllocator(context.topology)
        self._book = Book(MemsOf(context.topology), self._base_shared, reserved)

    def _exclusive_capable(self) -> CPUSet:
        return self._assignable

    @property
    def strict(self) -> bool:
        return self._strict

    def _place(self, workload: Workload, prefer: CPUSet | None) -> Decision:
        book = self._book
        n = exclusive_cpus_wanted(workload)
        warning = None
        if n:
            free = self._assignable - book.used
            # Never the shared pool's last CPU: shared containers need one.
            if n <= len(free) and n < len(book.shared):
                cpus = self._allocator.allocate(free, n, prefer)
                others: dict[str, Resources] = {}
                self._take_from_shared(cpus, others)
                return Decision(book.add(workload.key, Kind.EXCLUSIVE, POOL_EXCLUSIVE, cpus), others)
            warning = (
                f"{NAME}: {workload} ({workload.short_key}) wants {plural(n, 'exclusive CPU')} but only "
                f"{min(len(free), len(book.shared) - 1)} can be given; "
                f"running it on the {self._fallback_pool(workload)} CPUs"
            )
        pool = self._fallback_pool(workload)
        kind = Kind.RESERVED if pool == POOL_RESERVED else Kind.SHARED
        return Decision(book.add(workload.key, kind, pool), warning=warning)

    def _fallback_pool(self, workload: Workload) -> str:
        if (workload.system or workload.prefer_reserved) and self._reserved:
            return POOL_RESERVED
        return POOL_SHARED

    def _exclusive_wanted(self, workload: Workload) -> int:
        return exclusive_cpus_wanted(workload)

    def _invalid(self, workload: Workload, assignment: Assignment) -> str | None:
        n = exclusive_cpus_wanted(workload)
        exclusive, pool = assignment.exclusive, assignment.pool
        if n == 0 or not exclusive:
            if n:
                # It wanted exclusive CPUs but ran shared (too few free then): placed
                # anew, there may be enough now.
                return f"it ran on the {short(pool, 40)} CPUs without the {n} exclusive CPUs it asks for"
            if exclusive:
                return f"it asks for no exclusive CPUs now, had {len(exclusive)}"
            fallback = self._fallback_pool(workload)
            return None if pool == fallback else f"it ran on the {short(pool, 40)} CPUs, belongs on the {fallback} ones"
        if pool != POOL_EXCLUSIVE:
            return f"pool {short(pool, 40)} is not {NAME}'s for exclusive CPUs"
        if len(exclusive) != n:
            return f"it had {len(exclusive)} exclusive CPUs, asks for {n}"
        return self._exclusive_unfit(exclusive, self._assignable)


def factory(context: PolicyContext) -> StaticPolicy:
    return StaticPolicy(context)
