"""The pool tree: root, packages, dies, NUMA nodes and L3 cache groups of the CPUs the
policy may use, nested by the containment the hardware really has: a NUMA node holding
several packages is a level above them, one inside a package a level below. A group
whose CPUs are those of its parent is the same pool (the pool answers to both levels).
A group that crosses another (a node holding half of each of two packages) is split
into its parts, each named NAME@PARENT.

Each pool holds the available CPUs below it, the CPUs its shared containers may run on
when no exclusive CPU is taken (`sharable`: all but the isolated ones), its isolated and
its reserved CPUs, and its memory by kind:
the DRAM of its CPUs' nodes (a CPU-only node's: the nearest memory) plus the memory-only
nodes (PMEM, CXL, HBM) attached to them, each memory-only node to the CPU node closest
to it by distance.

The tree is plain data built once per policy (no allocation state: that is the
policy's book).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

from cri_resmgr.policy.pools import memory_nodes
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Pool", "PoolTree", "build_tree", "KINDS", "kind_of", "attach_memory_only"]

# Memory kinds as the memory-type annotation names them.
KINDS = ("dram", "pmem", "hbm")
ROOT = "root"


def kind_of(model_kind: str | None) -> str:
    """The annotation's kind for a node's kind in the hardware model (unknown: DRAM)."""
    if model_kind == "pmem-cxl":
        return "pmem"
    if model_kind == "hbm":
        return "hbm"
    return "dram"


@dataclass(eq=False)
class Pool:
    name: str
    level: str  # root, package, die, node, l3
    cpus: CPUSet
    levels: frozenset[str] = frozenset()  # every level this pool is (its group collapsed with others)
    above: frozenset[str] = frozenset()  # the levels of its ancestors
    parent: Pool | None = None
    children: list[Pool] = field(default_factory=list)
    index: int = 0  # pre-order position: the stable tie-break
    depth: int = 0
    sharable: CPUSet = field(default_factory=CPUSet)
    isolated: CPUSet = field(default_factory=CPUSet)
    # Reserved CPUs run shared containers too (as kubelet's static policy) but are never
    # exclusive; kube-system containers run on them alone.
    reserved: CPUSet = field(default_factory=CPUSet)
    cpu_nodes: frozenset[int] = frozenset()
    memory: dict[str, frozenset[int]] = field(default_factory=dict)  # kind -> memory nodes
    capacity: dict[str, int] = field(default_factory=dict)  # kind -> bytes
    # Every ordered subset of KINDS (what a request names) -> its bytes and the kinds held:
    # asked of every pool at each decision.
    by_kinds: dict[tuple[str, ...], tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    ancestors: tuple[Pool, ...] = ()  # parent first, root last
    leaves: tuple[Pool, ...] = ()  # the leaves of its subtree (itself, if one), pre-order

    def __repr__(self) -> str:
        return f"Pool({self.name}, {self.cpus})"

    def is_leaf(self) -> bool:
        return not self.children

    def lineage(self) -> tuple[Pool, ...]:
        """This pool, then its ancestors up to the root."""
        return (self, *self.ancestors)

    def related(self, other: Pool) -> bool:
        """One contains the other (their CPUs overlap)."""
        return other is self or other in self.ancestors or self in other.ancestors

    def walk(self) -> Iterator[Pool]:
        yield self
        for child in self.children:
            yield from child.walk()

    def allows(self, level: str | None) -> bool:
        """Whether a container that may go no lower than `level` may be placed here."""
        return level is None or level not in self.above

    def nodes(self, kinds: tuple[str, ...]) -> frozenset[int]:
        return frozenset().union(*(self.memory.get(k, frozenset()) for k in kinds))

    def memory_bytes(self, kinds: tuple[str, ...]) -> int:
        held = self.by_kinds.get(kinds)
        return held[0] if held is not None else sum(self.capacity.get(k, 0) for k in kinds)

    def kinds_held(self, kinds: tuple[str, ...]) -> tuple[str, ...]:
        """The requested kinds the pool has memory of."""
        held = self.by_kinds.get(kinds)
        return held[1] if held is not None else tuple(k for k in kinds if self.memory.get(k))


@dataclass(frozen=True)
class PoolTree:
    root: Pool
    pools: tuple[Pool, ...]  # pre-order
    by_name: dict[str, Pool]
    leaves: tuple[Pool, ...]

    def __getitem__(self, name: str) -> Pool:
        return self.by_name[name]

    def get(self, name: str) -> Pool | None:
        return self.by_name.get(name)


# Every ordered subset of KINDS: the memory kinds a request can name.
_KIND_SETS = [tuple(k for k, on in zip(KINDS, bits, strict=True) if on)
              for bits in product((False, True), repeat=len(KINDS))]

# Level order for groups of equal CPUs: the first names the pool.
_RANK = {"root": 0, "package": 1, "die": 2, "node": 3, "l3": 4}


def build_tree(topology: Topology, available: CPUSet, reserved: CPUSet) -> PoolTree:
    root = Pool(ROOT, "root", available, levels=frozenset({"root"}))
    for level, name, cpus in sorted(_groups(topology, available), key=lambda g: (-len(g[2]), _RANK[g[0]], g[2].min())):
        _insert(root, level, name, cpus)
    pools = tuple(root.walk())
    attached = attach_memory_only(topology)
    dram_of = memory_nodes(topology)
    for index, pool in enumerate(pools):
        pool.index = index
        ancestors = []
        up = pool.parent
        while up is not None:
            ancestors.append(up)
            up = up.parent
        pool.ancestors = tuple(ancestors)
        pool.above = frozenset().union(*(a.levels for a in ancestors))
        pool.depth = len(ancestors)
        pool.isolated = (pool.cpus & topology.isolated) - reserved
        pool.reserved = pool.cpus & reserved
        pool.sharable = pool.cpus - pool.isolated
        pool.cpu_nodes = frozenset(topology.node_of(c) for c in pool.cpus)
        _memory(pool, topology, dram_of, attached)
    for pool in reversed(pools):
        pool.leaves = tuple(leaf for c in pool.children for leaf in c.leaves) if pool.children else (pool,)
    return PoolTree(root, pools, {p.name: p for p in pools}, tuple(p for p in pools if p.is_leaf()))


def _groups(topology: Topology, available: CPUSet) -> list[tuple[str, str, CPUSet]]:
    """(level, name, CPUs) of every package, die, CPU node and L3 group, over the available CPUs."""
    out: list[tuple[str, str, CPUSet]] = []
    for package in topology.package_ids():
        pcpus = topology.package_cpus(package) & available
        if pcpus:
            out.append(("package", f"package{package}", pcpus))
        for die in topology.die_ids(package):
            dcpus = topology.die_cpus(package, die) & pcpus
            if dcpus:
                out.append(("die", f"die{package}.{die}", dcpus))
    for nid in topology.cpu_node_ids():
        ncpus = topology.node_cpus(nid) & available
        if ncpus:
            out.append(("node", f"node{nid}", ncpus))
    for group in topology.groups("l3"):
        gcpus = group & available
        if gcpus:
            out.append(("l3", f"l3cache{group.min()}", gcpus))
    return out


def _insert(parent: Pool, level: str, name: str, cpus: CPUSet) -> None:
    """Put the group under the lowest pool holding it: the same CPUs are the same pool,
    children inside it move under it, a child it crosses splits it."""
    while True:
        if cpus == parent.cpus:
            parent.levels = parent.levels | {level}
            return
        holder = next((c for c in parent.children if cpus <= c.cpus), None)
        if holder is None:
            break
        parent = holder
    crossed = [c for c in parent.children if not c.cpus.isdisjoint(cpus) and not c.cpus <= cpus]
    if crossed:
        rest = cpus
        for child in crossed:
            _insert(child, level, f"{name}@{child.name}", cpus & child.cpus)
            rest = rest - child.cpus
        if rest:
            _insert(parent, level, name, rest)
        return
    pool = Pool(name, level, cpus, levels=frozenset({level}), parent=parent)
    inside = [c for c in parent.children if c.cpus <= cpus]
    parent.children = [c for c in parent.children if not c.cpus <= cpus]
    parent.children.append(pool)
    parent.children.sort(key=lambda c: c.cpus.min())
    pool.children = inside
    for child in inside:
        child.parent = pool


def attach_memory_only(topology: Topology) -> dict[int, tuple[int, ...]]:
    """CPU node -> the memory-only nodes attached to it: each to its closest CPU node
    (by distance, then the lowest id)."""
    cpu_nodes = topology.cpu_node_ids()
    out: dict[int, list[int]] = {n: [] for n in cpu_nodes}
    if not cpu_nodes:
        return {}
    for mid in topology.memory_only_node_ids():
        node = topology.nodes[mid]
        if not node.online or node.memory_kb <= 0:
            continue
        closest = min(cpu_nodes, key=lambda c: (topology.distance(c, mid), c))
        out[closest].append(mid)
    return {n: tuple(m) for n, m in out.items()}


def _memory(pool: Pool, topology: Topology, dram_of: dict[int, frozenset[int]],
            attached: dict[int, tuple[int, ...]]) -> None:
    by_kind: dict[str, set[int]] = {}
    for nid in pool.cpu_nodes:
        by_kind.setdefault("dram", set()).update(dram_of.get(nid, frozenset({nid})))
        for mid in attached.get(nid, ()):
            by_kind.setdefault(kind_of(topology.nodes[mid].kind), set()).add(mid)
    pool.memory = {k: frozenset(v) for k, v in by_kind.items()}
    pool.capacity = {k: sum(topology.nodes[n].memory_kb * 1024 for n in v if n in topology.nodes)
                     for k, v in by_kind.items()}
    pool.by_kinds = {kinds: (sum(pool.capacity.get(k, 0) for k in kinds), tuple(k for k in kinds if pool.memory.get(k)))
                     for kinds in _KIND_SETS}
