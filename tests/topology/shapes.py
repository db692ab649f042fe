"""Test-side machine shapes: Topology objects built straight from the model's
constructors, one per class of machine issue 10 lists, for the allocator tests.

Not a sysfs generator (that is tests/harness/sysfs.py): these skip the files
and say exactly which CPU sits where, so a test can name the shape it needs
(several packages per node, a node spanning packages, L3 per CCX, clusters,
hybrid P/E cores, memory-only nodes, sparse ids, no SMT, 512 CPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cri_resmgr.topology import CPUInfo, NumaNode, Topology
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Core", "machine", "SHAPES"]

LOCAL, REMOTE, MEM_NEAR, MEM_FAR = 10, 21, 17, 28


@dataclass(frozen=True)
class Core:
    """One physical core before CPU ids are given out."""

    package: int
    die: int
    index: int  # position within its package, 0-based
    threads: int
    node: int
    l3: int | None  # group number; turned into the group's lowest CPU id
    cluster: int | None
    l2: int | None


def machine(
    packages: int = 1,
    dies: int = 1,
    cores: int = 4,  # per die
    threads: int = 2,
    nodes_per_package: int = 1,
    node_of_package: Callable[[int], int] | None = None,  # several packages per node
    l3_cores: int | None = None,  # cores per L3 group (AMD CCX); None: no L3 data
    cluster_cores: int | None = None,  # cores per cluster; None: no cluster data
    e_cores: int = 0,  # hybrid: single-thread E-cores per die, clusters of 4, after the P-cores
    memory_only: int = 0,
    interleaved: bool = False,  # Xeon-like: the sibling of cpu N is N + number of cores
    stride: int = 1,  # sparse ids: CPU ids are multiplied by this
    package_ids: Iterable[int] | None = None,  # e.g. -1 for POWER's "unknown"
    offline: Iterable[int] = (),
) -> Topology:
    """A Topology of the given shape; `offline` ids (after stride) are left out."""
    pkg_ids = list(package_ids) if package_ids is not None else list(range(packages))
    layout: list[Core] = []
    l3_seq = cluster_seq = l2_seq = 0
    for p in range(packages):
        per_pkg = dies * (cores + e_cores)
        for d in range(dies):
            for c in range(cores + e_cores):
                index = d * (cores + e_cores) + c
                if node_of_package is not None:
                    node = node_of_package(p)
                else:
                    node = p * nodes_per_package + index * nodes_per_package // per_pkg
                is_e = c >= cores
                l3 = None if l3_cores is None else l3_seq + c // l3_cores
                if is_e:
                    cluster: int | None = cluster_seq + cores + (c - cores) // 4
                    l2: int | None = l2_seq + cores + (c - cores) // 4
                elif e_cores:
                    cluster, l2 = cluster_seq + c, l2_seq + c
                else:
                    cluster = None if cluster_cores is None else cluster_seq + c // cluster_cores
                    l2 = cluster if cluster_cores is not None else None
                layout.append(Core(pkg_ids[p], d, index, 1 if is_e else threads, node, l3, cluster, l2))
            l3_seq += cores + e_cores
            cluster_seq += cores + e_cores
            l2_seq += cores + e_cores
    ids = _ids(layout, interleaved, stride)
    return _topology(layout, ids, memory_only, set(offline))


def _ids(layout: list[Core], interleaved: bool, stride: int) -> list[list[int]]:
    out: list[list[int]] = []
    if interleaved:
        ncores = len(layout)
        for i, core in enumerate(layout):
            out.append([(i + t * ncores) * stride for t in range(core.threads)])
        return out
    next_id = 0
    for core in layout:
        out.append([(next_id + t) * stride for t in range(core.threads)])
        next_id += core.threads
    return out


def _topology(layout: list[Core], ids: list[list[int]], memory_only: int, offline: set[int]) -> Topology:
    # Group numbers -> lowest online CPU id of the group, as CPUInfo wants.
    def first_ids(attr: str) -> dict[int, int]:
        low: dict[int, int] = {}
        for core, cpus in zip(layout, ids, strict=True):
            key = getattr(core, attr)
            online = [c for c in cpus if c not in offline]
            if key is not None and online:
                low[key] = min(low.get(key, online[0]), min(online))
        return low

    l3, cluster, l2 = first_ids("l3"), first_ids("cluster"), first_ids("l2")
    infos: list[CPUInfo] = []
    node_cpus: dict[int, set[int]] = {}
    for core, cpus in zip(layout, ids, strict=True):
        online = [c for c in cpus if c not in offline]
        siblings = CPUSet(online)
        for cpu in online:
            infos.append(CPUInfo(
                id=cpu, package=core.package, die=core.die, core=core.index, node=core.node,
                siblings=siblings,
                l3=None if core.l3 is None else l3[core.l3],
                cluster=None if core.cluster is None else cluster[core.cluster],
                l2=None if core.l2 is None else l2[core.l2],
            ))
            node_cpus.setdefault(core.node, set()).add(cpu)
    cpu_nodes = sorted({core.node for core in layout})
    mem_nodes = [max(cpu_nodes) + 1 + i for i in range(memory_only)]
    nodes = []
    for nid in cpu_nodes + mem_nodes:
        dist = {}
        for other in cpu_nodes + mem_nodes:
            if other == nid:
                dist[other] = LOCAL
            elif nid in mem_nodes or other in mem_nodes:
                dist[other] = MEM_NEAR if (nid + other) % 2 else MEM_FAR
            else:
                dist[other] = REMOTE
        nodes.append(NumaNode(nid, CPUSet(node_cpus.get(nid, ())), 1 << 24, dist))
    return Topology(infos, nodes, offline=offline)


# Every class of machine issue 10 names, small enough for brute-force checks
# where the name says "small"; the 512-CPU one is for churn only.
SHAPES: dict[str, Callable[[], Topology]] = {
    "smt2-1pkg": lambda: machine(cores=6),
    "no-smt-2pkg": lambda: machine(packages=2, cores=5, threads=1),
    "smt4-power": lambda: machine(cores=4, threads=4),
    "sparse-ids": lambda: machine(packages=2, cores=3, stride=3, offline=[9]),
    "interleaved-snc": lambda: machine(packages=2, cores=4, nodes_per_package=2, interleaved=True),
    "pkgs-per-node": lambda: machine(packages=4, cores=2, node_of_package=lambda p: p % 2,
                                     package_ids=[-1, 1, 2, 3]),
    "node-spans-packages": lambda: machine(packages=2, cores=4, node_of_package=lambda p: 0),
    "l3-per-ccx": lambda: machine(packages=1, dies=2, cores=4, l3_cores=2, nodes_per_package=2),
    "clusters-arm": lambda: machine(packages=1, cores=8, threads=1, cluster_cores=4),
    "hybrid": lambda: machine(cores=2, e_cores=4),
    "memory-only": lambda: machine(packages=2, cores=3, memory_only=2),
    "big-512": lambda: machine(packages=2, cores=128, nodes_per_package=4, interleaved=True),
    "amd-512-ccx": lambda: machine(packages=2, dies=4, cores=32, l3_cores=8, nodes_per_package=4),
}
