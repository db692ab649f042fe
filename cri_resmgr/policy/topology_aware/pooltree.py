"""The pool tree: root, packages, dies, NUMA nodes and L3 cache groups of the CPUs the
policy may use, a level with a single child of the same CPUs collapsed into its parent.

Each pool holds the available CPUs below it, the CPUs its shared containers may run on
when no exclusive CPU is taken (`sharable`: all but the isolated ones), its isolated and
its reserved CPUs, and its memory by kind:
the DRAM of its CPU nodes plus the memory-only nodes (PMEM, CXL, HBM) attached to them,
each memory-only node to the CPU node closest to it by distance.

The tree is plain data built once per policy (no allocation state: that is the
policy's book).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

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
    ancestors: tuple[Pool, ...] = ()  # parent first, root last

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

    def nodes(self, kinds: tuple[str, ...]) -> frozenset[int]:
        return frozenset().union(*(self.memory.get(k, frozenset()) for k in kinds))

    def memory_bytes(self, kinds: tuple[str, ...]) -> int:
        return sum(self.capacity.get(k, 0) for k in kinds)


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


def build_tree(topology: Topology, available: CPUSet, reserved: CPUSet) -> PoolTree:
    root = Pool(ROOT, "root", available)
    for package in topology.package_ids():
        pcpus = topology.package_cpus(package) & available
        if not pcpus:
            continue
        ppool = _child(root, Pool(f"package{package}", "package", pcpus))
        for die in topology.die_ids(package):
            dcpus = topology.die_cpus(package, die) & pcpus
            if not dcpus:
                continue
            dpool = _child(ppool, Pool(f"die{package}.{die}", "die", dcpus))
            for nid in topology.cpu_node_ids():
                ncpus = topology.node_cpus(nid) & dcpus
                if not ncpus:
                    continue
                npool = _child(dpool, Pool(f"node{nid}", "node", ncpus))
                for group in topology.groups("l3"):
                    gcpus = group & ncpus
                    if gcpus:
                        _child(npool, Pool(f"l3cache{group.min()}", "l3", gcpus))
    _collapse(root)
    pools = tuple(root.walk())
    _name_uniquely(pools)
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
        pool.depth = len(ancestors)
        pool.isolated = (pool.cpus & topology.isolated) - reserved
        pool.reserved = pool.cpus & reserved
        pool.sharable = pool.cpus - pool.isolated
        pool.cpu_nodes = frozenset(topology.node_of(c) for c in pool.cpus)
        _memory(pool, topology, dram_of, attached)
    return PoolTree(root, pools, {p.name: p for p in pools}, tuple(p for p in pools if p.is_leaf()))


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


def _child(parent: Pool, child: Pool) -> Pool:
    child.parent = parent
    parent.children.append(child)
    return child


def _collapse(pool: Pool) -> None:
    """A pool whose only child has the same CPUs takes over that child's children."""
    while len(pool.children) == 1 and pool.children[0].cpus == pool.cpus:
        only = pool.children[0]
        pool.children = only.children
        for grandchild in pool.children:
            grandchild.parent = pool
    for child in pool.children:
        _collapse(child)


def _name_uniquely(pools: tuple[Pool, ...]) -> None:
    # A NUMA node spanning packages appears once under each: name them apart.
    seen: dict[str, int] = {}
    for pool in pools:
        seen[pool.name] = seen.get(pool.name, 0) + 1
    for pool in pools:
        if seen[pool.name] > 1 and pool.parent is not None:
            pool.name = f"{pool.name}@{pool.parent.name}"


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
