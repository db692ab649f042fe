"""Sysfs trees of the machine classes discovery got wrong (issue 10), one builder each.

`generate()` in sysfs.py writes regular machines from a few numbers; the
classes here need what it cannot say: CPUs without die_id, core ids that
repeat across dies, nodes holding several packages, package id -1, files
ending in NUL, node directories without cpulist, odd distance rows, offline
nodes, caches, clusters, hybrid cores, memory tiers, sparse ids. So each
builder returns a `Machine` (plain records of what the kernel would show)
and `write_machine` writes it the way Linux lays sysfs out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cri_resmgr.topology.cpuset import CPUSet, format_cpulist
from tests.harness.sysfs import DEFAULT_MEM_PER_NODE_KB, _cpumask, _meminfo

__all__ = ["Cpu", "Node", "Machine", "write_machine", "CLASSES"]


@dataclass
class Cpu:
    id: int
    core: int  # physical core, unique in the machine: the siblings are the CPUs sharing it
    package: int | None = 0  # None: no physical_package_id file
    die: int | None = 0  # None: no die_id file (kernels before 5.x)
    core_id: int = 0  # what core_id says
    node: int = 0
    online: bool = True
    l2: int | None = None  # CPUs with equal keys share the cache; None: no such cache
    l3: int | None = None
    cluster: int | None = None  # None: no cluster_cpus_list
    capacity: int | None = None  # cpu_capacity (ARM)


@dataclass
class Node:
    id: int
    memory_kb: int = DEFAULT_MEM_PER_NODE_KB
    distance: str | None = None  # the row as written; None: from Machine.distance()
    hmat: tuple[int, int] | None = None  # access0 read bandwidth MB/s, read latency ns
    hmat1: tuple[int, int] | None = None  # the same in access1 (CPU initiators only)
    side_cache_kb: int | None = None  # memory_side_cache/index1/size
    directory: bool = True  # False: an offline node, its CPUs still link to it


@dataclass
class Machine:
    cpus: list[Cpu]
    nodes: list[Node]
    distances: dict[tuple[int, int], int] = field(default_factory=dict)  # (a, b) -> d; default 10/20
    isolated: str = ""
    nohz_full: str | None = None  # None: no file
    offline_file: bool = True
    cpulist: bool = True  # node*/cpulist; False leaves only cpumap
    cache_lists: bool = True  # cache/index*/shared_cpu_list; False leaves only shared_cpu_map
    node_links: bool = True  # cpuN/nodeM symlinks (copies of /sys often lose them)
    nul: bool = False  # end every file with "\n\0" as some kernels do
    p_cores: str | None = None  # /sys/devices/cpu_core/cpus
    e_cores: str | None = None  # /sys/devices/cpu_atom/cpus
    freq: dict[int, tuple[int, int]] = field(default_factory=dict)  # core -> (base, max) kHz

    def distance(self, a: int, b: int) -> int:
        if a == b:
            return 10
        return self.distances.get((a, b), self.distances.get((b, a), 20))

    def online(self) -> CPUSet:
        return CPUSet(c.id for c in self.cpus if c.online)


def write_machine(root: Path | str, m: Machine) -> Machine:
    """Write `m` under the host root `root`; returns `m` for the test's expectations."""
    sysdir = Path(root) / "sys" / "devices" / "system"
    cdir, ndir = sysdir / "cpu", sysdir / "node"
    cdir.mkdir(parents=True, exist_ok=True)
    ndir.mkdir(parents=True, exist_ok=True)
    put = _writer(m.nul)
    online = m.online()
    present = CPUSet(c.id for c in m.cpus)
    put(cdir / "present", str(present))
    put(cdir / "possible", str(present))
    put(cdir / "online", str(online))
    if m.offline_file:
        put(cdir / "offline", str(present - online))
    put(cdir / "isolated", m.isolated)
    if m.nohz_full is not None:
        put(cdir / "nohz_full", m.nohz_full)
    _write_cpus(cdir, m, online, put)
    _write_nodes(ndir, m, online, put)
    if m.p_cores is not None and m.e_cores is not None:
        for name, cpus in (("cpu_core", m.p_cores), ("cpu_atom", m.e_cores)):
            (Path(root) / "sys" / "devices" / name).mkdir(parents=True, exist_ok=True)
            put(Path(root) / "sys" / "devices" / name / "cpus", cpus)
    return m


Put = Callable[[Path, str], None]


def _writer(nul: bool) -> Put:
    tail = "\n\0" if nul else "\n"

    def put(path: Path, text: str) -> None:
        path.write_text(text + tail)
    return put


def _groups(m: Machine, online: CPUSet, attr: str) -> dict[object, CPUSet]:
    found: dict[object, list[int]] = {}
    for c in m.cpus:
        if c.online and getattr(c, attr) is not None:
            found.setdefault(getattr(c, attr), []).append(c.id)
    return {k: CPUSet(v) for k, v in found.items()}


def _write_cpus(cdir: Path, m: Machine, online: CPUSet, put: Put) -> None:
    cores = _groups(m, online, "core")
    l2, l3 = _groups(m, online, "l2"), _groups(m, online, "l3")
    clusters = _groups(m, online, "cluster")
    nbits = max(c.id for c in m.cpus) + 1
    for c in m.cpus:
        d = cdir / f"cpu{c.id}"
        d.mkdir(exist_ok=True)
        if c.id != 0:  # cpu0 cannot be unplugged: no online file
            put(d / "online", "1" if c.online else "0")
        if not c.online:
            continue
        if m.node_links:
            os.symlink(f"../../node/node{c.node}", d / f"node{c.node}")
        t = d / "topology"
        t.mkdir()
        if c.package is not None:
            put(t / "physical_package_id", str(c.package))
        if c.die is not None:
            put(t / "die_id", str(c.die))
        put(t / "core_id", str(c.core_id))
        put(t / "thread_siblings_list", str(cores[c.core]))
        if c.cluster is not None:
            put(t / "cluster_cpus_list", str(clusters[c.cluster]))
        if c.capacity is not None:
            put(d / "cpu_capacity", str(c.capacity))
        for index, (level, key, groups, size) in enumerate(
            ((2, c.l2, l2, "1024K"), (3, c.l3, l3, "32768K"))
        ):
            if key is None:
                continue
            i = d / "cache" / f"index{index + 2}"
            i.mkdir(parents=True)
            put(i / "level", str(level))
            put(i / "type", "Unified")
            if m.cache_lists:
                put(i / "shared_cpu_list", str(groups[key]))
            put(i / "shared_cpu_map", _cpumask(groups[key], nbits))
            put(i / "size", size)
    if m.freq:
        for core, (base, top) in m.freq.items():
            p = cdir / "cpufreq" / f"policy{cores[core].min()}"
            p.mkdir(parents=True)
            put(p / "related_cpus", " ".join(map(str, cores[core])))
            put(p / "base_frequency", str(base))
            put(p / "cpuinfo_max_freq", str(top))


def _write_nodes(ndir: Path, m: Machine, online: CPUSet, put: Put) -> None:
    with_dir = [n for n in m.nodes if n.directory]
    ids = [n.id for n in with_dir]
    put(ndir / "online", format_cpulist(ids))
    put(ndir / "possible", format_cpulist(n.id for n in m.nodes))
    nbits = max(c.id for c in m.cpus) + 1
    for n in with_dir:
        d = ndir / f"node{n.id}"
        d.mkdir()
        cpus = [c.id for c in m.cpus if c.online and c.node == n.id]
        if m.cpulist:
            put(d / "cpulist", format_cpulist(cpus))
        put(d / "cpumap", _cpumask(cpus, nbits))
        row = n.distance if n.distance is not None else " ".join(str(m.distance(n.id, o)) for o in ids)
        put(d / "distance", row)
        put(d / "meminfo", _meminfo(n.id, n.memory_kb))
        for access, figures in (("access0", n.hmat), ("access1", n.hmat1)):
            if figures is not None:
                a = d / access / "initiators"
                a.mkdir(parents=True)
                put(a / "read_bandwidth", str(figures[0]))
                put(a / "read_latency", str(figures[1]))
        if n.side_cache_kb is not None:
            s = d / "memory_side_cache" / "index1"
            s.mkdir(parents=True)
            put(s / "size", str(n.side_cache_kb * 1024))


# -- the classes ---------------------------------------------------------------------


def old_kernel_amd() -> Machine:
    """Naples on a 4.x kernel: 2 packages x 4 dies x 8 cores x 2 threads, one node per die,
    no die_id, core_id restarting in every die, an L3 per CCX of 4 cores, sibling of N is N+64."""
    cpus = []
    for core in range(64):
        pkg = core // 32  # dies of 8 cores, but the kernel does not say: no die_id
        for thread in range(2):
            cpus.append(Cpu(core + 64 * thread, core, package=pkg, die=None, core_id=core % 8,
                            node=core // 8, l2=core, l3=core // 4))
    far = {(a, b): 16 if a // 4 == b // 4 else 32 for a in range(8) for b in range(8) if a != b}
    return Machine(cpus, [Node(i) for i in range(8)], distances=far)


def nul_terminated() -> Machine:
    """A 2-socket machine whose every sysfs file ends in "\\n\\0"."""
    m = _simple(sockets=2, cores=4, threads=2)
    m.nul = True
    m.nohz_full = "(null)"
    return m


def cpumap_only() -> Machine:
    """2 sockets x 2 nodes, 80 CPUs interleaved across nodes, no cpulist and no node links."""
    cpus = []
    for core in range(40):
        node = core % 4
        for thread in range(2):
            cpus.append(Cpu(core + 40 * thread, core, package=node % 2, core_id=core // 2, node=node))
    same = {(0, 2): 11, (1, 3): 11}
    m = Machine(cpus, [Node(i) for i in range(4)], distances={**same, (0, 1): 21, (0, 3): 21,
                                                              (1, 2): 21, (2, 3): 21})
    m.cpulist = m.node_links = False
    return m


def multi_package_nodes() -> Machine:
    """4 packages of 4 cores x 2 threads in 2 NUMA nodes: each node holds two packages."""
    cpus = [Cpu(c, c // 2, package=c // 8, core_id=c // 2 % 4, node=c // 16, l3=c // 8) for c in range(32)]
    return Machine(cpus, [Node(0), Node(1)])


def power_unknown_package() -> Machine:
    """POWER LPAR: SMT8, physical_package_id -1, sparse node ids 0 and 8."""
    cpus = [Cpu(c, c // 8, package=-1, die=None, core_id=c // 8, node=0 if c < 32 else 8) for c in range(64)]
    return Machine(cpus, [Node(0), Node(8)], distances={(0, 8): 40})


def missing_offline_file() -> Machine:
    """CPUs 5 and 9-10 offline, and no cpu/offline file."""
    m = _simple(sockets=2, cores=4, threads=2)
    for c in m.cpus:
        c.online = c.id not in (5, 9, 10)
    m.offline_file = False
    return m


def odd_distances() -> Machine:
    """4 nodes; node1's distance row has 4 columns for 3 online nodes, node2's holds garbage, and node3 is
    offline (no directory) while its CPUs still link to it."""
    m = _simple(sockets=4, cores=2, threads=2, nodes_per_socket=1)
    m.nodes[1].distance = "21 10 21 21"  # a column for the offline node too
    m.nodes[2].distance = "21 21 ten"
    m.nodes[3].directory = False
    return m


def l3_per_ccx() -> Machine:
    """Rome NPS1: 1 package, 1 node, 32 cores x 2 threads, an L3 per CCX of 4 cores."""
    cpus = [Cpu(c, c % 32, core_id=c % 32, l2=c % 32, l3=c % 32 // 4) for c in range(64)]
    return Machine(cpus, [Node(0)])


def cache_map_only() -> Machine:
    """Rome-like, 2 nodes of 16 cores x 2 threads, an L3 per 4 cores, on a kernel whose
    cache directories have shared_cpu_map but no shared_cpu_list."""
    cpus = [Cpu(c, c % 32, core_id=c % 32, node=c % 32 // 16, l2=c % 32, l3=c % 32 // 4) for c in range(64)]
    return Machine(cpus, [Node(0), Node(1)], cache_lists=False)


def hbm_access1() -> Machine:
    """Xeon Max-like: 1 socket, 2 CPU nodes and 2 HBM nodes at distance 14 (where the
    distance convention says far memory); HMAT's access0 has latency 0 (bandwidth only
    for node 3) and the figures are in access1."""
    cpus = [Cpu(c, c % 8, core_id=c % 8, node=c % 8 // 4, l2=c % 8, l3=0) for c in range(16)]
    m = Machine(cpus, [Node(0), Node(1), Node(2, 1000, hmat=(0, 0), hmat1=(400000, 130)),
                       Node(3, 1000, hmat=(380000, 0), hmat1=(380000, 130))])
    m.nodes[0].hmat = m.nodes[1].hmat = (0, 0)
    m.nodes[0].hmat1 = m.nodes[1].hmat1 = (100000, 110)
    m.distances.update({(0, 1): 12, (0, 2): 14, (1, 3): 14, (0, 3): 16, (1, 2): 16, (2, 3): 16})
    return m


def arm_clusters() -> Machine:
    """Kunpeng-like: 1 package, 2 nodes, 48 single-thread cores, clusters of 4 with their own L2... no L3."""
    cpus = [Cpu(c, c, core_id=c, node=c // 24, l2=c, cluster=c // 4, capacity=1024) for c in range(48)]
    return Machine(cpus, [Node(0), Node(1)])


def hybrid() -> Machine:
    """Alder Lake: 8 P-cores x 2 threads (0-15), 8 E-cores (16-23) in 2 clusters sharing an L2."""
    cpus = [Cpu(c, c // 2, core_id=c // 2 * 4, l2=c // 2, l3=0, cluster=c // 2) for c in range(16)]
    cpus += [Cpu(c, 8 + c - 16, core_id=32 + c - 16, l2=100 + (c - 16) // 4, l3=0, cluster=100 + (c - 16) // 4)
             for c in range(16, 24)]
    freq = {core: (3200000, 5000000) if core < 8 else (2400000, 3800000) for core in range(16)}
    return Machine(cpus, [Node(0)], p_cores="0-15", e_cores="16-23", freq=freq)


def big_little() -> Machine:
    """ARM big.LITTLE: 4 little cores (capacity 446), 4 big ones (1024); no cpu_core/cpu_atom."""
    cpus = [Cpu(c, c, core_id=c % 4, cluster=c // 4, capacity=446 if c < 4 else 1024) for c in range(8)]
    return Machine(cpus, [Node(0)])


def memory_tiers() -> Machine:
    """2 sockets with DRAM nodes 0-1 and CPU-less nodes: 2 PMEM (distance 17 only),
    3 CXL (HMAT: slower), 4 HBM (HMAT: faster), 5 behind a memory-side cache."""
    m = _simple(sockets=2, cores=2, threads=2)
    m.nodes += [Node(2, 4 * DEFAULT_MEM_PER_NODE_KB), Node(3, 1000, hmat=(30000, 300)),
                Node(4, 2000, hmat=(400000, 110)), Node(5, 3000, side_cache_kb=4096)]
    m.nodes[0].hmat = m.nodes[1].hmat = (100000, 100)
    m.distances.update({(0, 2): 17, (1, 2): 28, (0, 3): 24, (1, 3): 30, (0, 4): 12, (1, 4): 22,
                        (0, 5): 16, (1, 5): 26, (2, 3): 40, (2, 4): 40, (2, 5): 40, (3, 4): 40,
                        (3, 5): 40, (4, 5): 40})
    return m


def sparse_4096() -> Machine:
    """4096 CPUs with sparse ids (package p uses ids 1024p..1024p+511, twice over 8 packages)
    and sparse node ids (0, 2, ..., 14): 8 packages x 256 cores x 2 threads, L3 per 8 cores."""
    cpus = []
    for pkg in range(8):
        for core_in_pkg in range(256):
            core = pkg * 256 + core_in_pkg
            for thread in range(2):
                cid = 1024 * pkg + core_in_pkg + 256 * thread
                cpus.append(Cpu(cid, core, package=pkg, core_id=core_in_pkg, node=2 * pkg, l2=core, l3=core // 8))
    return Machine(cpus, [Node(2 * p) for p in range(8)])


def _simple(sockets: int, cores: int, threads: int, nodes_per_socket: int = 1) -> Machine:
    cpus = []
    for s in range(sockets):
        for k in range(cores):
            core = s * cores + k
            for t in range(threads):
                cpus.append(Cpu(core * threads + t, core, package=s, core_id=k, node=s * nodes_per_socket,
                                l2=core, l3=s))
    return Machine(cpus, [Node(i) for i in range(sockets * nodes_per_socket)], distances={
        (a, b): 21 for a in range(sockets) for b in range(sockets) if a != b})


CLASSES = {
    f.__name__: f for f in (
        old_kernel_amd, nul_terminated, cpumap_only, multi_package_nodes, power_unknown_package,
        missing_offline_file, odd_distances, l3_per_ccx, cache_map_only, arm_clusters, hybrid, big_little, memory_tiers,
        hbm_access1, sparse_4096,
    )
}
