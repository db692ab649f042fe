"""A Topology from a short machine description: `-shape 2s/4n/64c/2t`.

The counts read as lscpu prints them: sockets, NUMA nodes (with CPUs, in the
whole machine), cores per socket, threads per core. Parts, separated by '/', in
any order:

    Ns        sockets (default 1)
    Nd        dies per socket (default 1)
    Nn        NUMA nodes with CPUs in the machine (default: one per socket)
    Nc        cores per socket (required)
    Nt        threads per core (default 1)
    l3=N      cores sharing one L3 cache (default: one L3 per die)
    mem=SIZE  DRAM per NUMA node with CPUs (default 16g; k, m, g, t)
    Npmem[:SIZE], Ncxl[:SIZE], Nhbm[:SIZE]
              memory tiers: N memory-only nodes of that kind (PMEM and CXL are
              "pmem-cxl" to the model), attached to the sockets in turn
    interleaved  Xeon-like ids: the sibling of CPU N is N + the number of cores
    sparse    ids with holes: socket S starts at S times a power of two above
              its CPU count, and node ids are even (0, 2, 4...)

`8s/16n/256c/2t/sparse` is 4096 CPUs with ids up to 7679 and 16 NUMA nodes.
Everything is built from the model's constructors: no files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cri_resmgr.topology import CPUInfo, NumaNode, Topology
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import CacheInfo, MemoryKind, TopologyError

__all__ = ["Shape", "ShapeError", "parse_shape", "build", "topology_of"]

LOCAL, SAME_SOCKET, OTHER_SOCKET = 10, 11, 21
# Where firmware tables put memory tiers (see topology/memkind.py): HBM on the package,
# PMEM and CXL further away.
TIER_NEAR = {"hbm": 12, "pmem-cxl": 17}
TIER_FAR = {"hbm": 22, "pmem-cxl": 28}
TIER_KINDS: dict[str, MemoryKind] = {"pmem": "pmem-cxl", "cxl": "pmem-cxl", "hbm": "hbm"}
DEFAULT_DRAM_KB = 16 << 20
DEFAULT_TIER_KB = {"pmem": 256 << 20, "cxl": 128 << 20, "hbm": 16 << 20}
MAX_CPUS = 65536
MAX_NODES = 1024  # NUMA nodes, memory-only ones included: Linux's own limit (NODES_SHIFT 10)
MAX_NODE_KB = 1 << 40  # memory of one node: 1 PiB
MAX_TEXT = 1000  # a longer -shape is no machine: refused before it is parsed

# ASCII digits only: \d would take "١" or "²", which int() reads or refuses.
_DIGITS = "[0-9]{1,9}"  # a count or size of more than nine digits is refused by its length
_COUNT = re.compile(rf"^({_DIGITS})(s|d|n|c|t)$")
_TIER = re.compile(rf"^({_DIGITS})(pmem|cxl|hbm)(?::([0-9a-z]+))?$")
_SIZE = re.compile(rf"^({_DIGITS})([kmgt]?)$", re.IGNORECASE)
_L3 = re.compile(rf"^{_DIGITS}$")
_LONG_NUMBER = re.compile(r"[0-9]{10,}")
_UNITS = {"k": 1, "m": 1 << 10, "g": 1 << 20, "t": 1 << 30, "": 1 << 20}  # to KiB; bare numbers are GiB


class ShapeError(TopologyError):
    """A shape string that does not describe a machine; the message quotes it."""


@dataclass(frozen=True)
class Tier:
    kind: str  # pmem, cxl, hbm
    count: int
    size_kb: int


@dataclass(frozen=True)
class Shape:
    sockets: int = 1
    dies: int = 1
    nodes: int | None = None  # None: one per socket
    cores: int = 0  # per socket
    threads: int = 1
    l3_cores: int | None = None  # None: one L3 per die
    dram_kb: int = DEFAULT_DRAM_KB
    tiers: tuple[Tier, ...] = field(default=())
    interleaved: bool = False
    sparse: bool = False

    @property
    def cpu_nodes(self) -> int:
        return self.nodes if self.nodes is not None else self.sockets

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores * self.threads


def _q(text: str, limit: int = 60) -> str:
    """A piece of the shape for an error message: quoted, at most about `limit` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def parse_shape(text: str) -> Shape:
    """Raises ShapeError naming the bad part and what it should look like."""
    if len(text) > MAX_TEXT:
        raise ShapeError(f"shape {_q(text)}: longer than {MAX_TEXT} characters; expected e.g. 2s/4n/64c/2t")
    values: dict[str, object] = {}
    tiers: list[Tier] = []
    parts = [p.strip() for p in text.strip().split("/")]
    if not text.strip() or any(not p for p in parts):
        raise ShapeError(f"shape {_q(text)}: empty part; expected e.g. 2s/4n/64c/2t")
    for part in parts:
        if _LONG_NUMBER.search(part):
            raise ShapeError(f"shape {_q(text)}: {_q(part, 30)}: a number of more than 9 digits is no count or "
                             "size of a machine")
        values.update(_part(text, part.lower(), values, tiers))
    if "cores" not in values:
        raise ShapeError(f"shape {_q(text)}: no core count (e.g. 64c: cores per socket)")
    shape = Shape(tiers=tuple(tiers), **values)  # type: ignore[arg-type]
    _check(text, shape)
    return shape


def _part(text: str, part: str, seen: dict[str, object], tiers: list[Tier]) -> dict[str, object]:
    names = {"s": "sockets", "d": "dies", "n": "nodes", "c": "cores", "t": "threads"}
    m = _COUNT.match(part)
    if m:
        name = names[m.group(2)]
        if name in seen:
            raise ShapeError(f"shape {_q(text)}: {_q(part, 30)} repeats the {name} count")
        count = int(m.group(1))
        if count < 1:
            raise ShapeError(f"shape {_q(text)}: {_q(part, 30)}: a count must be at least 1")
        return {name: count}
    m = _TIER.match(part)
    if m:
        kind, count = m.group(2), int(m.group(1))
        size = _size(text, part, m.group(3)) if m.group(3) else DEFAULT_TIER_KB[kind]
        if count < 1:
            raise ShapeError(f"shape {_q(text)}: {_q(part, 30)}: a count must be at least 1")
        tiers.append(Tier(kind, count, size))
        return {}
    if part in ("interleaved", "sparse"):
        return {part: True}
    key, eq, value = part.partition("=")
    if eq and key == "l3" and _L3.match(value) and int(value) > 0:
        return {"l3_cores": int(value)}
    if eq and key == "mem":
        return {"dram_kb": _size(text, part, value)}
    raise ShapeError(f"shape {_q(text)}: unknown part {_q(part, 30)}; expected Ns, Nd, Nn, Nc, Nt (sockets, dies per "
                     "socket, NUMA nodes, cores per socket, threads per core), l3=N, mem=SIZE, Npmem[:SIZE], "
                     "Ncxl[:SIZE], Nhbm[:SIZE], interleaved or sparse")


def _size(text: str, part: str, value: str) -> int:
    m = _SIZE.match(value)
    if not m or int(m.group(1)) == 0:
        raise ShapeError(f"shape {_q(text)}: {_q(part, 30)}: bad size {_q(value, 30)} (e.g. 64g, 512m)")
    kb = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if kb > MAX_NODE_KB:
        raise ShapeError(f"shape {_q(text)}: {_q(part, 30)}: {_q(value, 30)} is more memory than a NUMA node "
                         f"holds (at most {MAX_NODE_KB >> 30}t)")
    return kb


def _check(text: str, s: Shape) -> None:
    if s.cpu_nodes % s.sockets:
        raise ShapeError(f"shape {_q(text)}: {s.cpu_nodes} NUMA nodes do not divide among {s.sockets} sockets")
    per_socket = s.cpu_nodes // s.sockets
    if s.cores % s.dies:
        raise ShapeError(f"shape {_q(text)}: {s.cores} cores per socket do not divide among {s.dies} dies")
    if s.cores % per_socket:
        raise ShapeError(f"shape {_q(text)}: {s.cores} cores per socket do not divide among {per_socket} "
                         "NUMA nodes per socket")
    if s.l3_cores is not None and (s.cores // s.dies) % s.l3_cores:
        raise ShapeError(f"shape {_q(text)}: l3={s.l3_cores} does not divide the {s.cores // s.dies} cores of a die")
    if s.threads > 8:
        raise ShapeError(f"shape {_q(text)}: {s.threads} threads per core; at most 8")
    if s.cpus > MAX_CPUS:
        raise ShapeError(f"shape {_q(text)}: {s.cpus} CPUs; at most {MAX_CPUS}")
    nodes = s.cpu_nodes + sum(t.count for t in s.tiers)
    if nodes > MAX_NODES:
        raise ShapeError(f"shape {_q(text)}: {nodes} NUMA nodes; at most {MAX_NODES}")


def topology_of(text: str) -> Topology:
    return build(parse_shape(text))


def build(s: Shape) -> Topology:
    per_die = s.cores // s.dies
    nodes_per_socket = s.cpu_nodes // s.sockets
    cores_per_node = s.cores // nodes_per_socket
    l3_cores = s.l3_cores or per_die
    stride = 1 << (2 * s.cores * s.threads - 1).bit_length() if s.sparse else s.cores * s.threads
    spread = 2 if s.sparse else 1

    def node_id(i: int) -> int:
        return spread * i

    infos: list[CPUInfo] = []
    node_cpus: dict[int, list[int]] = {}
    l3_cpus: dict[int, list[int]] = {}
    for p in range(s.sockets):
        for k in range(s.cores):
            ids = [_cpu_id(s, p, k, t, stride) for t in range(s.threads)]
            siblings = CPUSet(ids)
            node = node_id(p * nodes_per_socket + k // cores_per_node)
            die = k // per_die
            l3 = min(_cpu_id(s, p, j, 0, stride) for j in range(k - k % l3_cores, k - k % l3_cores + l3_cores))
            for cpu in ids:
                infos.append(CPUInfo(id=cpu, package=p, die=die, core=k, node=node, siblings=siblings,
                                     l2=siblings.min(), l3=l3))
            node_cpus.setdefault(node, []).extend(ids)
            l3_cpus.setdefault(l3, []).extend(ids)
    cpu_node_ids = [node_id(i) for i in range(s.cpu_nodes)]
    socket_of = {nid: i // nodes_per_socket for i, nid in enumerate(cpu_node_ids)}
    tier_nodes: list[tuple[int, MemoryKind, int, int]] = []  # (id, kind, size, socket)
    n = s.cpu_nodes
    for tier in s.tiers:
        for i in range(tier.count):
            tier_nodes.append((node_id(n), TIER_KINDS[tier.kind], tier.size_kb, i % s.sockets))
            n += 1
    nodes = [NumaNode(nid, CPUSet(node_cpus[nid]), s.dram_kb, _cpu_node_distances(nid, socket_of, tier_nodes),
                      kind="dram") for nid in cpu_node_ids]
    for nid, kind, size, socket in tier_nodes:
        dist = {c: (TIER_NEAR if socket_of[c] == socket else TIER_FAR)[kind] for c in cpu_node_ids}
        dist.update({m: (LOCAL if m == nid else 2 * OTHER_SOCKET) for m, _, _, _ in tier_nodes})
        nodes.append(NumaNode(nid, CPUSet(), size, dist, kind=kind))
    caches = [CacheInfo(3, first, CPUSet(cpus)) for first, cpus in sorted(l3_cpus.items())]
    return Topology(infos, nodes, caches=caches)


def _cpu_id(s: Shape, socket: int, core: int, thread: int, stride: int) -> int:
    rank = thread * s.cores + core if s.interleaved else core * s.threads + thread
    if s.sparse:
        return socket * stride + rank
    if s.interleaved:
        return thread * s.sockets * s.cores + socket * s.cores + core
    return socket * stride + rank


def _cpu_node_distances(nid: int, socket_of: dict[int, int],
                        tiers: list[tuple[int, MemoryKind, int, int]]) -> dict[int, int]:
    dist = {other: LOCAL if other == nid else SAME_SOCKET if socket_of[other] == socket_of[nid] else OTHER_SOCKET
            for other in socket_of}
    for tid, kind, _, socket in tiers:
        dist[tid] = (TIER_NEAR if socket == socket_of[nid] else TIER_FAR)[kind]
    return dist
