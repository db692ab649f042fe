"""Placing one container in the pool tree: the candidates (pools with enough free CPU),
ranked by criteria.py, then its exclusive CPUs (isolated ones first when preferred and
free, else the pool's shared CPUs not needed by its shared containers) and its memory
(the pool's nodes of the requested kinds, widened up the tree until the request fits).

A Burstable container with a CPU limit goes to pools with its limit free (any pool when
none has), one without a limit no lower than its level. An exclusive container's memory
is that of the lowest pool holding its CPUs (the nodes of the CPUs it got, not of a
wider pool it was placed in); a Burstable one's is widened until it holds its memory
limit (the whole machine's without one).

When no pool can give the exclusive CPUs asked for, the container runs on shared CPUs
and the warning says so; when no pool has the shared CPU free, it runs in the root pool
(kubelet admitted it: the node is overcommitted, not the call to fail).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from cri_resmgr.flags import plural
from cri_resmgr.policy.api import Workload
from cri_resmgr.policy.topology_aware.book import Book, Member
from cri_resmgr.policy.topology_aware.classes import CPUClass, Request
from cri_resmgr.policy.topology_aware.criteria import Candidate, rank
from cri_resmgr.policy.topology_aware.memory import available_kinds, memory_pool
from cri_resmgr.policy.topology_aware.pooltree import Pool
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuallocator import AllocationError, CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Placer"]

NAME = "topology-aware"


class Placer:
    def __init__(self, book: Book, allocator: CPUAllocator, clock: Callable[[], float]) -> None:
        self.book = book
        self.allocator = allocator
        self.clock = clock

    def place(self, w: Workload, req: Request, affinity: Mapping[str, float],
              held: CPUSet | None = None) -> tuple[Member, str | None]:
        """A member for the container (not yet added to the book) and a warning, if any.
        `held`: the exclusive CPUs of a container placed again (a resize), kept where they
        can be (see `_mine`)."""
        book = self.book
        if req.cls is CPUClass.RESERVED:
            return self.member(w, req, None, CPUSet(), False), None
        warning = None
        if req.exclusive:
            got = self._exclusive(w, req, affinity, self._mine(held, req.exclusive))
            if got is not None:
                return got, None
            warning = (f"{NAME}: {w} ({w.short_key}) wants {plural(req.exclusive, 'exclusive CPU')} but no pool "
                       f"can give {'it' if req.exclusive == 1 else 'them'}; running it on shared CPUs")
            req = replace(req, cls=CPUClass.SHARED, exclusive=0, shared_milli=w.cpu_request)
        fits = book.fitting(req.shared_milli)
        pools = [p for p in book.tree.pools if p.allows(req.level) and fits[p]]
        if req.cpu_limit:
            pools = [p for p in pools if book.headroom(p) >= req.cpu_limit] or \
                [p for p in pools if p.parent is None] or pools
        ranked = rank(self._candidate(p, req, affinity, 0, 0) for p in pools)
        if ranked:
            return self.member(w, req, ranked[0].pool, CPUSet(), False), warning
        # Overcommitted (kubelet admitted it all the same): the pool with the most headroom.
        allowed = [p for p in book.tree.pools if p.allows(req.level) and book.shared[p]] or [book.tree.root]
        pool = max(allowed, key=lambda p: (book.headroom(p), -p.index))
        extra = (f"{NAME}: {w} ({w.short_key}): no pool has {req.shared_milli}m CPU free; "
                 f"running it in pool {pool.name}, overcommitted")
        member = self.member(w, req, pool, CPUSet(), False)
        member.overcommitted = True
        return member, "; ".join(filter(None, (warning, extra)))

    def _mine(self, held: CPUSet | None, n: int) -> CPUSet | None:
        """What a resized container's `n` exclusive CPUs come from first: those it held when
        it shrinks or keeps its count; growing, those and the other threads of their cores,
        so that it completes its cores as a create takes whole ones (a shared container
        may use those threads now; the pool's shared members keep other CPUs first)."""
        if not held:
            return None
        if n <= len(held):
            return held
        cores = self.book.cores
        return CPUSet().union(held, *(cores[c] for c in held if c in cores))

    def _exclusive(self, w: Workload, req: Request, affinity: Mapping[str, float],
                   mine: CPUSet | None = None) -> Member | None:
        book, n, fraction = self.book, req.exclusive, req.shared_milli
        # Every pool is ranked by how many CPUs it could give; the CPUs themselves are
        # worked out only for the pools tried, best first (usually the first one).
        options: list[tuple[Candidate, CPUSet | None]] = []
        fits = book.fitting(fraction) if fraction else None
        spare = book.spare_counts(fraction)
        for pool in book.tree.pools:
            if not pool.allows(req.level) or (fits is not None and not fits[pool]):
                continue
            if req.prefer_isolated:
                free_isolated = pool.isolated - book.used_isolated
                if len(free_isolated) >= n:
                    cand = self._candidate(pool, req, affinity, 0, len(free_isolated) - n)
                    options.append((replace(cand, isolated=True), free_isolated))
                    continue
            if spare[pool] >= n:
                options.append((self._candidate(pool, req, affinity, 1000 * n, spare[pool] - n), None))
        order = {id(c): free for c, free in options}
        for cand in rank(c for c, _ in options):
            free = order[id(cand)]
            isolated = free is not None
            if free is None:
                free = book.spare(cand.pool, fraction, mine)
            try:
                cpus = self._take(free, n, mine)
            except AllocationError:
                continue
            if isolated or book.can_take(cand.pool, cpus, fraction):
                return self.member(w, req, cand.pool, cpus, isolated)
        return None

    def _take(self, free: CPUSet, n: int, mine: CPUSet | None) -> CPUSet:
        """`n` of `free` as the allocator picks them, from `mine` first unless that spreads
        them over more packages, dies, NUMA nodes or L3 groups than a pick from scratch
        (the allocator chooses what it adds to `mine` without regard to where `mine` is)."""
        plain = self.allocator.allocate(free, n)
        if not mine or mine.isdisjoint(free) or plain <= mine:
            return plain
        kept = self.allocator.allocate(free, n, mine)
        topology = self.allocator.topology
        wider = any(k > p for k, p in zip(_spread(topology, kept), _spread(topology, plain), strict=True))
        return plain if wider else kept

    def _candidate(self, pool: Pool, req: Request, affinity: Mapping[str, float], taken_milli: int,
                   free_exclusive: int) -> Candidate:
        book = self.book
        free_memory = pool.memory_bytes(req.kinds) - book.memory[pool.name]
        return Candidate(pool=pool, memory_fits=req.memory <= free_memory, affinity=affinity.get(pool.name, 0.0),
                         kinds=len(available_kinds(pool, req.kinds)),
                         free_milli=book.free_milli(pool) - taken_milli - req.shared_milli,
                         free_exclusive=free_exclusive, load=book.parts[pool], reserved=len(pool.reserved))

    def anchor(self, pool: Pool | None, req: Request, cpus: CPUSet) -> Pool:
        """The pool whose memory a container gets before widening: the reserved CPUs' pool,
        the lowest pool holding an exclusive container's CPUs, else its own pool."""
        if pool is None:
            return self.reserved_pool()
        if req.cls is CPUClass.EXCLUSIVE and cpus:
            lowest = pool
            while True:
                inner = next((c for c in lowest.children if cpus <= c.cpus), None)
                if inner is None:
                    return lowest
                lowest = inner
        return pool

    def member(self, w: Workload, req: Request, pool: Pool | None, cpus: CPUSet, isolated: bool) -> Member:
        anchor = self.anchor(pool, req, cpus)
        kinds, cold_until = req.kinds, None
        if req.cold_start is not None and any(p.memory.get("pmem") for p in anchor.lineage()):
            kinds, cold_until = ("pmem",), self.clock() + req.cold_start
        mem_pool = memory_pool(anchor, kinds, req.memory, self.book.memory, req.memory_limit)
        kinds = available_kinds(mem_pool, kinds) or ("dram",)
        return Member(key=w.key, workload=w, request=req, pool=pool, exclusive=cpus, from_isolated=isolated,
                      mem_pool=mem_pool, kinds=kinds, mems=None, cold_until=cold_until)

    def reserved_pool(self) -> Pool:
        """The lowest pool holding every reserved CPU: where reserved containers' memory is."""
        tree, reserved = self.book.tree, self.book.reserved
        best = tree.root
        for pool in tree.pools:
            if reserved and reserved.issubset(pool.cpus) and pool.depth > best.depth:
                best = pool
        return best

    def warm_kinds(self, m: Member) -> tuple[Pool, tuple[str, ...]]:
        """Where a cold-started container's memory goes when the cold start is over."""
        kinds = tuple(k for k in m.request.kinds if k != "pmem") or ("dram",)
        anchor = self.anchor(m.pool, m.request, m.exclusive)
        book = self.book
        if m.mem_pool is not None and m.request.memory:
            for p in m.mem_pool.lineage():  # its own bytes do not count against the move
                book.memory[p.name] -= m.request.memory
        mem_pool = memory_pool(anchor, kinds, m.request.memory, book.memory, m.request.memory_limit)
        if m.mem_pool is not None and m.request.memory:
            for p in m.mem_pool.lineage():
                book.memory[p.name] += m.request.memory
        return mem_pool, available_kinds(mem_pool, kinds) or ("dram",)


def _spread(topology: Topology, cpus: CPUSet) -> tuple[int, ...]:
    """How many packages, dies, NUMA nodes and L3 groups `cpus` touch."""
    infos = [topology.cpu(c) for c in cpus]
    return (len({i.package for i in infos}), len({(i.package, i.die) for i in infos}),
            len({i.node for i in infos}), len({i.l3 for i in infos}))
