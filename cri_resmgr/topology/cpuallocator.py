"""Topology-aware CPU allocation: which N CPUs to take from a free set.

The rules, in the spirit of kubelet's static CPU manager (takeByTopology):

1. Whole idle domains first: at every level of the hierarchy
   (machine -> package -> die -> NUMA node -> core) a child domain that is
   entirely free and no bigger than what is still needed is taken whole,
   lowest id first.  So a request for a package's worth of CPUs gets an idle
   package, a request for two CPUs on an SMT-2 machine gets a whole core.
2. The rest goes into the *smallest* domain that can hold it: cores, then NUMA
   nodes, then dies, then packages.  Among the domains that fit, the one with
   the fewest free CPUs wins (best fit), ties broken by the fewest free CPUs
   in its enclosing domains, then by id.  This packs allocations into
   already-used cores, nodes and sockets and keeps idle ones idle, e.g. a
   request for one CPU takes the free sibling of a half-used core.
3. When nothing below the current domain can hold the rest, the child with
   the most free CPUs is taken whole, repeatedly, so the allocation spans as
   few children as possible; the remainder again goes to the best fit.

Same inputs give the same output.  Releasing CPUs is just adding them back to
the free set (`release` only validates).  Per-topology structures are built
once in `CPUAllocator.__init__`; a call costs about O(domains + CPUs taken).
"""

from __future__ import annotations

from collections.abc import Iterable

from cri_resmgr.errors import CriResmgrError
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["AllocationError", "CPUAllocator", "allocate"]

# Hierarchy levels, outermost first.
_MACHINE, _PACKAGE, _DIE, _NODE, _CORE = range(5)


class AllocationError(CriResmgrError):
    """Not enough free CPUs for a request."""

    def __init__(self, requested: int, available: int, free: CPUSet) -> None:
        self.requested = requested
        self.available = available
        self.free = free
        super().__init__(
            f"cannot allocate {requested} CPUs: only {available} free ({free or 'none'})"
        )


class _Domain:
    """One node of the allocation tree (a package, die, NUMA node or core)."""

    __slots__ = ("index", "level", "cpus", "size", "parent", "children", "order", "below", "sorted_cpus")

    def __init__(self, index: int, level: int, cpus: frozenset[int], parent: int) -> None:
        self.index = index
        self.level = level
        self.cpus = cpus
        self.sorted_cpus = tuple(sorted(cpus))
        self.size = len(cpus)
        self.parent = parent
        self.children: list[int] = []
        self.order = 0  # position among all domains of the same level, by topology ids
        # level -> (largest domain size, descendants at that level); only levels present
        self.below: list[tuple[int, int, list[int]]] = []


class CPUAllocator:
    """Picks CPUs for requests on one Topology; holds no allocation state.

    The caller owns the free set: `allocate` returns the chosen CPUs and the
    caller subtracts them; `release` returns the new free set.
    """

    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        self._online = topology.online.as_frozenset()
        self._domains: list[_Domain] = []
        self._build()

    @property
    def topology(self) -> Topology:
        return self._topology

    # -- construction ----------------------------------------------------------

    def _build(self) -> None:
        topo = self._topology
        keyed: dict[tuple[int, ...], set[int]] = {}
        for cpu, info in topo.cpus.items():
            core_first = info.siblings.min()
            path: tuple[tuple[int, ...], ...] = (
                (info.package,),
                (info.package, info.die),
                (info.package, info.die, info.node),
                (info.package, info.die, info.node, core_first),
            )
            keyed.setdefault((), set()).add(cpu)
            for key in path:
                keyed.setdefault(key, set()).add(cpu)

        root = _Domain(0, _MACHINE, frozenset(keyed[()]), -1)
        self._domains.append(root)
        # A child with exactly its parent's CPUs adds nothing: collapse it so
        # single-die, single-node packages hold their cores directly.
        parent_of_key: dict[tuple[int, ...], int] = {(): 0}
        for key in sorted(keyed, key=lambda k: (len(k), k)):
            if not key:
                continue
            cpus = frozenset(keyed[key])
            parent_index = parent_of_key[key[:-1]]
            parent = self._domains[parent_index]
            level = len(key)
            if cpus == parent.cpus and level != _CORE:
                parent_of_key[key] = parent_index
                continue
            dom = _Domain(len(self._domains), level, cpus, parent_index)
            self._domains.append(dom)
            parent.children.append(dom.index)
            parent_of_key[key] = dom.index

        per_level: dict[int, list[_Domain]] = {}
        for dom in self._domains:
            per_level.setdefault(dom.level, []).append(dom)
        for doms in per_level.values():
            for position, dom in enumerate(doms):  # already in key order
                dom.order = position

        self._ancestors: dict[int, tuple[int, ...]] = {}
        self._core_of: dict[int, int] = {}
        for dom in self._domains:
            if dom.level == _CORE:
                chain = []
                up = dom.index
                while up != -1:
                    chain.append(up)
                    up = self._domains[up].parent
                for cpu in dom.cpus:
                    self._ancestors[cpu] = tuple(chain)
                    self._core_of[cpu] = dom.index

        for dom in self._domains:
            by_level: dict[int, list[int]] = {}
            stack = list(dom.children)
            while stack:
                child = self._domains[stack.pop()]
                by_level.setdefault(child.level, []).append(child.index)
                stack.extend(child.children)
            # Deepest first: the search for a home tries the smallest domains first.
            dom.below = [
                (lvl, max(self._domains[i].size for i in idx), sorted(idx, key=lambda i: self._domains[i].order))
                for lvl, idx in sorted(by_level.items(), reverse=True)
            ]
        self._cores = [d.index for d in self._domains if d.level == _CORE]

    # -- public API --------------------------------------------------------------

    def allocate(self, free: CPUSet, n: int, prefer: CPUSet | None = None) -> CPUSet:
        """Choose `n` CPUs out of `free`.

        `prefer`: CPUs to use first (e.g. a NUMA node the caller wants).  If
        enough of them are free the whole allocation comes from them; if not,
        all free preferred CPUs are taken and the rest is chosen from the
        other free CPUs.

        Raises AllocationError when `free` has fewer than `n` CPUs, ValueError
        for a negative `n` or CPUs in `free` that are not online.
        """
        if type(n) is not int or n < 0:
            raise ValueError(f"number of CPUs to allocate must be a non-negative int, got {n!r}")
        free_set = _frozen(free, "free")
        unknown = free_set - self._online
        if unknown:
            raise ValueError(f"free set contains CPUs that are not online: {CPUSet._wrap(unknown)}")
        if n > len(free_set):
            raise AllocationError(n, len(free_set), CPUSet._wrap(free_set))
        if n == 0:
            return CPUSet()
        if prefer is not None:
            preferred = free_set & _frozen(prefer, "prefer")
            if len(preferred) >= n:
                return CPUSet._wrap(self._take(preferred, n))
            if preferred:
                rest = self._take(free_set - preferred, n - len(preferred))
                return CPUSet._wrap(preferred | rest)
        return CPUSet._wrap(self._take(free_set, n))

    def release(self, free: CPUSet, cpus: CPUSet) -> CPUSet:
        """Return the free set after giving `cpus` back; they must be online and not free."""
        back = _frozen(cpus, "cpus")
        free_set = _frozen(free, "free")
        unknown = back - self._online
        if unknown:
            raise ValueError(f"cannot release CPUs that are not online: {CPUSet._wrap(unknown)}")
        twice = back & free_set
        if twice:
            raise ValueError(f"cannot release CPUs that are already free: {CPUSet._wrap(twice)}")
        return CPUSet._wrap(free_set | back)

    # -- the algorithm -------------------------------------------------------------

    def _take(self, free: frozenset[int], n: int) -> frozenset[int]:
        run = _Run(self, free)
        run.take(0, n)
        return frozenset(run.taken)


class _Run:
    """Mutable state of one allocation: free counts per domain and the result."""

    __slots__ = ("doms", "ancestors", "avail", "count", "taken")

    def __init__(self, allocator: CPUAllocator, free: frozenset[int]) -> None:
        doms = allocator._domains
        self.doms = doms
        self.ancestors = allocator._ancestors
        self.avail = set(free)
        self.taken: list[int] = []
        count = [0] * len(doms)
        for core in allocator._cores:
            dom = doms[core]
            count[core] = len(dom.cpus & free)
        # Children always have higher indices than their parent.
        for dom in reversed(doms):
            if dom.parent >= 0:
                count[dom.parent] += count[dom.index]
        self.count = count

    def take(self, index: int, n: int) -> None:
        """Take n CPUs from domain `index`, which has at least n free."""
        doms, count = self.doms, self.count
        dom = doms[index]
        if count[index] == n or dom.level == _CORE:
            self._take_cpus(dom, n)
            return
        for child in dom.children:
            if n == 0:
                return
            size = doms[child].size
            if size <= n and count[child] == size:
                self._take_cpus(doms[child], size)
                n -= size
        while n > 0:
            home = self._best_fit(dom, n)
            if home is not None:
                self.take(home, n)
                return
            # Nothing below holds n: spill over as few children as possible.
            widest = max(
                (c for c in dom.children if count[c]),
                key=lambda c: (count[c], -doms[c].order),
            )
            got = count[widest]
            self._take_cpus(doms[widest], got)
            n -= got

    def _best_fit(self, dom: _Domain, n: int) -> int | None:
        count = self.count
        for _level, max_size, members in dom.below:
            if max_size < n:
                continue
            fits = [m for m in members if count[m] >= n]
            if not fits:
                continue
            tightest = min(count[m] for m in fits)
            fits = [m for m in fits if count[m] == tightest]
            if len(fits) == 1:
                return fits[0]
            return min(fits, key=self._enclosing_key)
        return None

    def _enclosing_key(self, index: int) -> tuple[int, ...]:
        # Fewest free CPUs in the enclosing domains first (innermost first),
        # then topology order: packs into the busiest node/socket.
        doms, count = self.doms, self.count
        key = []
        up = doms[index].parent
        while up > 0:
            key.append(count[up])
            up = doms[up].parent
        key.append(doms[index].order)
        return tuple(key)

    def _take_cpus(self, dom: _Domain, n: int) -> None:
        avail, count, ancestors, taken = self.avail, self.count, self.ancestors, self.taken
        for cpu in dom.sorted_cpus:
            if n == 0:
                return
            if cpu in avail:
                avail.remove(cpu)
                taken.append(cpu)
                for up in ancestors[cpu]:
                    count[up] -= 1
                n -= 1


def allocate(topology: Topology, free: CPUSet, n: int, prefer: CPUSet | None = None) -> CPUSet:
    """One-shot `CPUAllocator(topology).allocate(...)`; keep a CPUAllocator for repeated calls."""
    return CPUAllocator(topology).allocate(free, n, prefer)


def _frozen(cpus: CPUSet | Iterable[int], what: str) -> frozenset[int]:
    if isinstance(cpus, CPUSet):
        return cpus.as_frozenset()
    try:
        return CPUSet(cpus).as_frozenset()
    except (TypeError, ValueError) as err:
        raise ValueError(f"bad {what} CPU set {cpus!r}: {err}") from None
