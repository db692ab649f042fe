"""Who runs where in the pool tree, and what that leaves free.

Per pool: its shared CPUs now (`sharable` minus every exclusive CPU taken anywhere),
the members with a shared part placed in it, and over its subtree the shared milli-CPU
and memory bytes requested. A container's cpuset follows its pool's shared CPUs (plus
its exclusive ones, if mixed), so when exclusive CPUs are taken or returned, every
pool whose shared CPUs change reports all its shared members (`_shift`): that pool,
the pools above and the pools below that lost or got back those CPUs.

Shared members of one pool with the same memory nodes get the same Resources object,
so a pool's update is a dict.fromkeys however many containers it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain

from cri_resmgr.policy.api import Resources, Workload
from cri_resmgr.policy.topology_aware.classes import CPUClass, Request
from cri_resmgr.policy.topology_aware.pooltree import Pool, PoolTree
from cri_resmgr.topology.cpuset import CPUSet, format_cpulist

__all__ = ["Member", "Book"]


@dataclass(slots=True, eq=False)
class Member:
    key: str
    workload: Workload
    request: Request
    pool: Pool | None  # None: on the reserved CPUs
    exclusive: CPUSet
    from_isolated: bool
    mem_pool: Pool | None  # whose memory nodes it gets (its pool, or one above when widened)
    kinds: tuple[str, ...]  # memory kinds in force (PMEM while cold)
    mems: str | None
    cold_until: float | None = None  # wall-clock time its memory moves to DRAM
    resources: Resources | None = None  # fixed ones (exclusive, reserved); None: follows the pool
    overcommitted: bool = False  # placed although no pool had its CPU request free

    @property
    def cls(self) -> CPUClass:
        return self.request.cls

    @property
    def shared_part(self) -> bool:
        return self.request.cls in (CPUClass.SHARED, CPUClass.MIXED)


class Book:
    def __init__(self, tree: PoolTree, reserved: CPUSet, pin_cpu: bool, pin_memory: bool,
                 cores: Mapping[int, CPUSet] | None = None) -> None:
        self.tree = tree
        self.cores = cores or {}  # CPU -> the CPUs of its core (SMT siblings); empty: no SMT known
        # For _keep, built once: every CPU of a core with a CPU in the tree -> that core, each
        # leaf's CPUs of those cores, and each CPU's place in the order its leaf keeps them
        # (higher cores, by their lowest CPU, first; a core's higher threads first).
        self._core_of = {x: core.as_frozenset() for cpu, core in self.cores.items() if cpu in tree.root.cpus
                         for x in core}
        self._leaf_cores = {leaf: frozenset().union(*(self._core_of.get(c, ()) for c in leaf.cpus))
                            for leaf in tree.leaves}

        def core_first(cpu: int) -> tuple[int, int]:
            return (self.cores[cpu].min() if cpu in self.cores else cpu, cpu)

        self._place = {cpu: i for i, cpu in enumerate(sorted(tree.root.cpus, key=core_first, reverse=True))}
        self.reserved = reserved
        self.pin_cpu = pin_cpu
        self.pin_memory = pin_memory
        self.members: dict[str, Member] = {}
        # The members in a cold start (cold_until set when added), in the order of `members`:
        # the engine asks for the next deadline after every call.
        self.cold: dict[str, Member] = {}
        self.used = CPUSet()  # exclusive CPUs taken from shared ones
        self.used_isolated = CPUSet()
        pools = tree.pools
        self.shared: dict[Pool, CPUSet] = {p: p.sharable for p in pools}
        self.milli: dict[Pool, int] = dict.fromkeys(pools, 0)  # shared milli over the subtree
        self.parts: dict[Pool, int] = dict.fromkeys(pools, 0)  # members with a shared part, subtree
        self.memory: dict[str, int] = dict.fromkeys(tree.by_name, 0)  # bytes, subtree
        # pool -> mems text -> keys (ordered sets) of its SHARED members; MIXED ones apart.
        self._groups: dict[Pool, dict[str | None, dict[str, None]]] = {p: {} for p in pools}
        self._mixed: dict[Pool, dict[str, None]] = {p: {} for p in pools}
        self._res: dict[Pool, dict[str | None, Resources]] = {p: {} for p in pools}
        self._mems_text: dict[frozenset[int], str] = {}

    # -- queries ----------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self.members

    def mems_text(self, nodes: frozenset[int]) -> str:
        text = self._mems_text.get(nodes)
        if text is None:
            text = self._mems_text[nodes] = format_cpulist(nodes)
        return text

    def mems_of(self, mem_pool: Pool, kinds: tuple[str, ...]) -> str | None:
        return self.mems_text(mem_pool.nodes(kinds)) if self.pin_memory else None

    def resources(self, key: str) -> Resources | None:
        m = self.members.get(key)
        if m is None:
            return None
        if m.resources is not None:
            return m.resources
        assert m.pool is not None
        return self._shared_resources(m.pool, m.mems)

    def free_milli(self, pool: Pool) -> int:
        return 1000 * len(self.shared[pool]) - self.milli[pool]

    def fits_shared(self, pool: Pool, milli: int) -> bool:
        """A shared part of `milli` fits in the pool and every pool above it."""
        return all(self.shared[p] and (not milli or self.free_milli(p) >= milli) for p in pool.lineage())

    def fitting(self, milli: int) -> dict[Pool, bool]:
        """fits_shared(pool, milli) of every pool, each pool checked once (a parent's
        answer is its children's lineage)."""
        out: dict[Pool, bool] = {}
        for p in self.tree.pools:  # pre-order: a parent before its children
            out[p] = bool(self.shared[p]) and (not milli or self.free_milli(p) >= milli) and \
                (p.parent is None or out[p.parent])
        return out

    def headroom(self, pool: Pool) -> int:
        """The least free shared milli-CPU along the pool's lineage (negative: overcommitted)."""
        return min(self.free_milli(p) for p in pool.lineage())

    def need(self, pool: Pool, extra_milli: int = 0) -> int:
        """CPUs the pool's shared members (over its subtree) need to keep, with
        `extra_milli` more of a newcomer: the sum is rounded up once (500m + 400m is one CPU)."""
        if not self.parts[pool] and not extra_milli:
            return 1 if pool.parent is None else 0  # the root keeps one for newcomers
        return max(1, -(-(self.milli[pool] + extra_milli) // 1000))

    def spare(self, pool: Pool, extra_milli: int = 0, mine: CPUSet | None = None) -> CPUSet:
        """Shared CPUs of the pool that could become exclusive: not reserved, and not
        what the shared members of the leaves below need (reserved CPUs count first;
        each leaf keeps stray threads first, then whole cores from its highest, so that
        what is spare stays in whole cores). `mine`: CPUs a resized container would keep
        (those it held and their cores' free threads): the shared members keep them last."""
        free = self.shared[pool] - pool.reserved
        for leaf, keep in self._leaves_keeping(pool, extra_milli):
            free = free - self._keep(leaf, keep, mine)
        return free

    def spare_counts(self, extra_milli: int = 0) -> dict[Pool, int]:
        """len(spare(pool, extra_milli, mine)) of every pool, whatever `mine`, without building
        a set: each leaf keeps that many of its own unreserved shared CPUs (or all of them),
        the leaves are disjoint, and a pool's leaves are its children's (one pass, bottom up)."""
        kept: dict[Pool, int] = {}  # what the leaves below keep (no newcomer)
        out: dict[Pool, int] = {}
        for pool in reversed(self.tree.pools):  # children before their parent
            free = self._unreserved(pool)
            if pool.children:
                kept[pool] = below = sum(kept[c] for c in pool.children)
                out[pool] = free - below
            else:
                kept[pool] = self._kept(pool, 0, free)
                out[pool] = free - (self._kept(pool, extra_milli, free) if extra_milli else kept[pool])
        return out

    def _kept(self, leaf: Pool, extra_milli: int, unreserved: int) -> int:
        return min(max(self.need(leaf, extra_milli) - len(leaf.reserved), 0), unreserved)

    def _unreserved(self, pool: Pool) -> int:
        """len(shared[pool] - pool.reserved), without the set."""
        shared = self.shared[pool]
        return len(shared) - len(shared & pool.reserved) if pool.reserved else len(shared)

    def _leaves_keeping(self, pool: Pool, extra_milli: int) -> Iterator[tuple[Pool, int]]:
        """The leaves below `pool` (itself, if one) whose shared members keep CPUs, and how many."""
        for leaf in pool.leaves:
            keep = self.need(leaf, extra_milli if leaf is pool else 0) - len(leaf.reserved)
            if keep > 0:
                yield leaf, keep

    def _keep(self, leaf: Pool, keep: int, mine: CPUSet | None = None) -> CPUSet:
        """`keep` of the leaf's unreserved shared CPUs for its shared members: those not in
        `mine` first, stray threads (their core not all shared) before whole cores, higher
        cores before lower ones (`_place`). Set operations, and one sort of the group where
        `keep` runs out."""
        cpus = self.shared[leaf] - leaf.reserved
        if keep >= len(cpus):
            return cpus
        have = cpus.as_frozenset()
        last = mine.as_frozenset() & have if mine else frozenset()
        # A stray thread's core has a CPU the leaf does not share now (exclusive, reserved,
        # isolated, or not the leaf's): the cores of the CPUs missing from `have`.
        core_of = self._core_of
        stray = have.intersection(frozenset().union(*(core_of[c] for c in self._leaf_cores[leaf] - have)))
        whole = have - stray
        kept: list[Iterable[int]] = []
        for group in (stray - last, whole - last, stray & last, whole & last):
            if len(group) >= keep:
                kept.append(sorted(group, key=self._place.__getitem__)[:keep])
                break
            kept.append(group)
            keep -= len(group)
        return CPUSet(chain(*kept))

    def can_take(self, pool: Pool, cpus: CPUSet, extra_milli: int) -> bool:
        """Taking `cpus` leaves every pool losing them enough for its shared members
        (and `extra_milli` more in `pool` and above)."""
        for p in self.tree.pools:
            if p.sharable.isdisjoint(cpus):
                continue
            shared = self.shared[p]
            left = len(shared) - len(shared & cpus)
            extra = extra_milli if p is pool or p in pool.ancestors else 0
            need = self.milli[p] + extra
            if (self.parts[p] or extra or p.parent is None) and not left:
                return False
            if 1000 * left < need:
                return False
        return True

    # -- changes ----------------------------------------------------------------------------

    def add(self, m: Member, others: dict[str, Resources]) -> Resources:
        """Record a member (its exclusive CPUs must be free); fills `others` with the
        members whose cpuset changed; returns the member's resources."""
        if m.exclusive:
            if m.from_isolated:
                if not self.used_isolated.isdisjoint(m.exclusive):
                    raise ValueError(f"CPUs {self.used_isolated & m.exclusive} are already exclusive")
                self.used_isolated = self.used_isolated | m.exclusive
            else:
                if not self.used.isdisjoint(m.exclusive):
                    raise ValueError(f"CPUs {self.used & m.exclusive} are already exclusive")
                self.used = self.used | m.exclusive
                self._shift(m.exclusive, True, others)
        self.members[m.key] = m
        if m.cold_until is not None:
            self.cold[m.key] = m
        self._account(m, +1)
        return self._settle(m)

    def remove(self, key: str, others: dict[str, Resources]) -> Member | None:
        m = self.members.pop(key, None)
        if m is None:
            return None
        self.cold.pop(key, None)
        self._account(m, -1)
        if m.exclusive:
            if m.from_isolated:
                self.used_isolated = self.used_isolated - m.exclusive
            else:
                self.used = self.used - m.exclusive
                self._shift(m.exclusive, False, others)
        return m

    def set_memory(self, m: Member, mem_pool: Pool, kinds: tuple[str, ...]) -> Resources:
        """Move a member's memory (cold start over); returns its new resources."""
        self._account(m, -1)
        m.mem_pool, m.kinds = mem_pool, kinds
        self._account(m, +1)
        return self._settle(m)

    def _nodes(self, m: Member) -> frozenset[int] | None:
        """The memory nodes of an exclusive member whose CPUs take only some of its memory
        pool's leaves (a 2-CPU container given a thread of two nodes of three): those
        leaves' nodes, when they hold its memory request; None: the memory pool's. A pool
        widened for the memory holds the CPUs in one of its children: all its nodes."""
        pool, cpus = m.mem_pool, m.exclusive
        if pool is None or m.cls is not CPUClass.EXCLUSIVE or not cpus or not pool.children or \
                not cpus <= pool.cpus or any(cpus <= c.cpus for c in pool.children):
            return None
        leaves = [leaf for leaf in pool.leaves if not leaf.cpus.isdisjoint(cpus)]
        if len(leaves) == len(pool.leaves) or sum(leaf.memory_bytes(m.kinds) for leaf in leaves) < m.request.memory:
            return None
        return frozenset().union(*(leaf.nodes(m.kinds) for leaf in leaves)) or None

    def _settle(self, m: Member) -> Resources:
        """Compute and file a member's resources from its pool, class and memory."""
        nodes = self._nodes(m) if self.pin_memory else None
        m.mems = None if m.mem_pool is None else \
            self.mems_text(nodes) if nodes else self.mems_of(m.mem_pool, m.kinds)
        pool = m.pool
        if pool is None:
            m.resources = Resources(self.reserved, m.mems)
        elif m.cls is CPUClass.SHARED:
            m.resources = None
            self._groups[pool].setdefault(m.mems, {})[m.key] = None
            return self._shared_resources(pool, m.mems)
        elif m.cls is CPUClass.MIXED:
            self._mixed[pool][m.key] = None
            m.resources = Resources(self._cpus(m.exclusive | self.shared[pool]), m.mems)
        else:
            m.resources = Resources(self._cpus(m.exclusive), m.mems)
        return m.resources

    def _cpus(self, cpus: CPUSet) -> CPUSet:
        return cpus if self.pin_cpu else self.tree.root.cpus

    def _shared_resources(self, pool: Pool, mems: str | None) -> Resources:
        cache = self._res[pool]
        res = cache.get(mems)
        if res is None:
            res = cache[mems] = Resources(self._cpus(self.shared[pool]), mems)
        return res

    def _account(self, m: Member, sign: int) -> None:
        pool = m.pool
        if pool is not None and m.shared_part:
            if sign < 0:
                group = self._groups[pool].get(m.mems)
                if group is not None:
                    group.pop(m.key, None)
                    if not group:
                        del self._groups[pool][m.mems]
                self._mixed[pool].pop(m.key, None)
            for p in pool.lineage():
                self.milli[p] += sign * m.request.shared_milli
                self.parts[p] += sign
        if m.mem_pool is not None and m.request.memory:
            for p in m.mem_pool.lineage():
                self.memory[p.name] += sign * m.request.memory

    def _shift(self, changed: CPUSet, taken: bool, others: dict[str, Resources]) -> None:
        """Exclusive CPUs `changed` were taken (or returned): update every pool they are
        shared CPUs of, and report its shared members. The pool's shared CPUs lose (or get
        back) those, which costs what changed, not the pool's size as `sharable - used`."""
        for pool in self.tree.pools:
            if pool.sharable.isdisjoint(changed):
                continue
            shared = self.shared[pool]
            self.shared[pool] = shared - changed if taken else shared | (changed & pool.sharable)
            self._res[pool] = {}
            groups = self._groups[pool]
            for mems in groups:
                if self.pin_cpu:
                    others.update(dict.fromkeys(groups[mems], self._shared_resources(pool, mems)))
            for key in self._mixed[pool]:
                m = self.members[key]
                m.resources = Resources(self._cpus(m.exclusive | self.shared[pool]), m.mems)
                if self.pin_cpu:
                    others[key] = m.resources
