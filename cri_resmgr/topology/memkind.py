"""What kind of memory a NUMA node holds: DRAM, far memory (PMEM, CXL) or HBM.

No I/O: the caller passes the nodes and, per node, the HMAT view of its
memory (read bandwidth MB/s, read latency ns) where the firmware gives one.
The evidence, strongest first:

1. a node with CPUs is DRAM;
2. HMAT: against the DRAM of the nearest CPU node, clearly more bandwidth is
   HBM, clearly more latency or less bandwidth is far memory, else DRAM;
3. a memory-side cache in front of a CPU-less node's memory: far memory;
4. distances: firmware puts on-package HBM at 11-13 from its CPUs (Xeon Max
   flat mode) and persistent memory and CXL at 14 or more (17 is typical for
   PMEM); this is a convention of the SLIT tables, so it comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .model import MemoryKind, NumaNode

__all__ = ["memory_kinds"]

# HMAT figures within this factor of DRAM's are DRAM: firmware tables are rough.
_MARGIN = 1.25
# Below this distance from its nearest CPU node, CPU-less memory is on the package.
_HBM_BELOW = 14


def memory_kinds(
    nodes: Sequence[NumaNode], hmat: Mapping[int, tuple[int, int] | None]
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
        kind = _by_hmat(hmat.get(node.id), hmat.get(near.id))
        if kind is None and node.memory_side_cache_kb:
            kind = "pmem-cxl"
        if kind is None and near.distance(node.id) > near.distance(near.id):
            kind = "hbm" if near.distance(node.id) < _HBM_BELOW else "pmem-cxl"
        if kind is not None:
            kinds[node.id] = kind
    return kinds


def _by_hmat(mine: tuple[int, int] | None, dram: tuple[int, int] | None) -> MemoryKind | None:
    if mine is None or dram is None or min(*mine, *dram) <= 0:
        return None
    bandwidth, latency = mine
    dram_bandwidth, dram_latency = dram
    if bandwidth > dram_bandwidth * _MARGIN:
        return "hbm"
    if latency > dram_latency * _MARGIN or bandwidth * _MARGIN < dram_bandwidth:
        return "pmem-cxl"
    return "dram"
