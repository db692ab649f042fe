"""The hardware topology as plain immutable data plus the queries policies need.

Nothing here reads files: `discovery.discover` builds a Topology from sysfs,
tests and benchmarks may build one directly from CPU and node records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypeVar

from cri_resmgr.errors import CriResmgrError
from cri_resmgr.topology.cpuset import CPUSet

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

__all__ = [
    "CPUInfo", "CacheInfo", "NumaNode", "Topology", "TopologyError", "CoreKey", "CoreKind", "MemoryKind",
    "Level", "LEVELS", "UNKNOWN",
]

# The groupings an allocator can keep a request inside, widest first. Not a tree:
# a NUMA node may span packages and a package may hold several nodes.
Level = Literal["package", "die", "node", "l3", "cluster", "l2", "core"]
LEVELS: tuple[Level, ...] = ("package", "die", "node", "l3", "cluster", "l2", "core")

# What the kernel reported for a core. Not an identity: old kernels have no
# die_id and repeat core_id across the dies of an AMD package. A core is the
# set of its threads (thread_siblings_list), named by its lowest CPU id.
CoreKey = tuple[int, int, int]

# A package, die or core id the kernel did not give (no file, or -1 as on POWER).
UNKNOWN = -1

# Hybrid parts: Intel P/E cores (cpu_core/cpu_atom), ARM big.LITTLE (cpu_capacity).
CoreKind = Literal["performance", "efficiency"]
# DRAM (nodes with CPUs, or CPU-less DRAM), far memory (persistent memory, CXL), HBM.
MemoryKind = Literal["dram", "pmem-cxl", "hbm"]

# Group keys (package ids, (package, die) pairs, core keys) are sorted, so they must compare.
G = TypeVar("G", bound="SupportsRichComparison")
K = TypeVar("K")
V = TypeVar("V")

DEFAULT_LOCAL_DISTANCE = 10
DEFAULT_REMOTE_DISTANCE = 20


class TopologyError(CriResmgrError, ValueError):
    """The topology data is inconsistent or cannot be read."""


@dataclass(frozen=True)
class CPUInfo:
    """One online logical CPU (hardware thread)."""

    id: int
    package: int  # UNKNOWN (-1) when the kernel does not know it
    die: int  # UNKNOWN (-1) on kernels without die_id
    core: int  # core_id as the kernel reports it: not unique, see CoreKey
    node: int
    siblings: CPUSet  # online threads of the same physical core, this one included
    # Groups the kernel may or may not expose; None where it does not (never guessed).
    # Each is an id shared by the CPUs of one group: the lowest CPU id of the group.
    cluster: int | None = None  # topology/cluster_cpus_list (ARM, Intel E-core modules)
    l2: int | None = None  # cache/index* of level 2, its shared_cpu_list
    l3: int | None = None  # cache/index* of level 3 (one per AMD CCX)
    kind: CoreKind | None = None  # None: not a hybrid part, or the kernel does not say
    capacity: int | None = None  # cpu_capacity (ARM), 1024 for the biggest cores
    base_khz: int | None = None  # cpufreq base_frequency
    max_khz: int | None = None  # cpufreq cpuinfo_max_freq

    @property
    def core_key(self) -> CoreKey:
        return (self.package, self.die, self.core)


@dataclass(frozen=True)
class CacheInfo:
    """One L2 or L3 cache: the online CPUs sharing it (its id is their lowest id)."""

    level: int
    id: int
    cpus: CPUSet
    size_kb: int | None = None


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node; `cpus` is empty for memory-only nodes (e.g. PMEM, CXL)."""

    id: int
    cpus: CPUSet
    memory_kb: int
    # node id -> distance as in node*/distance; includes the node itself.
    distances: Mapping[int, int] = field(default_factory=dict)
    kind: MemoryKind | None = None  # None where neither HMAT nor the distances tell
    # False for a node the CPUs link to but whose directory is missing (offline).
    online: bool = True
    memory_side_cache_kb: int | None = None  # node*/memory_side_cache: memory behind a cache

    @property
    def memory_only(self) -> bool:
        return not self.cpus

    def distance(self, other: int) -> int:
        if other == self.id:
            return self.distances.get(other, DEFAULT_LOCAL_DISTANCE)
        return self.distances.get(other, DEFAULT_REMOTE_DISTANCE)


class Topology:
    """Online CPUs grouped by package, die, NUMA node and core.

    All group queries return CPUSets of *online* CPUs. Ids are whatever the
    hardware reports; nothing assumes they are contiguous or that thread
    siblings have adjacent ids.
    """

    def __init__(
        self,
        cpus: Iterable[CPUInfo],
        nodes: Iterable[NumaNode],
        offline: Iterable[int] = (),
        isolated: Iterable[int] = (),
        *,
        present: Iterable[int] | None = None,
        nohz_full: Iterable[int] = (),
        caches: Iterable[CacheInfo] = (),
        warnings: Iterable[str] = (),
    ) -> None:
        by_id: dict[int, CPUInfo] = {}
        for info in cpus:
            if info.id in by_id:
                raise TopologyError(f"CPU {info.id} listed twice")
            by_id[info.id] = info
        node_by_id: dict[int, NumaNode] = {}
        for node in nodes:
            if node.id in node_by_id:
                raise TopologyError(f"NUMA node {node.id} listed twice")
            node_by_id[node.id] = node
        if not by_id:
            raise TopologyError("topology has no online CPUs")

        self._cpus = MappingProxyType(dict(sorted(by_id.items())))
        self._nodes = MappingProxyType(dict(sorted(node_by_id.items())))
        self._online = CPUSet(by_id)
        self._offline = CPUSet(offline)
        if not self._online.isdisjoint(self._offline):
            raise TopologyError(
                f"CPUs {self._online & self._offline} are both online and offline"
            )
        self._isolated = CPUSet(isolated) & self._online
        self._nohz_full = CPUSet(nohz_full) & self._online
        self._present = (CPUSet(present) if present is not None else CPUSet()) | self._online | self._offline
        self._caches = tuple(sorted(caches, key=lambda c: (c.level, c.id)))
        self._warnings = tuple(warnings)

        self._check_nodes()
        self._packages = _group(by_id.values(), lambda c: c.package)
        self._dies = _group(by_id.values(), lambda c: (c.package, c.die))
        # The threads of a core are its sibling set, whatever the core ids say.
        self._cores = _group(by_id.values(), lambda c: c.siblings.min())
        self._node_cpus = {nid: n.cpus for nid, n in self._nodes.items()}
        # (node, bitmask of its CPUs), ascending: nodes_of is a few ANDs, not a walk of the CPUs.
        self._node_masks = tuple((nid, cpus.as_mask()) for nid, cpus in sorted(self._node_cpus.items()) if cpus)
        self._levels: dict[Level, tuple[CPUSet, ...]] = {}
        self._check_siblings()

    def _check_nodes(self) -> None:
        for info in self._cpus.values():
            node = self._nodes.get(info.node)
            if node is None:
                raise TopologyError(f"CPU {info.id} is in unknown NUMA node {info.node}")
            if info.id not in node.cpus:
                raise TopologyError(
                    f"CPU {info.id} claims NUMA node {info.node} whose cpulist is {node.cpus}"
                )
        for node in self._nodes.values():
            stray = node.cpus - self._online
            if stray:
                raise TopologyError(f"NUMA node {node.id} lists CPUs {stray} that are not online")

    def _check_siblings(self) -> None:
        # Sibling sets must partition the CPUs, and the threads of one core
        # must agree on where it is; core ids may repeat across cores.
        for info in self._cpus.values():
            if info.id not in info.siblings:
                raise TopologyError(f"CPU {info.id} is missing from its own siblings {info.siblings}")
            first = self._cpus.get(info.siblings.min())
            if first is None or first.siblings != info.siblings:
                raise TopologyError(
                    f"CPU {info.id}: siblings {info.siblings} differ from those of CPU {info.siblings.min()}"
                )
            if first.core_key != info.core_key:
                raise TopologyError(
                    f"CPU {info.id}: siblings {info.siblings} are one core, but it reports "
                    f"package={info.package} die={info.die} core_id={info.core} and CPU {first.id} "
                    f"package={first.package} die={first.die} core_id={first.core}"
                )

    # -- CPU sets --------------------------------------------------------------

    @property
    def online(self) -> CPUSet:
        return self._online

    @property
    def offline(self) -> CPUSet:
        return self._offline

    @property
    def isolated(self) -> CPUSet:
        """Online CPUs the kernel keeps out of scheduling (isolcpus)."""
        return self._isolated

    @property
    def present(self) -> CPUSet:
        """CPUs the machine has, online or not."""
        return self._present

    @property
    def nohz_full(self) -> CPUSet:
        """Online CPUs running without the scheduler tick (nohz_full=); not `isolated`."""
        return self._nohz_full

    @property
    def caches(self) -> tuple[CacheInfo, ...]:
        """The L2 and L3 caches the kernel described, by level then lowest CPU."""
        return self._caches

    @property
    def warnings(self) -> tuple[str, ...]:
        """What discovery found odd and left out of the model, one line each."""
        return self._warnings

    @property
    def cpus(self) -> Mapping[int, CPUInfo]:
        """Online CPU id -> CPUInfo, ascending ids."""
        return self._cpus

    def cpu(self, cpu: int) -> CPUInfo:
        try:
            return self._cpus[cpu]
        except KeyError:
            raise KeyError(f"CPU {cpu} is not an online CPU of this topology") from None

    def siblings(self, cpu: int) -> CPUSet:
        """Online hardware threads sharing cpu's core, cpu included."""
        return self.cpu(cpu).siblings

    def threads_per_core(self) -> int:
        """The largest number of online threads in any core."""
        return max(len(c) for c in self._cores.values())

    # -- packages / dies / cores -------------------------------------------------

    def package_ids(self) -> tuple[int, ...]:
        return tuple(self._packages)

    def package_cpus(self, package: int) -> CPUSet:
        return _lookup(self._packages, package, "package")

    def package_of(self, cpu: int) -> int:
        return self.cpu(cpu).package

    def die_ids(self, package: int) -> tuple[int, ...]:
        _lookup(self._packages, package, "package")
        return tuple(d for p, d in self._dies if p == package)

    def die_cpus(self, package: int, die: int) -> CPUSet:
        return _lookup(self._dies, (package, die), "die")

    def core_keys(self) -> tuple[CoreKey, ...]:
        """What the kernel reported for each core, ordered like cores(); may repeat."""
        return tuple(self._cpus[first].core_key for first in self._cores)

    def cores(self) -> tuple[CPUSet, ...]:
        """Each physical core's online threads, ordered by lowest CPU id."""
        return tuple(self._cores.values())

    def core_cpus(self, package: int, core: int, die: int | None = None) -> CPUSet:
        """Threads of core_id `core` in `package` (and `die` when dies repeat core ids)."""
        matches = [
            cpus for first, cpus in self._cores.items()
            if (info := self._cpus[first]).package == package and info.core == core
            and (die is None or info.die == die)
        ]
        if not matches:
            raise KeyError(f"no core {core} in package {package}" + (f" die {die}" if die is not None else ""))
        if len(matches) > 1:
            raise KeyError(f"core_id {core} repeats in package {package}; pass die=, or use cores()")
        return matches[0]

    # -- groups at every level ----------------------------------------------------

    def groups(self, level: Level) -> tuple[CPUSet, ...]:
        """The online CPUs split by `level`, each group ordered by its lowest CPU id.

        The groups of a level are disjoint and cover every online CPU; a level the
        kernel does not expose for every CPU (l2, l3, cluster) has no groups: ().
        """
        cached = self._levels.get(level)
        if cached is None:
            cached = self._levels[level] = self._make_groups(level)
        return cached

    def _make_groups(self, level: Level) -> tuple[CPUSet, ...]:
        found: Iterable[CPUSet]
        # An unknown package or die id says nothing about grouping: no groups.
        if level == "package":
            if UNKNOWN in self._packages:
                return ()
            found = self._packages.values()
        elif level == "die":
            if any(die == UNKNOWN for _, die in self._dies):
                return ()
            found = self._dies.values()
        elif level == "node":
            found = [cpus for cpus in self._node_cpus.values() if cpus]
        elif level == "core":
            found = self._cores.values()
        else:
            ids = [getattr(info, level) for info in self._cpus.values()]
            if any(i is None for i in ids):
                return ()
            found = _group(self._cpus.values(), lambda c: getattr(c, level)).values()
        return tuple(sorted(found, key=lambda cpus: cpus.min()))

    # -- NUMA ----------------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[int, NumaNode]:
        """Node id -> NumaNode, including memory-only nodes, ascending ids."""
        return self._nodes

    def node_ids(self) -> tuple[int, ...]:
        return tuple(self._nodes)

    def cpu_node_ids(self) -> tuple[int, ...]:
        """Nodes that have online CPUs."""
        return tuple(nid for nid, n in self._nodes.items() if n.cpus)

    def memory_only_node_ids(self) -> tuple[int, ...]:
        return tuple(nid for nid, n in self._nodes.items() if not n.cpus)

    def node_cpus(self, node: int) -> CPUSet:
        return _lookup(self._node_cpus, node, "NUMA node")

    def node_of(self, cpu: int) -> int:
        return self.cpu(cpu).node

    def nodes_of(self, cpus: Iterable[int]) -> tuple[int, ...]:
        """Distinct nodes of the given CPUs, ascending (KeyError for one not online)."""
        if not isinstance(cpus, CPUSet):
            return tuple(sorted({self.cpu(c).node for c in cpus}))
        mask = cpus.as_mask()
        stray = mask ^ (mask & self._online.as_mask())
        if stray:
            self.cpu(CPUSet.of_mask(stray).min())  # raises, naming it
        return tuple(nid for nid, cpu_mask in self._node_masks if cpu_mask & mask)

    def package_node_ids(self, package: int) -> tuple[int, ...]:
        """CPU nodes with at least one CPU in `package`."""
        cpus = self.package_cpus(package)
        return tuple(nid for nid, n in self._nodes.items() if not n.cpus.isdisjoint(cpus))

    def node_package_ids(self, node: int) -> tuple[int, ...]:
        """Packages with at least one CPU in `node` (several when a node spans packages)."""
        cpus = self.node_cpus(node)
        return tuple(pkg for pkg, pcpus in self._packages.items() if not pcpus.isdisjoint(cpus))

    def distance(self, a: int, b: int) -> int:
        return _lookup(self._nodes, a, "NUMA node").distance(b)

    def nodes_by_distance(self, node: int) -> tuple[int, ...]:
        """All nodes ordered by distance from `node` (itself first), ties by id."""
        origin = _lookup(self._nodes, node, "NUMA node")
        return tuple(sorted(self._nodes, key=lambda other: (origin.distance(other), other != node, other)))

    def closest_memory_only_nodes(self, node: int) -> tuple[int, ...]:
        """Memory-only nodes nearest to `node` (all at the minimal distance)."""
        origin = _lookup(self._nodes, node, "NUMA node")
        candidates = self.memory_only_node_ids()
        if not candidates:
            return ()
        best = min(origin.distance(m) for m in candidates)
        return tuple(m for m in candidates if origin.distance(m) == best)

    def __repr__(self) -> str:
        return (
            f"Topology(online={self._online}, packages={len(self._packages)}, "
            f"dies={len(self._dies)}, cores={len(self._cores)}, nodes={len(self._nodes)})"
        )


def _group(cpus: Iterable[CPUInfo], key: Callable[[CPUInfo], G]) -> dict[G, CPUSet]:
    groups: dict[G, set[int]] = {}
    for info in cpus:
        groups.setdefault(key(info), set()).add(info.id)
    return {k: CPUSet(groups[k]) for k in sorted(groups)}


def _lookup(mapping: Mapping[K, V], key: K, what: str) -> V:
    try:
        return mapping[key]
    except KeyError:
        raise KeyError(f"unknown {what} {key!r}") from None
