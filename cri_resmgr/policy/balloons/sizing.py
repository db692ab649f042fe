"""How many CPUs a balloon needs, and which CPUs it takes or gives back.

Inflating takes CPUs as close to the balloon's current ones as the free set
allows: its own NUMA nodes (its cores, L3 group, die first), then the other
nodes by distance; within each, whole cores before stray threads beside other
balloons, and threads beside the reserved CPUs (and the kernel's isolated CPUs)
only when nothing else is left
(Nearness.inflate). A new balloon starts in a node where one L3 group holds it, if
any does, the one AllocatorTopologyBalancing picks (start_node);
PreferSpreadOnPhysicalCores takes one thread of each core first. Deflating gives back the
CPUs whose leaving keeps the rest most compact: from the node, die, L3 and
core where the balloon has the fewest CPUs, so it shrinks out of its
outskirts. With HideHyperthreads a balloon owns whole cores and its containers
see one thread of each.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuallocator import AllocationError, CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import Level

__all__ = ["Nearness", "cpus_for_request", "NEAR_LEVELS", "COMPACT_LEVELS"]

# Closest first: where inflating looks for CPUs.
NEAR_LEVELS: tuple[Level, ...] = ("core", "l3", "die", "node", "package")
# A free thread's relation to a balloon: on one of its cores, on a whole free core, or a
# stray beside another balloon's (or the reserved) CPUs.
_OWN, _WHOLE, _STRAY = 0, 1, 2
# Widest first: what deflating keeps together.
COMPACT_LEVELS: tuple[Level, ...] = ("package", "node", "die", "l3", "core")


def cpus_for_request(milli: int, members: int) -> int:
    """Whole CPUs for `milli` milli-CPUs; a balloon with containers has at least one."""
    n = -(-milli // 1000)
    return max(n, 1) if members else n


class Nearness:
    """The topology's groups by CPU, for inflating near and deflating compactly."""

    def __init__(self, topology: Topology, reserved: CPUSet | None = None) -> None:
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
        # Each NUMA node's CPUs by L3 group (the node's share of each L3 group it touches;
        # the whole node where the kernel gives no L3 data): where a new balloon fits best.
        self._areas: dict[int, list[CPUSet]] = {}
        l3s = topology.groups("l3")
        for node in topology.cpu_node_ids():
            cpus = topology.node_cpus(node)
            parts = [cpus & g for g in l3s if cpus & g]
            self._areas[node] = sorted(parts, key=CPUSet.min) if parts else [cpus]
        # Threads that share a core with a reserved CPU, and the kernel's isolated CPUs
        # (isolcpus: no load balancing, a balloon's threads would not spread onto them):
        # balloons take them last.
        reserved = reserved or CPUSet()
        beside = {c for r in reserved for c in self.core_of.get(r, CPUSet([r])) if c not in reserved}
        self.beside_reserved = CPUSet(beside) | (topology.isolated - reserved)
        self._kinds: dict[str, CPUSet] = {}
        for kind in ("performance", "efficiency"):
            self._kinds[kind] = CPUSet(c for c, info in topology.cpus.items() if info.kind == kind)
        # Deflating's view of a CPU: its groups, widest first (COMPACT_LEVELS), as indices
        # into a list of counts; 0 stands for no group at that level (its count stays 0).
        self._group_index: dict[tuple[Level, int], int] = {}
        self._compact_of: dict[int, tuple[int, ...]] = {}
        self._count_of: dict[tuple[int, ...], Callable[[list[int]], tuple[int, ...]]] = {}
        for cpu in sorted(set(topology.cpus) | set(self.core_of)):
            self._compact_ids(cpu)

    # -- queries ---------------------------------------------------------------------

    def region(self, level: Level | None, cpus: CPUSet) -> CPUSet | None:
        """The CPUs of the `level` groups that `cpus` touch; None when the topology has
        no groups of that level. level None: every CPU."""
        if level is None:
            return self.topology.online
        of = self._group_of.get(level)
        if not of:
            return None
        seen = 0  # a bitmask of CPU ids (CPUSet.as_mask): a group's CPUs join in one step
        for cpu in cpus:
            if seen >> cpu & 1:
                continue
            group = of.get(cpu)
            if group is not None:
                seen |= group.as_mask()
        return CPUSet.of_mask(seen)

    def near_regions(self, cpus: CPUSet) -> list[CPUSet]:
        """The groups around `cpus`, closest first: core, L3, die, node, package, ordered by
        size so that a node inside a die (sub-NUMA clustering) comes before the die."""
        regions = [r for level in NEAR_LEVELS if (r := self.region(level, cpus))]
        return sorted(regions, key=len)

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

    def inflate(self, free: CPUSet, current: CPUSet, n: int, prefer: CPUSet | None = None, *,
                spread: bool = False, balance: bool = False) -> CPUSet:
        """`n` CPUs of `free` for a balloon holding `current` (AllocationError if fewer are free).

        Nearest first, by layers: the balloon's own NUMA nodes (its core, L3 group, die, then
        the nodes), then the other nodes by distance, then anything. Within a layer, whole
        cores before stray threads (whose core another balloon or the reserved CPUs use): the
        balloon's own cores' free threads, then whole free cores, then strays; with `spread`
        (PreferSpreadOnPhysicalCores) one thread of each new core first, the balloon's own
        cores' other threads last. Threads that share a core with the reserved CPUs come
        after everything else. A new balloon starts in the node `start_node` picks."""
        if n <= 0:
            return CPUSet()
        if n > len(free):
            raise AllocationError(n, len(free), free)
        if current:
            origin = self.topology.nodes_of(current)
            own = CPUSet().union(*(self.topology.node_cpus(x) for x in origin))
            layers = [[r & own for r in self.near_regions(current) if r & own] + [own]]
        else:
            node, area = self.start_node(free, n, prefer, balance, spread=spread)
            own = self.topology.node_cpus(node)
            usable = (free & own) - self.beside_reserved
            if not spread and len(usable) >= n:
                # A new balloon in one node: the allocator keeps it in one L3 group when
                # one holds it (start_node chose a node where one does, if any) and packs
                # it on the fewest cores (whole cores first, a remainder on a thread left
                # over beside another).
                return self.allocator.allocate(usable, n, prefer)
            # Spread: the L3 group start_node chose first, one thread of each of its cores.
            layers = [[area], [own]] if area is not None and area != own else [[own]]
            origin = (node,)
        layers += [[ring] for ring in self._distance_rings(origin)]
        layers.append([self.topology.online])
        # Bitmasks of CPU ids (CPUSet.as_mask): on a 4096-CPU machine the layers are
        # thousands of CPUs, intersected and subtracted dozens of times per balloon.
        beside = self.beside_reserved.as_mask()
        held = current.as_mask()
        chosen = 0
        remaining = free.as_mask()
        for last in (False, True):  # the threads beside reserved CPUs only when nothing else is left
            for layer in layers:
                for tier in range(3):
                    for region in layer:
                        need = n - chosen.bit_count()
                        if need == 0:
                            return CPUSet.of_mask(chosen)
                        here = region.as_mask() & remaining
                        cands = (here & beside) if last else (here ^ (here & beside))
                        if not cands:
                            continue
                        group = self._tier(cands, tier, held | chosen, remaining, spread)
                        if not group:
                            continue
                        took = (group if group.bit_count() <= need else
                                self.allocator.allocate(CPUSet.of_mask(group), need, prefer).as_mask())
                        chosen |= took
                        remaining ^= took  # took is part of remaining
        if chosen.bit_count() < n:  # (cannot happen: every free CPU is in the last layer)
            raise AllocationError(n, len(free), free)
        return CPUSet.of_mask(chosen)

    def inflate_whole(self, free: CPUSet, current: CPUSet, n: int) -> tuple[CPUSet, CPUSet] | None:
        """`n` more CPUs for a dedicated balloon (its containers' own CPUs) holding `current`,
        as the allocator gives a create: no more cores split than the size forces. It keeps
        its whole cores and completes its cores that have a free thread first; a thread it
        holds on a core another balloon uses may be given up for a whole free core (one
        CPU moved rather than two cores split). Within its own NUMA nodes, away from the
        reserved CPUs' threads: (taken, given up), or None when those lack the CPUs
        (inflate then takes the nearest)."""
        keep = self.whole_cores(current)
        strays = current - keep
        own = CPUSet().union(*(self.topology.node_cpus(x) for x in self.topology.nodes_of(current)))
        usable = (free & own) - self.beside_reserved
        want = len(current) + n - len(keep)
        pool = usable | strays
        if len(pool) < want:
            return None
        core_of = self.core_of
        completing = {c for s in strays for c in core_of.get(s, ()) if c in usable}
        halves = {s for s in strays if not completing.isdisjoint(core_of.get(s, ()))}
        chosen = self.allocator.allocate(pool, want, CPUSet(completing | halves) if completing else None)
        return chosen - current, strays - chosen

    def _tier(self, cands: int, tier: int, base: int, free: int, spread: bool) -> int:
        """The candidates of preference `tier` (0 best) for a balloon holding `base`: packed,
        0 its own cores' free threads, 1 whole free cores, 2 strays; spread, 0 one thread of
        each whole free core, 1 strays, 2 the rest (own cores' threads). All are bitmasks."""
        core_of = self.core_of
        out = []
        for c in CPUSet.of_mask(cands):
            core = core_of.get(c)
            if core is None or len(core) == 1:
                rank = 0 if spread else 1  # no SMT: a whole core
            else:
                cpus = core.as_mask()
                kind = _OWN if cpus & base else (_WHOLE if cpus & free == cpus else _STRAY)
                if not spread:
                    rank = kind
                elif kind == _WHOLE:
                    rank = 0 if c == core.min() else 2
                else:
                    rank = 1 if kind == _STRAY else 2
            if rank == tier:
                out.append(c)
        return CPUSet(out).as_mask()

    def _distance_rings(self, origin: tuple[int, ...]) -> list[CPUSet]:
        """The CPUs of the other nodes, grouped by their distance from the nearest of
        `origin`, nearest group first."""
        topo = self.topology
        by: dict[int, int] = {}  # distance -> a bitmask of the CPUs
        for node in topo.cpu_node_ids():
            if node in origin:
                continue
            d = min(topo.distance(o, node) for o in origin)
            by[d] = by.get(d, 0) | topo.node_cpus(node).as_mask()
        return [CPUSet.of_mask(by[d]) for d in sorted(by)]

    def start_node(self, free: CPUSet, n: int, prefer: CPUSet | None, balance: bool, *,
                   spread: bool = False, cores: bool = False) -> tuple[int, CPUSet | None]:
        """Where a new balloon of `n` CPUs (`cores`: n whole cores) starts: its node, and
        the part of one L3 group in that node that holds it (None when no L3 group of the
        node does). A node where one L3 group holds the balloon comes first, so that a new
        balloon spans no L3 group while one anywhere has room. Then, balance
        (AllocatorTopologyBalancing): the package, die and node with the most free CPUs (of
        the preferred kind), so balloons spread over the machine and have room to grow;
        otherwise packed, as the references do by default: the package, die and node with
        the fewest free CPUs that still hold the balloon on the fewest cores (not counting
        threads beside the reserved CPUs), so whole parts of the machine stay idle. Within
        the node, the L3 group that holds it on the fewest cores (spread: with the most
        whole free cores), the fullest (balance: the emptiest)."""
        topo = self.topology
        pool = (free & prefer) if prefer and (free & prefer) else free
        usable = pool - self.beside_reserved
        candidates = []
        for node in topo.cpu_node_ids():
            cpus = topo.node_cpus(node)
            mine = pool & cpus
            if not mine:
                continue
            first = min(mine)
            pkg = len(pool & self._group_of["package"].get(first, cpus))
            die = len(pool & self._group_of["die"].get(first, cpus))
            here = usable & cpus
            holds = self._room(here, cores) >= n
            area = self._best_area(node, usable, n, balance, spread, cores) if holds else None
            fits = area is not None
            need = self._cores_for(usable & area if fits else here, n)
            candidates.append((node, holds, pkg, die, len(mine), need, fits, area))
        if not candidates:
            return topo.node_of(free.min()), None
        if balance:
            best = max(candidates, key=lambda c: (c[6], c[2], c[3], c[4], -c[0]))
            return best[0], best[7]
        holding = [c for c in candidates if c[1]]
        if holding:  # in one L3 group, on the fewest cores first: a whole core beats two stray threads
            best = min(holding, key=lambda c: (not c[6], c[5], c[2], c[3], c[4], c[0]))
            return best[0], best[7]
        best = max(candidates, key=lambda c: (c[2], c[3], c[4], -c[0]))  # spills anyway: most room
        return best[0], None

    def _room(self, cpus: CPUSet, cores: bool) -> int:
        return self.cores_in(self.whole_cores(cpus)) if cores else len(cpus)

    def _best_area(self, node: int, usable: CPUSet, n: int, balance: bool, spread: bool,
                   cores: bool) -> CPUSet | None:
        """The node's part of an L3 group that holds `n` of `usable` (None: none does)."""
        best: tuple[tuple[int, ...], CPUSet] | None = None
        for area in self._areas[node]:
            here = usable & area
            if self._room(here, cores) < n:
                continue
            fit = -min(n, self.cores_in(self.whole_cores(here))) if spread else self._cores_for(here, n)
            key = (fit, -len(here) if balance else len(here), area.min())
            if best is None or key < best[0]:
                best = (key, area)
        return best[1] if best is not None else None

    def _cores_for(self, cpus: CPUSet, n: int) -> int:
        """The fewest cores that give `n` of `cpus` (the fullest cores first)."""
        per_core: dict[int, int] = {}
        for c in cpus:
            key = self.core_of[c].min() if c in self.core_of else c
            per_core[key] = per_core.get(key, 0) + 1
        used = 0
        for count in sorted(per_core.values(), reverse=True):
            if n <= 0:
                break
            n -= count
            used += 1
        return used

    def inflate_cores(self, free: CPUSet, current: CPUSet, cores: int, prefer: CPUSet | None = None, *,
                      balance: bool = False) -> CPUSet:
        """`cores` whole free cores nearest to `current` (HideHyperthreads balloons)."""
        whole = self.whole_cores(free)
        chosen = CPUSet()
        start = None  # a new balloon: its first core in the L3 group that holds them all, if one does
        if not current and cores > 1:
            node, area = self.start_node(whole, cores, prefer, balance, cores=True)
            start = area if area is not None else self.topology.node_cpus(node)
        for _ in range(cores):
            base = current | chosen
            pool = whole - chosen
            if not base and start is not None and pool & start:
                pool = pool & start
            pick = self.inflate(pool, base, 1, prefer, balance=balance)
            chosen = chosen | self.core_of.get(pick.min(), pick)
        return chosen

    def free_cores(self, free: CPUSet) -> int:
        return self.cores_in(self.whole_cores(free))

    # -- deflating ----------------------------------------------------------------------

    def deflate(self, cpus: CPUSet, m: int, whole_cores: bool = False) -> CPUSet:
        """The `m` CPUs (with whole_cores: `m` cores' CPUs) of `cpus` to give back, one at a
        time: the CPU with the fewest balloon CPUs in its package, then node, die, L3 and
        core (the balloon's outskirts), the highest id of those alike."""
        if m <= 0:
            return CPUSet()
        # CPUs in the same groups at every level (a core's threads) have the same counts:
        # one candidate per such bucket, its highest CPU (a balloon of 500 CPUs is ~250
        # buckets, and only the counts of the leaving CPU's groups change).
        buckets: dict[tuple[int, ...], list[int]] = {}
        compact_of = self._compact_of
        for cpu in cpus:  # (ascending)
            ids = compact_of.get(cpu) or self._compact_ids(cpu)
            bucket = buckets.get(ids)
            if bucket is None:
                buckets[ids] = [cpu]
            else:
                bucket.append(cpu)
        counts = [0] * (len(self._group_index) + 1)  # balloon CPUs per group, kept current
        for ids, bucket in buckets.items():
            for g in ids:
                counts[g] += len(bucket)
        counts[0] = 0
        count_of = self._count_of
        gone: list[int] = []
        for _ in range(m):
            if not buckets:
                break
            ids, bucket = min(buckets.items(), key=lambda kv: (count_of[kv[0]](counts), -kv[1][-1]))
            victim = bucket[-1]
            out = [c for c in self.core_of[victim] if c in cpus and c not in gone] \
                if whole_cores and victim in self.core_of else [victim]
            for cpu in out:
                ids = self._compact_ids(cpu)
                bucket = buckets[ids]
                bucket.remove(cpu)
                if not bucket:
                    del buckets[ids]
                for g in ids:
                    counts[g] -= 1
                counts[0] = 0
                gone.append(cpu)
        return CPUSet(gone)

    def _compact_ids(self, cpu: int) -> tuple[int, ...]:
        """The CPU's groups at COMPACT_LEVELS as count indices (0: no group there)."""
        ids = self._compact_of.get(cpu)
        if ids is None:
            found = []
            for level in COMPACT_LEVELS:
                group = self._group_of[level].get(cpu)
                if group is None:
                    found.append(0)
                else:
                    found.append(self._group_index.setdefault((level, group.min()), len(self._group_index) + 1))
            ids = self._compact_of[cpu] = tuple(found)
            if ids not in self._count_of:
                self._count_of[ids] = itemgetter(*ids)
        return ids
