"""Write fake but realistic sysfs CPU/NUMA trees for tests and benchmarks.

`generate(root, ...)` treats `root` as a host root and writes
`root/sys/devices/system/{cpu,node}` the way Linux does, so that
`cri_resmgr.topology.discover(root)` reads it like a real machine.
`fake_topology(...)` builds the same Topology in memory, without files.

The tree follows the kernel:

* offline CPUs keep `cpuN/online` = 0 but lose their `topology/` directory and
  vanish from every sibling list and node cpulist, as on x86;
* cpu0 has no `online` file (it cannot be unplugged);
* per CPU only the files topology discovery could want are written
  (`online`, `nodeN` link, `topology/{physical_package_id,die_id,core_id,
  thread_siblings_list,core_siblings_list}`): file creation is
  what makes big trees slow to generate;
* an L3 cache (`cache/index3/{level,type,shared_cpu_list,size}`) only when
  asked (`l3="package"`, `"die"` or `"node"`: the CPUs that share one);
* node distances follow the usual firmware tables: 10 local, 11 same socket,
  21 other socket; memory-only node i (ids after the CPU nodes) hangs off
  socket i % sockets: 17 from that socket's CPU nodes, 28 elsewhere.

Numbering schemes (how CPU ids map onto sockets, cores and threads):

* "linear": ids grow socket by socket, core by core, and thread siblings are
  adjacent (cpu0/cpu1 are one core).  Typical of desktops and AMD parts.
* "interleaved": like real Xeons: first threads of all cores get ids
  0..ncores-1, the sibling of cpu N is N + ncores.  Consecutive ids
  round-robin over the CPU NUMA nodes, and node k belongs to socket
  k % sockets (so with 2 sockets x 2 nodes, even ids are socket 0 and
  id % 4 is the node, as on real sub-NUMA-clustered servers).  core_id
  values are non-contiguous (0-4, 8-12, 16-20, ...) as Xeons report them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cri_resmgr.topology import CPUInfo, NumaNode, Topology
from cri_resmgr.topology.cpuset import CPUSet, format_cpulist

__all__ = ["generate", "fake_topology", "Layout", "layout"]

Numbering = Literal["linear", "interleaved"]
L3Span = Literal["package", "die", "node"]
L3_SIZE = "32768K"

LOCAL, SAME_SOCKET, OTHER_SOCKET = 10, 11, 21
MEM_ONLY_NEAR, MEM_ONLY_FAR = 17, 28
DEFAULT_MEM_PER_NODE_KB = 16 * 1024 * 1024


@dataclass(frozen=True)
class CPUPlace:
    """Where one CPU id sits in the generated machine."""

    cpu: int
    socket: int
    die: int
    core_index: int  # 0-based index of the core within its socket
    core_id: int  # value written to core_id
    thread: int
    node: int


@dataclass(frozen=True)
class Layout:
    """The generated machine, so tests can state expectations without sysfs."""

    places: tuple[CPUPlace, ...]  # every CPU, online or not, ascending id
    cpu_nodes: tuple[int, ...]  # node ids that have CPUs
    memory_only_nodes: tuple[int, ...]
    node_socket: dict[int, int]  # node id -> socket it is attached to

    def cpus_where(self, **attrs: int) -> CPUSet:
        return CPUSet(p.cpu for p in self.places if all(getattr(p, k) == v for k, v in attrs.items()))


def layout(
    sockets: int,
    cores_per_die: int,
    threads_per_core: int,
    dies_per_socket: int = 1,
    numa_per_socket: int = 1,
    numbering: Numbering = "linear",
    memory_only_nodes: int = 0,
) -> Layout:
    """Compute the CPU id placement of a machine shape without writing files."""
    for name, value in (
        ("sockets", sockets), ("dies_per_socket", dies_per_socket),
        ("cores_per_die", cores_per_die), ("threads_per_core", threads_per_core),
        ("numa_per_socket", numa_per_socket),
    ):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if type(memory_only_nodes) is not int or memory_only_nodes < 0:
        raise ValueError(f"memory_only_nodes must be a non-negative int, got {memory_only_nodes!r}")
    cores_per_socket = dies_per_socket * cores_per_die
    if cores_per_socket % numa_per_socket:
        raise ValueError(
            f"{cores_per_socket} cores per socket cannot be split evenly into "
            f"{numa_per_socket} NUMA nodes"
        )
    if numbering == "linear":
        places = _linear(sockets, dies_per_socket, cores_per_die, threads_per_core, numa_per_socket)
    elif numbering == "interleaved":
        places = _interleaved(sockets, dies_per_socket, cores_per_die, threads_per_core, numa_per_socket)
    else:
        raise ValueError(f"numbering must be 'linear' or 'interleaved', got {numbering!r}")

    ncpu_nodes = sockets * numa_per_socket
    node_socket = {p.node: p.socket for p in places}
    mem_only = tuple(range(ncpu_nodes, ncpu_nodes + memory_only_nodes))
    for i, nid in enumerate(mem_only):
        node_socket[nid] = i % sockets
    return Layout(
        places=tuple(sorted(places, key=lambda p: p.cpu)),
        cpu_nodes=tuple(range(ncpu_nodes)),
        memory_only_nodes=mem_only,
        node_socket=dict(sorted(node_socket.items())),
    )


def _linear(sockets, dies, cores_per_die, threads, numa_per_socket) -> list[CPUPlace]:
    cores_per_socket = dies * cores_per_die
    cores_per_node = cores_per_socket // numa_per_socket
    places = []
    cpu = 0
    for socket in range(sockets):
        for core_index in range(cores_per_socket):
            node = socket * numa_per_socket + core_index // cores_per_node
            for thread in range(threads):
                places.append(CPUPlace(
                    cpu=cpu, socket=socket, die=core_index // cores_per_die,
                    core_index=core_index, core_id=core_index, thread=thread, node=node,
                ))
                cpu += 1
    return places


def _interleaved(sockets, dies, cores_per_die, threads, numa_per_socket) -> list[CPUPlace]:
    cores_per_socket = dies * cores_per_die
    ncores = sockets * cores_per_socket
    nnodes = sockets * numa_per_socket
    cores_per_node = cores_per_socket // numa_per_socket
    places = []
    for first_thread in range(ncores):
        node = first_thread % nnodes
        socket = node % sockets
        node_in_socket = node // sockets
        # The n-th id landing on this node is that node's n-th core.
        core_index = node_in_socket * cores_per_node + first_thread // nnodes
        for thread in range(threads):
            places.append(CPUPlace(
                cpu=first_thread + thread * ncores, socket=socket,
                die=core_index // cores_per_die, core_index=core_index,
                core_id=core_index + 3 * (core_index // 5), thread=thread, node=node,
            ))
    return places


def generate(
    root: Path | str,
    sockets: int = 1,
    dies_per_socket: int = 1,
    cores_per_die: int = 4,
    threads_per_core: int = 2,
    numa_per_socket: int = 1,
    numbering: Numbering = "linear",
    offline: Iterable[int] = (),
    isolated: Iterable[int] = (),
    memory_only_nodes: int = 0,
    mem_per_node_kb: int = DEFAULT_MEM_PER_NODE_KB,
    memory_only_kb: int | None = None,
    l3: L3Span | None = None,
) -> Layout:
    """Write a sysfs tree for the described machine under `root`; return its Layout.

    `root` is a host root: pass the same path to `topology.discover`.
    `offline` and `isolated` are CPU ids (or CPUSets); `memory_only_kb`
    defaults to four times `mem_per_node_kb`; `l3` names what one L3 cache spans
    (None: no cache directories).
    """
    shape = layout(
        sockets, cores_per_die, threads_per_core, dies_per_socket,
        numa_per_socket, numbering, memory_only_nodes,
    )
    all_cpus, online, offline_set, isolated_set = _cpu_states(shape, offline, isolated)
    if memory_only_kb is None:
        memory_only_kb = 4 * mem_per_node_kb

    sysdir = Path(root) / "sys" / "devices" / "system"
    _write_cpus(sysdir / "cpu", shape, all_cpus, online, offline_set, isolated_set, l3)
    _write_nodes(sysdir / "node", shape, online, mem_per_node_kb, memory_only_kb)
    return shape


def fake_topology(
    sockets: int = 1,
    dies_per_socket: int = 1,
    cores_per_die: int = 4,
    threads_per_core: int = 2,
    numa_per_socket: int = 1,
    numbering: Numbering = "linear",
    offline: Iterable[int] = (),
    isolated: Iterable[int] = (),
    memory_only_nodes: int = 0,
    mem_per_node_kb: int = DEFAULT_MEM_PER_NODE_KB,
    memory_only_kb: int | None = None,
) -> Topology:
    """The Topology `discover` would read from `generate(...)` with the same
    arguments, built in memory (no files: fast for benchmarks and policy tests)."""
    shape = layout(
        sockets, cores_per_die, threads_per_core, dies_per_socket,
        numa_per_socket, numbering, memory_only_nodes,
    )
    _, online, offline_set, isolated_set = _cpu_states(shape, offline, isolated)
    if memory_only_kb is None:
        memory_only_kb = 4 * mem_per_node_kb
    core_cpus: dict[tuple[int, int], set[int]] = {}
    for p in shape.places:
        if p.cpu in online:
            core_cpus.setdefault((p.socket, p.core_index), set()).add(p.cpu)
    cores = {key: CPUSet(cpus) for key, cpus in core_cpus.items()}
    cpus = [
        CPUInfo(p.cpu, p.socket, p.die, p.core_id, p.node, cores[(p.socket, p.core_index)])
        for p in shape.places if p.cpu in online
    ]
    mem_only = set(shape.memory_only_nodes)
    all_nodes = shape.cpu_nodes + shape.memory_only_nodes
    nodes = [
        NumaNode(
            id=nid,
            cpus=CPUSet(p.cpu for p in shape.places if p.node == nid and p.cpu in online),
            memory_kb=memory_only_kb if nid in mem_only else mem_per_node_kb,
            distances={other: _distance(shape, nid, other, mem_only) for other in all_nodes},
            # What discovery infers: CPU nodes are DRAM, CPU-less ones at 17 far memory.
            kind="pmem-cxl" if nid in mem_only else "dram",
        )
        for nid in all_nodes
    ]
    return Topology(cpus, nodes, offline=offline_set, isolated=isolated_set)


def _cpu_states(shape: Layout, offline: Iterable[int], isolated: Iterable[int]):
    all_cpus = CPUSet(p.cpu for p in shape.places)
    offline_set = CPUSet(offline)
    isolated_set = CPUSet(isolated)
    for what, cpus in (("offline", offline_set), ("isolated", isolated_set)):
        unknown = cpus - all_cpus
        if unknown:
            raise ValueError(f"{what} CPUs {unknown} do not exist in a machine with CPUs {all_cpus}")
    if 0 in offline_set:
        raise ValueError("CPU 0 cannot be offline")
    online = all_cpus - offline_set
    return all_cpus, online, offline_set, isolated_set


def _write_cpus(cpu_dir: Path, shape: Layout, all_cpus: CPUSet, online: CPUSet,
                offline: CPUSet, isolated: CPUSet, l3: L3Span | None = None) -> None:
    cpu_dir.mkdir(parents=True, exist_ok=True)
    _put(cpu_dir / "possible", str(all_cpus))
    _put(cpu_dir / "present", str(all_cpus))
    _put(cpu_dir / "online", str(online))
    _put(cpu_dir / "offline", str(offline))
    _put(cpu_dir / "isolated", str(isolated))
    _put(cpu_dir / "kernel_max", str(max(all_cpus.max(), 8191)))

    core_cpus: dict[tuple[int, int], list[int]] = {}
    socket_cpus: dict[int, list[int]] = {}
    l3_cpus: dict[tuple[int, ...], list[int]] = {}
    for p in shape.places:
        if p.cpu in online:
            core_cpus.setdefault((p.socket, p.core_index), []).append(p.cpu)
            socket_cpus.setdefault(p.socket, []).append(p.cpu)
            if l3 is not None:
                l3_cpus.setdefault(_l3_key(p, l3), []).append(p.cpu)
    for p in shape.places:
        cdir = cpu_dir / f"cpu{p.cpu}"
        cdir.mkdir(exist_ok=True)
        if p.cpu != 0:
            _put(cdir / "online", "1" if p.cpu in online else "0")
        if p.cpu not in online:
            continue
        link = cdir / f"node{p.node}"
        if not link.is_symlink():
            os.symlink(f"../../node/node{p.node}", link)
        siblings = core_cpus[(p.socket, p.core_index)]
        package = socket_cpus[p.socket]
        topo = cdir / "topology"
        topo.mkdir(exist_ok=True)
        _put(topo / "physical_package_id", str(p.socket))
        _put(topo / "die_id", str(p.die))
        _put(topo / "core_id", str(p.core_id))
        # Only the list files: the hex-mask twins (thread_siblings, ...) double
        # the file count, and creating files dominates generation time.
        _put(topo / "thread_siblings_list", format_cpulist(siblings))
        _put(topo / "core_siblings_list", format_cpulist(package))
        if l3 is not None:
            index = cdir / "cache" / "index3"
            index.mkdir(parents=True, exist_ok=True)
            _put(index / "level", "3")
            _put(index / "type", "Unified")
            _put(index / "shared_cpu_list", format_cpulist(l3_cpus[_l3_key(p, l3)]))
            _put(index / "size", L3_SIZE)


def _l3_key(p: CPUPlace, l3: L3Span) -> tuple[int, ...]:
    return {"package": (p.socket,), "die": (p.socket, p.die), "node": (p.node,)}[l3]


def _write_nodes(node_dir: Path, shape: Layout, online: CPUSet,
                 mem_per_node_kb: int, memory_only_kb: int) -> None:
    all_nodes = shape.cpu_nodes + shape.memory_only_nodes
    node_set = format_cpulist(all_nodes)
    node_dir.mkdir(parents=True, exist_ok=True)
    _put(node_dir / "possible", node_set)
    _put(node_dir / "online", node_set)
    _put(node_dir / "has_cpu", format_cpulist(shape.cpu_nodes))
    _put(node_dir / "has_memory", node_set)
    _put(node_dir / "has_normal_memory", node_set)
    nbits = max(p.cpu for p in shape.places) + 1
    mem_only = set(shape.memory_only_nodes)
    for nid in all_nodes:
        ndir = node_dir / f"node{nid}"
        ndir.mkdir(exist_ok=True)
        cpus = [p.cpu for p in shape.places if p.node == nid and p.cpu in online]
        _put(ndir / "cpulist", format_cpulist(cpus))
        _put(ndir / "cpumap", _cpumask(cpus, nbits))
        distances = [_distance(shape, nid, other, mem_only) for other in all_nodes]
        _put(ndir / "distance", " ".join(map(str, distances)))
        mem_kb = memory_only_kb if nid in mem_only else mem_per_node_kb
        _put(ndir / "meminfo", _meminfo(nid, mem_kb))


def _distance(shape: Layout, a: int, b: int, mem_only: set[int]) -> int:
    if a == b:
        return LOCAL
    same_socket = shape.node_socket[a] == shape.node_socket[b]
    if a in mem_only or b in mem_only:
        return MEM_ONLY_NEAR if same_socket and not (a in mem_only and b in mem_only) else MEM_ONLY_FAR
    return SAME_SOCKET if same_socket else OTHER_SOCKET


def _meminfo(nid: int, total_kb: int) -> str:
    free_kb = total_kb * 9 // 10
    rows = [("MemTotal", total_kb), ("MemFree", free_kb), ("MemUsed", total_kb - free_kb),
            ("HugePages_Total", 0), ("HugePages_Free", 0)]
    lines = []
    for key, value in rows:
        unit = "" if key.startswith("HugePages") else " kB"
        lines.append(f"Node {nid} {key + ':':<15} {value:>8}{unit}")
    return "\n".join(lines)


def _cpumask(cpus: Iterable[int], nbits: int) -> str:
    # Kernel format: hex words of 32 bits, most significant first, comma separated.
    mask = 0
    for cpu in cpus:
        mask |= 1 << cpu
    nwords = max(1, (nbits + 31) // 32)
    return ",".join(f"{(mask >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(nwords)))


def _put(path: Path, text: str) -> None:
    # Callers create directories once; a mkdir per file costs as much as the write.
    path.write_text(text + "\n")
