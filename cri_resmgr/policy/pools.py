"""Bookkeeping shared by the CPU-pool policies (static, static-plus).

A container is a *member* of the book in one of four ways:

* SHARED: runs on the shared pool, so its cpuset follows the pool;
* MIXED: runs on its exclusive CPUs plus the shared pool (static-plus,
  fractional requests), so it follows the pool too;
* EXCLUSIVE: runs on its exclusive CPUs only; never changes;
* RESERVED: runs on the reserved CPUs; never changes.

When the shared pool changes, every SHARED and MIXED member's cpuset
changes (exclusive sets are disjoint from the pool, so a MIXED member's
union changes whenever the pool does), and `set_shared` reports exactly
those.  All SHARED members get the very same Resources object: with a
thousand shared containers a pool update is one `dict.fromkeys`.

`PoolPolicy` is the part of the two policies that does not depend on their
placement rules: release, resize, restore (its rules for policy/restore.py),
and the queries.  Policies are plain
objects with no locking: the caller serializes calls on one policy.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from cri_resmgr.bounded import clip, short
from cri_resmgr.policy import restore as restoring
from cri_resmgr.policy.api import Assignment, Decision, PolicyContext, PolicyError, ResizeError, Resources, Workload
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import CpuClassLayout
from cri_resmgr.policy.resize import refusal
from cri_resmgr.policy.restore import Rules, lost_exclusive
from cri_resmgr.policy.usage import PolicyUsage, PoolUsage
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet, format_cpulist

__all__ = [
    "Kind", "Member", "MemsOf", "memory_nodes", "Book", "PoolPolicy", "option_bool", "check_options",
    "POOL_SHARED", "POOL_RESERVED", "POOL_EXCLUSIVE", "POOL_ISOLATED",
]

# Assignment.pool values: where a container's non-exclusive part runs, or,
# for containers without one, where its exclusive CPUs came from.
POOL_SHARED = "shared"  # the shared pool (plus exclusive CPUs, if any)
POOL_RESERVED = "reserved"  # the reserved CPUs
POOL_EXCLUSIVE = "exclusive"  # only exclusive CPUs taken from the shared pool
POOL_ISOLATED = "isolated"  # only exclusive CPUs taken from the isolated pool


class Kind(enum.Enum):
    SHARED = "shared"
    MIXED = "mixed"
    EXCLUSIVE = "exclusive"
    RESERVED = "reserved"


@dataclass(slots=True)
class Member:
    kind: Kind
    pool: str
    exclusive: CPUSet
    # Its pool and exclusive CPUs as one object for the member's whole life: a state
    # save knows it unchanged by identity, without building or comparing anything.
    assignment: Assignment
    # Fixed for EXCLUSIVE/RESERVED, kept current for MIXED, None for SHARED
    # (those read the book's one shared Resources).
    resources: Resources | None = None
    # MIXED: the memory nodes of its exclusive CPUs, for its resources on each pool change.
    exclusive_nodes: frozenset[int] = frozenset()


def memory_nodes(topology: Topology) -> dict[int, frozenset[int]]:
    """For each node with CPUs, the nodes its CPUs' memory comes from: itself, or, when
    it has no memory or is offline (CPU-only nodes on some POWER and ARM machines), the
    nearest online nodes that have memory, as the kernel would allocate. The kernel
    refuses a cpuset.mems naming a node without memory. Where no node reports its
    memory (no meminfo files), every node is taken to have some."""
    nodes = topology.nodes
    has_memory = [n for n in nodes.values() if n.online and n.memory_kb > 0]
    if not has_memory:
        return {nid: frozenset({nid}) for nid, n in nodes.items() if n.cpus}
    # Ordinary DRAM (nodes with CPUs) before memory-only tiers (PMEM, CXL, HBM).
    fallback = [n for n in has_memory if n.cpus] or has_memory
    out: dict[int, frozenset[int]] = {}
    for nid, node in nodes.items():
        if not node.cpus:
            continue
        if node in has_memory:
            out[nid] = frozenset({nid})
            continue
        nearest = min(node.distance(m.id) for m in fallback)
        out[nid] = frozenset(m.id for m in fallback if node.distance(m.id) == nearest)
    return out


class MemsOf:
    """cpuset_mems for a cpuset: the NUMA nodes of its CPUs, kernel list syntax."""

    def __init__(self, topology: Topology) -> None:
        memory_of = memory_nodes(topology)
        by_node: dict[int, int] = {}
        for cpu, info in topology.cpus.items():
            by_node[info.node] = by_node.get(info.node, 0) | 1 << cpu
        # Each CPU node's CPUs (a bitmask, CPUSet.as_mask) and the memory nodes they take
        # memory from: a cpuset's nodes are an AND per node, not a lookup per CPU (a shared
        # pool of thousands of CPUs is asked about on every change of it).
        self._nodes = [(cpus, memory_of[node]) for node, cpus in by_node.items()]
        self._text: dict[frozenset[int], str] = {}

    def nodes(self, cpus: CPUSet) -> frozenset[int]:
        mask = cpus.as_mask()
        return frozenset().union(*(mems for node_cpus, mems in self._nodes if node_cpus & mask))

    def text(self, nodes: frozenset[int]) -> str:
        text = self._text.get(nodes)
        if text is None:
            text = format_cpulist(nodes)
            self._text[nodes] = text  # at most 2^nodes entries, in practice few
        return text

    def __call__(self, cpus: CPUSet) -> str:
        return self.text(self.nodes(cpus))

    def resources(self, cpus: CPUSet) -> Resources:
        return Resources(cpuset_cpus=cpus, cpuset_mems=self(cpus))


class Book:
    """Who runs where, the shared pool's current CPUs, and the exclusive CPUs in use."""

    def __init__(self, mems: MemsOf, shared: CPUSet, reserved: CPUSet) -> None:
        self.mems = mems
        self.members: dict[str, Member] = {}
        self._assignments: dict[str, Assignment] = {}  # the members' `assignment`s, kept along
        # Ordered sets (dicts with None values) so reports are deterministic.
        self._shared_keys: dict[str, None] = {}
        self._mixed_keys: dict[str, None] = {}
        self.used: CPUSet = CPUSet()  # all exclusive CPUs of all members
        self._base, self._reserved = shared, reserved  # for `emptied`
        self.shared = shared
        self._shared_nodes = self.mems.nodes(shared)
        self.shared_resources = self._resources(shared, self._shared_nodes)
        self.reserved_resources = self.mems.resources(reserved) if reserved else None

    # -- queries -------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self.members

    def __len__(self) -> int:
        return len(self.members)

    def resources(self, key: str) -> Resources | None:
        member = self.members.get(key)
        if member is None:
            return None
        if member.kind is Kind.SHARED:
            return self.shared_resources
        return member.resources

    def assignments(self) -> dict[str, Assignment]:
        """Each member's assignment, the same object while it is a member."""
        return dict(self._assignments)

    # -- changes ---------------------------------------------------------------------

    def add(self, key: str, kind: Kind, pool: str, exclusive: CPUSet = CPUSet()) -> Resources:
        """Record a member; returns its resources. Exclusive CPUs must be free."""
        exclusive_nodes: frozenset[int] = frozenset()
        if kind is Kind.SHARED:
            resources = None
            self._shared_keys[key] = None
        elif kind is Kind.RESERVED:
            resources = self.reserved_resources
            if resources is None:
                raise ValueError("no reserved CPUs to place a container on")
        elif kind is Kind.EXCLUSIVE:
            resources = self.mems.resources(exclusive)
        else:
            exclusive_nodes = self.mems.nodes(exclusive)
            resources = self._mixed_resources(exclusive, exclusive_nodes)
            self._mixed_keys[key] = None
        if exclusive:
            if not self.used.isdisjoint(exclusive):
                raise ValueError(f"CPUs {self.used & exclusive} are already exclusive")
            self.used = self.used | exclusive
        member = Member(kind, pool, exclusive, Assignment(pool=pool, exclusive=exclusive), resources, exclusive_nodes)
        self.members[key] = member
        self._assignments[key] = member.assignment
        return self.shared_resources if resources is None else resources

    def remove(self, key: str) -> Member | None:
        member = self.members.pop(key, None)
        if member is None:
            return None
        del self._assignments[key]
        self._shared_keys.pop(key, None)
        self._mixed_keys.pop(key, None)
        if member.exclusive:
            self.used = self.used - member.exclusive
        return member

    def set_shared(self, shared: CPUSet, others: dict[str, Resources] | None = None) -> None:
        """Change the shared pool; put every member whose cpuset changed in `others`."""
        if shared == self.shared:
            return
        self.shared = shared
        self._shared_nodes = self.mems.nodes(shared)
        self.shared_resources = res = self._resources(shared, self._shared_nodes)
        if others is not None and self._shared_keys:
            others.update(dict.fromkeys(self._shared_keys, res))
        members = self.members
        for key in self._mixed_keys:
            member = members[key]
            member.resources = self._mixed_resources(member.exclusive, member.exclusive_nodes)
            if others is not None:
                others[key] = member.resources

    def emptied(self) -> Book:
        """A new book with no members and the shared pool it started with (the memory-node
        table shared); this one is left as it is."""
        return Book(self.mems, self._base, self._reserved)

    def _resources(self, cpus: CPUSet, nodes: frozenset[int]) -> Resources:
        return Resources(cpuset_cpus=cpus, cpuset_mems=self.mems.text(nodes))

    def _mixed_resources(self, exclusive: CPUSet, exclusive_nodes: frozenset[int]) -> Resources:
        # Both sets' nodes are known (the pool's once per change of it), so each MIXED
        # member costs the union of its CPUs alone.
        return self._resources(self.shared | exclusive, exclusive_nodes | self._shared_nodes)


def option_bool(options: Mapping[str, object], name: str, section: str, default: bool = False) -> bool:
    """A boolean policy option; accepts YAML booleans and 'true'/'false' strings."""
    value = options.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigValueError(f"policy.{section}.{name}: expected true or false, got {short(value)}")


def check_options(options: Mapping[str, object], known: Iterable[str], section: str) -> None:
    """Reject unknown option names, so a typo does not silently mean the default."""
    known = tuple(known)
    for name in options:
        if name not in known:
            # A policy has dozens of options: the likeliest one is named, the list is clipped,
            # so the error stays one readable line.
            near = difflib.get_close_matches(str(name), known, n=1)
            hint = f"did you mean {near[0]}?" if near else f"known: {clip(', '.join(known) or 'none', 300)}"
            raise ConfigValueError(f"policy.{section}.{clip(str(name), 30)}: unknown option ({hint})")


def checked_cpus(context: PolicyContext) -> tuple[CPUSet, CPUSet]:
    """(available, reserved); a PolicyContext built by hand may skip build_context's checks."""
    available, reserved = context.available, context.reserved
    if not reserved.issubset(available):
        raise ConfigValueError(
            f"policy.ReservedResources.CPU: CPUs {reserved - available} are not available ({available})"
        )
    return available, reserved


class PoolPolicy:
    """What static and static-plus share: the book, release, restore, queries.

    A subclass sets `_book`, `_base_shared` (the shared pool with no exclusive
    CPUs taken) and `_reserved`, and implements `_place`, `_invalid`,
    `_exclusive_wanted` and `_exclusive_capable`.
    """

    name = "pool"
    _book: Book
    _base_shared: CPUSet
    _reserved: CPUSet
    _available: CPUSet
    _cpu_layout: CpuClassLayout

    def allocate(self, workload: Workload) -> Decision:
        self._check_new(workload)
        return self._place(workload, None)

    def _place(self, workload: Workload, prefer: CPUSet | None) -> Decision:  # pragma: no cover - abstract
        """Places a container not in the book; exclusive CPUs from `prefer` first."""
        raise NotImplementedError

    def _check_new(self, workload: Workload) -> None:
        if workload.key in self._book:
            raise PolicyError(
                f"{self.name}: container {workload.key} ({workload}) is already placed; release it first"
            )

    def _take_from_shared(self, cpus: CPUSet, others: dict[str, Resources]) -> None:
        self._book.set_shared(self._book.shared - cpus, others)

    def release(self, key: str) -> Decision:
        member = self._book.remove(key)
        if member is None:
            return Decision()
        others: dict[str, Resources] = {}
        back = member.exclusive & self._base_shared
        if back:
            self._book.set_shared(self._book.shared | back, others)
        return Decision(others=others)

    def resize(self, workload: Workload) -> Decision:
        """In place (policy.api.Resizable): the member is taken out and placed again
        with its new requests, its exclusive CPUs preferred (a shrink keeps a subset of
        them, a growth adds to them); when the new size cannot be met it is put back
        exactly as it was and ResizeError says why."""
        key, book = workload.key, self._book
        old = book.members.get(key)
        if old is None:
            raise PolicyError(f"{self.name}: cannot resize {workload} ({key}): not placed")
        shared_before = book.shared
        others: dict[str, Resources] = {}
        book.remove(key)
        back = old.exclusive & self._base_shared
        if back:
            book.set_shared(book.shared | back, others)
        try:
            decision = self._place(workload, old.exclusive or None)
        except BaseException:
            self._put_back(key, old, shared_before)
            raise
        if decision.warning:
            self._put_back(key, old, shared_before)
            raise ResizeError(refusal(decision.warning))
        others.update(decision.others)
        others.pop(key, None)
        return Decision(decision.resources, others)

    def _put_back(self, key: str, member: Member, shared: CPUSet) -> None:
        """Undoes a resize that did not fit: nobody was told of the change in between."""
        self._book.remove(key)
        self._book.set_shared(shared)
        self._book.add(key, member.kind, member.pool, member.exclusive)

    def restore(self, items: list[tuple[Workload, Assignment | None]], live: bool = False) -> Decision:
        """policy/restore.py's procedure with _PoolRules: a saved assignment is kept when
        `_invalid` finds nothing wrong with it; a live restore is refused when a container
        that held all the exclusive CPUs it asks for cannot get them again."""
        return restoring.restore(self, _PoolRules(self), items, live)

    def _invalid(self, workload: Workload, assignment: Assignment) -> str | None:  # pragma: no cover
        """Why a saved assignment cannot be kept now (None: it can)."""
        raise NotImplementedError

    def _exclusive_wanted(self, workload: Workload) -> int:  # pragma: no cover - abstract
        """How many exclusive CPUs the container asks for under this policy."""
        raise NotImplementedError

    def _exclusive_unfit(self, exclusive: CPUSet, allowed: CPUSet) -> str | None:
        """Why saved exclusive CPUs cannot be kept: not allowed, double-booked, or taking
        them leaves the shared pool empty; None: they can."""
        book = self._book
        if not exclusive.issubset(allowed):
            return f"CPUs {exclusive - allowed} are not available for exclusive use"
        if not exclusive.isdisjoint(book.used):
            return f"CPUs {exclusive & book.used} are taken"
        if not self._base_shared - book.used - exclusive:
            return "taking them would leave no shared CPU"
        return None

    def resources(self, key: str) -> Resources | None:
        return self._book.resources(key)

    def assignments(self) -> Mapping[str, Assignment]:
        return self._book.assignments()

    def assignment(self, key: str) -> Assignment | None:
        member = self._book.members.get(key)
        return None if member is None else member.assignment

    def _exclusive_capable(self) -> CPUSet:  # pragma: no cover - abstract
        """The CPUs exclusive allocations may come from, in use or not."""
        raise NotImplementedError

    def _extra_pools(self, used: CPUSet) -> tuple[PoolUsage, ...]:
        return ()

    def cpu_classes(self) -> CpuClassLayout:
        """The configuration's CPU classes and which CPUs get which (policy/cpuclasses.py):
        the shared pool's CPUs (and unused isolated ones) `SharedPoolCPUClass`."""
        return replace(self._cpu_layout, cpus=self._available)

    def usage(self) -> PolicyUsage:
        """The pools and who holds what, for metrics and the node export (see usage.py)."""
        book = self._book
        used, shared = book.used, book.shared
        members = list(book.members.items())
        pools = (PoolUsage("shared", self._base_shared, used & self._base_shared, shared),
                 *((PoolUsage("reserved", self._reserved, CPUSet(), self._reserved),) if self._reserved else ()),
                 *self._extra_pools(used))
        counts: dict[str, int] = {}
        for _, m in members:
            counts[m.pool] = counts.get(m.pool, 0) + 1
        # The shared pool's last CPU is never given away (shared containers need one).
        free = self._exclusive_capable() - used
        if len(shared & free) == len(shared) and shared:
            free = free - CPUSet([min(shared)])
        return PolicyUsage(pools, free, {k: m.exclusive for k, m in members if m.exclusive}, counts)

    # Introspection for tests, benchmarks and diagnostics.
    @property
    def shared(self) -> CPUSet:
        return self._book.shared

    @property
    def reserved(self) -> CPUSet:
        return self._reserved

    def exclusive_wanted(self, workload: Workload) -> int:
        """How many exclusive CPUs the policy gives `workload` when it can (0: none by design);
        `cri-resmgr status` marks a container holding fewer as a request not met."""
        return self._exclusive_wanted(workload)

    @property
    def shared_floor(self) -> int:
        """CPUs of its own, not reserved, the shared pool keeps whatever is asked of it: none
        when the reserved CPUs are in the shared pool (static's default: they are the room
        left for shared containers), else the one CPU it never gives away (static-plus, whose
        reserved CPUs are a pool of their own; static with StrictReservation). For the
        simulator's check that Guaranteed containers get exclusive CPUs when requests fit."""
        return 0 if self._reserved and self._reserved <= self._base_shared else 1


class _PoolRules(Rules):
    """A PoolPolicy's part in policy/restore.py: the book is replaced by an empty one (the
    old one is put back on a refusal); saved assignments are kept in the given order, each
    as its pool and exclusive CPUs say, when the policy's `_invalid` finds nothing wrong
    (its exclusive CPUs still free, allowed and leaving a shared CPU); the shared pool
    then is what the kept ones left; the rest is placed in the given order."""

    def __init__(self, policy: PoolPolicy) -> None:
        self.name = policy.name
        self._policy = policy

    def reset(self) -> Callable[[], None]:
        policy = self._policy
        before = policy._book
        policy._book = before.emptied()

        def undo() -> None:
            policy._book = before
        return undo

    def validate(self, workload: Workload, saved: Assignment | None) -> str | None:
        return "nothing saved" if saved is None else self._policy._invalid(workload, saved)

    def keep(self, workload: Workload, saved: Assignment | None) -> None:
        assert saved is not None  # validate() refuses None
        pool, exclusive = saved.pool, saved.exclusive
        if pool == POOL_RESERVED:
            kind = Kind.RESERVED
        elif not exclusive:
            kind = Kind.SHARED
        elif pool == POOL_SHARED:
            kind = Kind.MIXED
        else:
            kind = Kind.EXCLUSIVE
        self._policy._book.add(workload.key, kind, pool, exclusive)

    def settle(self) -> list[str]:
        book = self._policy._book
        book.set_shared(self._policy._base_shared - book.used)
        return []

    def lost(self, workload: Workload, saved: Assignment) -> str | None:
        member = self._policy._book.members.get(workload.key)
        now = len(member.exclusive) if member is not None else 0
        return lost_exclusive(workload, self._policy._exclusive_wanted(workload), saved, now)
