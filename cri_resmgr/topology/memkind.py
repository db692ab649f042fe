"""What kind of memory a NUMA node holds: DRAM, far memory (PMEM, CXL) or HBM.

No I/O: the caller passes the nodes and, per node, the HMAT view of its
memory (read bandwidth MB/s, read latency ns) where the firmware gives one.
The evidence, strongest first:

1. a node with CPUs is DRAM;
2. HMAT: against the DRAM of the nearest CPU node, clearly more bandwidth is
   HBM, clearly more latency or less bandwidth is far memory, else DRAM. Firmware
   fills the access classes unevenly (access0 with a zero latency and the figures in
   access1 only, or bandwidth without latency): each figure is compared in the first
   access class that has it for both nodes, and what one figure shows is enough;
3. a memory-side cache in front of a CPU-less node's memory: far memory;
4. distances: firmware puts on-package HBM at 11-13 from its CPUs (Xeon Max
   flat mode) and persistent memory and CXL at 14 or more (17 is typical for
   PMEM); this is a convention of the SLIT tables, so it comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .model import MemoryKind, NumaNode

__all__ = ["memory_kinds", "Hmat"]

# Per access class (access0, access1...): (read bandwidth MB/s, read latency ns), 0 unknown.
Hmat = Sequence[tuple[int, int]]

# HMAT figures within this factor of DRAM's are DRAM: firmware tables are rough.
_MARGIN = 1.25
# Below this distance from its nearest CPU node, CPU-less memory is on the package.
_HBM_BELOW = 14


def memory_kinds(
    nodes: Sequence[NumaNode], hmat: Mapping[int, Hmat]
) -> dict[int, MemoryKind]:
    """Node id -> kind, for the nodes whose kind the evidence shows."""
    cpu_nodes = [n for n in nodes if n.cpus]
    kinds: dict[int, MemoryKind] = {n.id: "dram" for n in cpu_nodes}
    if not cpu_nodes:
        return kinds
    for node in nodes:
        if node.cpus or node.memory_kb == 0:
            continue
        near = min(cpu_nodes, key=lambda c: (c.distance(node.id), c.id))
        kind = _by_hmat(hmat.get(node.id, ()), hmat.get(near.id, ()))
        if kind is None and node.memory_side_cache_kb:
            kind = "pmem-cxl"
        if kind is None and near.distance(node.id) > near.distance(near.id):
            kind = "hbm" if near.distance(node.id) < _HBM_BELOW else "pmem-cxl"
        if kind is not None:
            kinds[node.id] = kind
    return kinds


def _figure(mine: Hmat, dram: Hmat, which: int) -> tuple[int, int] | None:
    """(this node's, DRAM's) figure `which` from the first access class holding both."""
    for a, b in zip(mine, dram, strict=False):  # a node may have fewer classes
        if a[which] > 0 and b[which] > 0:
            return a[which], b[which]
    return None


def _by_hmat(mine: Hmat, dram: Hmat) -> MemoryKind | None:
    bandwidth = _figure(mine, dram, 0)
    latency = _figure(mine, dram, 1)
    if bandwidth is None and latency is None:
        return None
    if bandwidth is not None:
        if bandwidth[0] > bandwidth[1] * _MARGIN:
            return "hbm"
        if bandwidth[0] * _MARGIN < bandwidth[1]:
            return "pmem-cxl"
    if latency is not None and latency[0] > latency[1] * _MARGIN:
        return "pmem-cxl"
    return "dram"
