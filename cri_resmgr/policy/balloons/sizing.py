"""How many CPUs a balloon needs, and which CPUs it takes or gives back.

Inflating takes CPUs as close to the balloon's current ones as the free set
allows: the same core first, then the same L3 group, die, NUMA node, package,
then anywhere; within the closest level that has enough, the topology-aware
allocator picks (whole cores first, tight groups). Deflating gives back the
CPUs whose leaving keeps the rest most compact: from the node, die, L3 and
core where the balloon has the fewest CPUs, so it shrinks out of its
outskirts. With HideHyperthreads a balloon owns whole cores and its containers
see one thread of each.
"""

from __future__ import annotations

from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import Level

__all__ = ["Nearness", "cpus_for_request", "NEAR_LEVELS", "COMPACT_LEVELS"]

# Closest first: where inflating looks for CPUs.
NEAR_LEVELS: tuple[Level, ...] = ("core", "l3", "die", "node", "package")
# Widest first: what deflating keeps together.
COMPACT_LEVELS: tuple[Level, ...] = ("package", "node", "die", "l3", "core")


def cpus_for_request(milli: int, members: int) -> int:
    """Whole CPUs for `milli` milli-CPUs; a balloon with containers has at least one."""
    n = -(-milli // 1000)
    return max(n, 1) if members else n


class Nearness:
    """The topology's groups by CPU, for inflating near and deflating compactly."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.allocator = CPUAllocator(topology)
        self._group_of: dict[Level, dict[int, CPUSet]] = {}
        for level in set(NEAR_LEVELS) | set(COMPACT_LEVELS):
            of: dict[int, CPUSet] = {}
            for group in topology.groups(level):
                for cpu in group:
                    of[cpu] = group
            self._group_of[level] = of
        self.core_of = self._group_of["core"]
        self._kinds: dict[str, CPUSet] = {}
        for kind in ("performance", "efficiency"):
            self._kinds[kind] = CPUSet(c for c, info in topology.cpus.items() if info.kind == kind)

    # -- queries ---------------------------------------------------------------------

    def region(self, level: Level | None, cpus: CPUSet) -> CPUSet | None:
        """The CPUs of the `level` groups that `cpus` touch; None when the topology has
        no groups of that level. level None: every CPU."""
        if level is None:
            return self.topology.online
        of = self._group_of.get(level)
        if not of:
            return None
        seen: set[int] = set()
        groups: list[CPUSet] = []
        for cpu in cpus:
            if cpu in seen:
                continue
            group = of.get(cpu)
            if group is not None:
                groups.append(group)
                seen.update(group)
        return CPUSet(seen) if groups else CPUSet()

    def near_regions(self, cpus: CPUSet) -> list[CPUSet]:
        """The groups around `cpus`, closest first: core, L3, die, node, package, ordered by
        size so that a node inside a die (sub-NUMA clustering) comes before the die."""
        regions = [r for level in NEAR_LEVELS if (r := self.region(level, cpus))]
        return sorted(regions, key=len)

    def roomiest(self, free: CPUSet, prefer: CPUSet | None) -> CPUSet:
        """Where a new balloon starts: the free (preferred-kind) CPUs of the NUMA node with
        the most of them, so that it has room to inflate without leaving the node."""
        pool = (free & prefer) if prefer else free
        if not pool:
            pool = free
        best = CPUSet()
        for group in self.topology.groups("node"):
            mine = pool & group
            if len(mine) > len(best):
                best = mine
        return best or pool

    def kind_cpus(self, priority: str) -> CPUSet | None:
        """The CPUs of the preferred core kind; None: no preference (or no hybrid data)."""
        cpus = self._kinds.get(priority)
        return cpus if cpus else None

    def hide_hyperthreads(self, cpus: CPUSet) -> CPUSet:
        """One thread (the lowest) of each core `cpus` touch."""
        core_of = self.core_of
        out: dict[int, int] = {}
        for cpu in cpus:
            first = core_of[cpu].min() if cpu in core_of else cpu
            if first not in out or cpu < out[first]:
                out[first] = cpu
        return CPUSet(out.values())

    def whole_cores(self, cpus: CPUSet) -> CPUSet:
        """The CPUs of `cpus` whose every thread is in `cpus`."""
        core_of = self.core_of
        return CPUSet(c for c in cpus if core_of.get(c, CPUSet([c])).issubset(cpus))

    def cores_in(self, cpus: CPUSet) -> int:
        return len({self.core_of.get(c, CPUSet([c])).min() for c in cpus})

    # -- inflating --------------------------------------------------------------------

    def inflate(self, free: CPUSet, current: CPUSet, n: int, prefer: CPUSet | None = None) -> CPUSet:
        """`n` CPUs of `free` nearest to `current` (AllocationError if fewer are free)."""
        if n <= 0:
            return CPUSet()
        if not current:
            return self.allocator.allocate(free, n, self.roomiest(free, prefer))
        chosen = CPUSet()
        for region in self.near_regions(current):
            candidates = (free & region) - chosen
            need = n - len(chosen)
            if len(candidates) >= need:
                return chosen | self.allocator.allocate(candidates, need, prefer)
            chosen = chosen | candidates
        return chosen | self.allocator.allocate(free - chosen, n - len(chosen), prefer)

    def inflate_cores(self, free: CPUSet, current: CPUSet, cores: int, prefer: CPUSet | None = None) -> CPUSet:
        """`cores` whole free cores nearest to `current` (HideHyperthreads balloons)."""
        whole = self.whole_cores(free)
        chosen = CPUSet()
        for _ in range(cores):
            base = current | chosen
            pool = whole - chosen
            pick = self.inflate(pool, base, 1, prefer)
            chosen = chosen | self.core_of.get(pick.min(), pick)
        return chosen

    def free_cores(self, free: CPUSet) -> int:
        return self.cores_in(self.whole_cores(free))

    # -- deflating ----------------------------------------------------------------------

    def deflate(self, cpus: CPUSet, m: int, whole_cores: bool = False) -> CPUSet:
        """The `m` CPUs (with whole_cores: `m` cores' CPUs) of `cpus` to give back."""
        if m <= 0:
            return CPUSet()
        remaining = set(cpus)
        # Balloon CPUs per group (named by its lowest CPU), kept current as CPUs leave.
        counts: dict[tuple[Level, int], int] = {}
        for cpu in remaining:
            for level in COMPACT_LEVELS:
                group = self._group_of[level].get(cpu)
                if group is not None:
                    k = (level, group.min())
                    counts[k] = counts.get(k, 0) + 1
        gone: set[int] = set()
        for _ in range(m):
            if not remaining:
                break
            victim = min(remaining, key=lambda c: self._compact_key(c, counts))
            out = (self.core_of.get(victim, CPUSet([victim])) & CPUSet(remaining)
                   if whole_cores else CPUSet([victim]))
            for cpu in out:
                remaining.discard(cpu)
                gone.add(cpu)
                for level in COMPACT_LEVELS:
                    group = self._group_of[level].get(cpu)
                    if group is not None:
                        counts[(level, group.min())] -= 1
        return CPUSet(gone)

    def _compact_key(self, cpu: int, counts: dict[tuple[Level, int], int]) -> tuple[int, ...]:
        # Fewest balloon CPUs in its package, node, die, L3, core; then the highest id.
        key = []
        for level in COMPACT_LEVELS:
            group = self._group_of[level].get(cpu)
            key.append(0 if group is None else counts[(level, group.min())])
        key.append(-cpu)
        return tuple(key)
