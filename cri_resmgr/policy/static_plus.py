"""The `static-plus` policy: reserved, isolated and shared pools.

Three disjoint pools:

* reserved: the reserved CPUs; system containers (kube-system) and those
  with prefer_reserved run there, whatever their request;
* isolated: the kernel's isolated CPUs (isolcpus) among the available ones,
  minus reserved; the first choice for exclusive CPUs.  Unused isolated CPUs
  are NOT part of the shared pool;
* shared: the rest of the available CPUs minus the exclusive ones.

Any container, whatever its QoS, with a CPU request of at least 1000
milli-CPU gets the integer part as exclusive CPUs; with a fractional part
it also runs on the shared pool (cpuset = exclusive + shared).
prefer_shared=True keeps a container on the shared pool only.

Exclusive CPUs all come from the isolated pool when it has enough free and
the container does not say prefer_isolated=False; otherwise from the shared
pool, never its last CPU (prefer_isolated=False never uses isolated CPUs).
When neither can give them, the container runs on the shared pool and the
decision carries a warning.
"""

from __future__ import annotations

from cri_resmgr.bounded import short
from cri_resmgr.flags import plural
from cri_resmgr.policy.api import Assignment, Decision, PolicyContext, Resources, Workload
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import LAYOUT_KEYS, parse_layout
from cri_resmgr.policy.pools import (
    POOL_EXCLUSIVE,
    POOL_ISOLATED,
    POOL_RESERVED,
    POOL_SHARED,
    Book,
    Kind,
    MemsOf,
    PoolPolicy,
    check_options,
    checked_cpus,
)
from cri_resmgr.policy.tuning import TUNING_OPTIONS, ExclusiveTuning
from cri_resmgr.policy.usage import PoolUsage
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["StaticPlusPolicy", "NAME", "DESCRIPTION", "OPTIONS"]

NAME = "static-plus"
DESCRIPTION = "reserved, isolated and shared pools; exclusive CPUs for any container requesting whole CPUs"
OPTIONS: tuple[str, ...] = (*LAYOUT_KEYS, *TUNING_OPTIONS)


class StaticPlusPolicy(PoolPolicy, ExclusiveTuning):
    name = NAME

    def __init__(self, context: PolicyContext) -> None:
        check_options(context.options, OPTIONS, NAME)
        self._cpu_layout = parse_layout(context.options, NAME)
        self._parse_tuning(context.options, f"policy.{NAME}")  # scheduling classes, interrupts
        available, reserved = checked_cpus(context)
        self._available = available
        self._reserved = reserved
        self._isolated = (context.topology.isolated & available) - reserved
        self._base_shared = available - reserved - self._isolated
        if not self._base_shared:
            raise ConfigValueError(
                f"policy.AvailableResources.CPU: no CPUs left for the {NAME} shared pool: "
                f"available {available}, reserved {reserved or 'none'}, isolated {self._isolated}"
            )
        self._allocator = CPUAllocator(context.topology)
        self._book = Book(MemsOf(context.topology), self._base_shared, reserved)

    @property
    def isolated(self) -> CPUSet:
        return self._isolated

    def _exclusive_capable(self) -> CPUSet:
        return self._isolated | self._base_shared

    def _extra_pools(self, used: CPUSet) -> tuple[PoolUsage, ...]:
        return (PoolUsage("isolated", self._isolated, used & self._isolated, CPUSet()),) if self._isolated else ()

    def _wanted(self, workload: Workload) -> tuple[str, int, bool]:
        """(pool without exclusive CPUs, exclusive CPUs wanted, also runs shared)."""
        if (workload.system or workload.prefer_reserved) and self._reserved:
            return POOL_RESERVED, 0, False
        if workload.prefer_shared is True:
            return POOL_SHARED, 0, False
        whole, fraction = divmod(workload.cpu_request, 1000)
        return POOL_SHARED, whole, fraction > 0

    def _place(self, workload: Workload, prefer: CPUSet | None) -> Decision:
        book = self._book
        pool, n, mixed = self._wanted(workload)
        warning = None
        if n:
            others: dict[str, Resources] = {}
            cpus = None
            free_isolated = self._isolated - book.used
            if workload.prefer_isolated is not False and len(free_isolated) >= n:
                cpus = self._allocator.allocate(free_isolated, n, prefer)
                source = POOL_ISOLATED
            elif n < len(book.shared):
                cpus = self._allocator.allocate(book.shared, n, prefer)
                source = POOL_EXCLUSIVE
                self._take_from_shared(cpus, others)
            if cpus is not None:
                if mixed:
                    res = book.add(workload.key, Kind.MIXED, POOL_SHARED, cpus)
                else:
                    res = book.add(workload.key, Kind.EXCLUSIVE, source, cpus)
                return Decision(res, others)
            warning = (
                f"{NAME}: {workload} ({workload.short_key}) wants {plural(n, 'exclusive CPU')} but only "
                f"{len(free_isolated)} isolated and {len(book.shared) - 1} shared CPUs can be given; "
                "running it on the shared CPUs"
            )
        kind = Kind.RESERVED if pool == POOL_RESERVED else Kind.SHARED
        return Decision(book.add(workload.key, kind, pool), warning=warning)

    def _exclusive_wanted(self, workload: Workload) -> int:
        return self._wanted(workload)[1]

    def _invalid(self, workload: Workload, assignment: Assignment) -> str | None:
        pool, n, mixed = self._wanted(workload)
        exclusive, saved_pool = assignment.exclusive, assignment.pool
        if n == 0 or not exclusive:
            if n:
                return f"it ran on the {short(saved_pool, 40)} CPUs without the {n} exclusive CPUs it asks for"
            if exclusive:
                return f"it asks for no exclusive CPUs now, had {len(exclusive)}"
            if saved_pool != pool:
                return f"it ran on the {short(saved_pool, 40)} CPUs, belongs on the {pool} ones"
            return None
        if len(exclusive) != n:
            return f"it had {len(exclusive)} exclusive CPUs, asks for {n}"
        from_isolated = exclusive.issubset(self._isolated)
        if saved_pool == POOL_ISOLATED and not from_isolated:
            return f"CPUs {exclusive - self._isolated} are not isolated CPUs available to {NAME}"
        if from_isolated and workload.prefer_isolated is False:
            return "its CPUs are isolated and it prefers no isolated CPUs"
        expected_pool = POOL_SHARED if mixed else (POOL_ISOLATED if from_isolated else POOL_EXCLUSIVE)
        if saved_pool != expected_pool:
            return f"it ran in pool {short(saved_pool, 40)}, belongs in {expected_pool!r}"
        return self._exclusive_unfit(exclusive, self._isolated if from_isolated else self._base_shared)


def factory(context: PolicyContext) -> StaticPlusPolicy:
    return StaticPlusPolicy(context)
