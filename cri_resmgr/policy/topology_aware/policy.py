"""The `topology-aware` policy: containers in a tree of pools built from the hardware.

See docs/policies.md for what a user sees. The parts: pooltree.py (the tree),
classes.py (what a container asks), placement.py with criteria.py (where it goes),
affinity.py, memory.py, book.py (who runs where, the knock-on updates), restore.py
(its rules for policy/restore.py: restart and reconfiguration). No I/O; the wall clock
is passed in (cold start).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TypeVar

from cri_resmgr.policy import restore as restoring
from cri_resmgr.policy.api import Assignment, Decision, PolicyContext, PolicyError, ResizeError, Resources, Workload
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import CpuClassLayout
from cri_resmgr.policy.pools import POOL_RESERVED, checked_cpus
from cri_resmgr.policy.resize import refusal
from cri_resmgr.policy.topology_aware.affinity import AffinityIndex, pool_scores, reads_per_container
from cri_resmgr.policy.topology_aware.book import Book, Member
from cri_resmgr.policy.topology_aware.classes import Request, request_of
from cri_resmgr.policy.topology_aware.options import NAME, parse_options
from cri_resmgr.policy.topology_aware.placement import Placer
from cri_resmgr.policy.topology_aware.pooltree import PoolTree, build_tree
from cri_resmgr.policy.topology_aware.restore import TopologyAwareRules
from cri_resmgr.policy.tuning import ExclusiveTuning
from cri_resmgr.policy.usage import PolicyUsage, PoolUsage
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["TopologyAwarePolicy", "NAME", "DESCRIPTION", "factory"]

DESCRIPTION = "pool tree from the hardware: tightest fitting pool, exclusive CPUs, memory pinning, affinity"
K = TypeVar("K")
COLOCATE_WEIGHT = 1000  # ColocatePods / ColocateNamespaces: above any annotation's usual weights


class TopologyAwarePolicy(ExclusiveTuning):
    name = NAME

    def __init__(self, context: PolicyContext, clock: Callable[[], float] = time.time) -> None:
        self._options = parse_options(context.options)
        self._parse_tuning(context.options, f"policy.{NAME}")  # scheduling classes, interrupts
        available, reserved = checked_cpus(context)
        self._topology = context.topology
        self._reserved = reserved
        self._tree: PoolTree = build_tree(context.topology, available, reserved)
        if not self._tree.root.sharable:
            raise ConfigValueError(
                f"policy.AvailableResources.CPU: no CPUs left for shared containers: available {available}, "
                f"reserved {reserved or 'none'}, isolated {self._tree.root.isolated or 'none'}")
        self._clock = clock
        self._allocator = CPUAllocator(context.topology)
        self._cores = _cores(context.topology, self._tree.root.cpus)
        self._reset()

    def _reset(self) -> None:
        opts = self._options
        self._book = Book(self._tree, self._reserved, opts.pin_cpu, opts.pin_memory, self._cores)
        self._placer = Placer(self._book, self._allocator, self._clock)
        self._affinity_index = AffinityIndex()
        self._by_pod: dict[tuple[str, str], dict[str, None]] = {}
        self._by_ns: dict[str, dict[str, None]] = {}

    # -- introspection (tests, benchmarks, docs) ----------------------------------------------

    @property
    def tree(self) -> PoolTree:
        return self._tree

    @property
    def book(self) -> Book:
        return self._book

    @property
    def placer(self) -> Placer:
        return self._placer

    @property
    def reserved(self) -> CPUSet:
        return self._reserved

    def request(self, w: Workload) -> Request:
        return request_of(w, self._options, len(self._reserved))

    def exclusive_wanted(self, w: Workload) -> int:
        """How many exclusive CPUs the policy gives `w` when it can (`cri-resmgr status`
        marks a container holding fewer as a request not met)."""
        return self.request(w).exclusive

    # -- decisions ---------------------------------------------------------------------------

    def allocate(self, workload: Workload) -> Decision:
        return self._allocate(workload)

    def _allocate(self, workload: Workload, held: CPUSet | None = None) -> Decision:
        """`held`: a resized container's exclusive CPUs before, kept where they can be."""
        if workload.key in self._book:
            raise PolicyError(f"{NAME}: container {workload.key} ({workload}) is already placed; release it first")
        req = self.request(workload)
        others: dict[str, Resources] = {}
        member, warning = self._placer.place(workload, req, self._affinity(workload, req), held)
        res = self._book.add(member, others)
        self._index(member, +1)
        warnings = "; ".join((*req.warnings, *([warning] if warning else [])))
        return Decision(res, others, warnings or None)

    def release(self, key: str) -> Decision:
        others: dict[str, Resources] = {}
        member = self._book.remove(key, others)
        if member is None:
            return Decision()
        self._index(member, -1)
        return Decision(others=others)

    def resize(self, workload: Workload) -> Decision:
        """In place (policy.api.Resizable): the container is placed again with its new
        requests, its exclusive CPUs from those it had (and their cores' other threads)
        first where the pool chosen holds them; when it would get fewer exclusive CPUs
        than it asks for, or run overcommitted, it is put back as it was and ResizeError
        says why."""
        key = workload.key
        old = self._book.members.get(key)
        if old is None:
            raise PolicyError(f"{NAME}: cannot resize {workload} ({key}): not placed")
        # What it asks for, before placement: a placement that finds no pool able to give the
        # exclusive CPUs runs it shared and rewrites its request to none (placement.py).
        asked = self.request(workload).exclusive
        released = self.release(key)
        try:
            decision = self._allocate(workload, old.exclusive)
        except BaseException:
            self._put_back(old)
            raise
        new = self._book.members[key]
        if len(new.exclusive) < asked or (new.overcommitted and not old.overcommitted):
            self._put_back(old)
            why = refusal(decision.warning) if decision.warning else f"{NAME}: {workload} ({key}) does not fit"
            raise ResizeError(why)
        others = {**released.others, **decision.others}
        others.pop(key, None)
        return Decision(decision.resources, others)

    def _put_back(self, old: Member) -> None:
        """Undoes a resize that did not fit: nobody was told of the change in between."""
        if old.key in self._book:
            self.release(old.key)
        self.keep(old)

    def restore(self, items: list[tuple[Workload, Assignment | None]], live: bool = False) -> Decision:
        """policy/restore.py's procedure with this policy's rules (restore.py)."""
        return restoring.restore(self, TopologyAwareRules(self), items, live)

    def start_afresh(self) -> Callable[[], None]:
        """Empties the book (restore.py); returns what puts back the state in force now."""
        saved = (self._book, self._placer, self._affinity_index, self._by_pod, self._by_ns)
        self._reset()

        def undo() -> None:
            self._book, self._placer, self._affinity_index, self._by_pod, self._by_ns = saved
        return undo

    def keep(self, member: Member) -> None:
        """Record a member restored as it was saved (restore.py)."""
        self._book.add(member, {})
        self._index(member, +1)

    # -- cold start: the engine's timer hook (engine/timers.py) ---------------------------------

    def next_deadline(self) -> float | None:
        """The wall-clock time the next cold start ends; None when none is pending."""
        times = [m.cold_until for m in self._book.cold.values() if m.cold_until is not None]
        return min(times) if times else None

    def expire(self, now: float) -> Decision:
        """Ends the cold starts due by `now`: their memory moves to DRAM."""
        others: dict[str, Resources] = {}
        for m in list(self._book.cold.values()):
            if m.cold_until is not None and m.cold_until <= now:
                m.cold_until = None
                del self._book.cold[m.key]
                mem_pool, kinds = self._placer.warm_kinds(m)
                others[m.key] = self._book.set_memory(m, mem_pool, kinds)
        return Decision(others=others)

    # -- queries ---------------------------------------------------------------------------------

    def resources(self, key: str) -> Resources | None:
        return self._book.resources(key)

    def assignments(self) -> Mapping[str, Assignment]:
        return {key: _assignment(m) for key, m in self._book.members.items()}

    def assignment(self, key: str) -> Assignment | None:
        m = self._book.members.get(key)
        return None if m is None else _assignment(m)

    def cpu_classes(self) -> CpuClassLayout:
        """The configuration's CPU classes and which CPUs get which (policy/cpuclasses.py):
        every CPU of the tree not held exclusively nor reserved is `SharedPoolCPUClass`'s."""
        return replace(self._options.cpu_classes, cpus=self._tree.root.cpus)

    def usage(self) -> PolicyUsage:
        book = self._book
        members = list(book.members.values())
        by_pool: dict[str, list[Member]] = {}
        for m in members:
            by_pool.setdefault(m.pool.name if m.pool is not None else POOL_RESERVED, []).append(m)
        pools = []
        if self._reserved:
            res = by_pool.get(POOL_RESERVED, [])
            pools.append(PoolUsage(POOL_RESERVED, self._reserved, CPUSet(), self._reserved, kind="reserved",
                                   containers=tuple(m.key for m in res),
                                   requested_milli=sum(m.workload.cpu_request for m in res)))
        used = book.used | book.used_isolated
        for pool in self._tree.pools:
            mine = by_pool.get(pool.name, [])
            pools.append(PoolUsage(
                pool.name, pool.cpus, used & pool.cpus, book.shared[pool], kind=pool.level,
                parent=pool.parent.name if pool.parent is not None else "",
                mems=book.mems_text(pool.nodes(("dram",))), containers=tuple(m.key for m in mine),
                requested_milli=sum(m.workload.cpu_request for m in mine)))
        root = self._tree.root
        # What a container could still get: not the CPUs each leaf keeps for its own shared
        # members (book.spare), which no exclusive container is given (reported free, the
        # simulator judged a split forced by them as one a whole core was free for).
        free = book.spare(root) | (root.isolated - book.used_isolated)
        shared = book.shared[root]
        if shared and shared.issubset(free):
            free = free - CPUSet([max(shared)])  # the root keeps one shared CPU
        return PolicyUsage(tuple(pools), free, {m.key: m.exclusive for m in members if m.exclusive},
                           {name: len(ms) for name, ms in by_pool.items()})

    # -- affinity ------------------------------------------------------------------------------------

    def _affinity(self, w: Workload, req: Request) -> dict[str, float]:
        members = self._book.members
        if req.rules and reads_per_container(req.rules):  # about names or pods: one by one
            weights = self._affinity_index.weights(w, ())
            for m in members.values():
                if m.pool is not None:
                    weights.append((m.pool, sum(r.weight for r in req.rules if r.applies(w, m.workload))))
        else:
            weights = self._affinity_index.weights(w, req.rules)
        opts = self._options
        if opts.colocate_pods:
            for key in self._by_pod.get((w.namespace, w.pod), {}):
                pool = members[key].pool
                if pool is not None:
                    weights.append((pool, COLOCATE_WEIGHT))
        if opts.colocate_namespaces:
            for key in self._by_ns.get(w.namespace, {}):
                pool = members[key].pool
                if pool is not None:
                    weights.append((pool, COLOCATE_WEIGHT))
        return pool_scores(weights, self._tree.pools) if weights else {}

    def _index(self, m: Member, sign: int) -> None:
        w = m.workload
        if m.pool is not None:
            self._affinity_index.add(w, m.request.rules, m.pool, sign)
        if sign > 0:
            self._by_pod.setdefault((w.namespace, w.pod), {})[m.key] = None
            self._by_ns.setdefault(w.namespace, {})[m.key] = None
            return
        _unindex(self._by_pod, (w.namespace, w.pod), m.key)
        _unindex(self._by_ns, w.namespace, m.key)


def _cores(topology: Topology, cpus: CPUSet) -> dict[int, CPUSet]:
    """CPU -> its core's CPUs, for cores with more than one thread."""
    out: dict[int, CPUSet] = {}
    for cpu in cpus:
        if cpu not in out:
            core = topology.siblings(cpu)
            if len(core) > 1:
                out.update(dict.fromkeys(core, core))
    return out


def _unindex(index: dict[K, dict[str, None]], k: K, key: str) -> None:
    keys = index.get(k)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del index[k]


def _assignment(m: Member) -> Assignment:
    details: dict[str, object] = {"class": m.cls.value, "kinds": list(m.kinds)}
    if m.from_isolated:
        details["isolated"] = True
    if m.mem_pool is not None:
        details["mem_pool"] = m.mem_pool.name
    if m.cold_until is not None:
        details["cold_until"] = m.cold_until
    if m.overcommitted:
        details["overcommitted"] = True
    return Assignment(pool=m.pool.name if m.pool is not None else POOL_RESERVED, exclusive=m.exclusive,
                      details=details)


def factory(context: PolicyContext) -> TopologyAwarePolicy:
    return TopologyAwarePolicy(context)
