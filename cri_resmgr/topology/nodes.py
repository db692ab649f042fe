"""NUMA nodes from sysfs: their CPUs, memory, distances and memory kind.

Node membership comes from node*/cpulist, else node*/cpumap (hex words),
else the cpuN/nodeM links. Nodes are not nested under packages: a node may
span packages and a package may hold several nodes. A CPU whose node has no
directory (an offline node) stays in that node, marked offline, with a
warning: it is never moved into another node.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from cri_resmgr.topology.cpuset import CPUSet

from .memkind import memory_kinds
from .model import DEFAULT_LOCAL_DISTANCE, DEFAULT_REMOTE_DISTANCE, NumaNode
from .sysfsread import Reader

__all__ = ["read_nodes"]

_NODE_RE = re.compile(r"node(\d+)")
_MEMTOTAL_RE = re.compile(r"MemTotal:\s*(\d+)\s*kB")


def read_nodes(rd: Reader, ndir: str, cdir: str, online: CPUSet) -> tuple[list[NumaNode], dict[int, int]]:
    """The nodes (memory-only ones included) and each online CPU's node."""
    entries = _node_dirs(ndir)
    if not entries:
        only = NumaNode(0, online, 0, {0: DEFAULT_LOCAL_DISTANCE})
        return [only], {cpu: 0 for cpu in online}

    # The kernel writes one distance column per online node, in id order.
    columns = rd.cpulist(f"{ndir}/online")
    column_ids = sorted(columns) if columns else list(entries)
    cpu_node: dict[int, int] = {}
    members: dict[int, CPUSet] = {}
    for nid, path in entries.items():
        cpus = _node_cpus(rd, path, online)
        for cpu in cpus:
            if cpu in cpu_node:
                rd.warn(f"{path}/cpulist", f"CPU {cpu} is also in node{cpu_node[cpu]}; kept there")
                continue
            cpu_node[cpu] = nid
        members[nid] = CPUSet(c for c in cpus if cpu_node[c] == nid)

    offline_nodes = _place_orphans(rd, cdir, ndir, online, cpu_node, members, entries)
    nodes = []
    for nid in sorted(members):
        path = entries.get(nid, "")  # "": an offline node, no directory to read
        nodes.append(NumaNode(
            id=nid,
            cpus=members[nid],
            memory_kb=_memtotal(rd, f"{path}/meminfo") if path else 0,
            distances=_distances(rd, f"{path}/distance", nid, column_ids) if path else {},
            online=nid not in offline_nodes,
            memory_side_cache_kb=_side_cache_kb(rd, f"{path}/memory_side_cache") if path else None,
        ))
    kinds = memory_kinds(nodes, {n.id: _hmat(rd, entries[n.id]) for n in nodes if n.id in entries})
    return [replace(n, kind=kinds[n.id]) if n.id in kinds else n for n in nodes], cpu_node


def _node_dirs(ndir: str) -> dict[int, str]:
    try:
        names = os.listdir(ndir)
    except OSError:
        return {}
    found = {int(m.group(1)): f"{ndir}/{name}" for name in names if (m := _NODE_RE.fullmatch(name))}
    return {nid: found[nid] for nid in sorted(found) if os.path.isdir(found[nid])}


def _node_cpus(rd: Reader, path: str, online: CPUSet) -> CPUSet:
    cpus = rd.cpulist(f"{path}/cpulist")
    if cpus is None:
        cpus = rd.cpumask(f"{path}/cpumap")
    return (cpus or CPUSet()) & online


def _place_orphans(
    rd: Reader, cdir: str, ndir: str, online: CPUSet, cpu_node: dict[int, int],
    members: dict[int, CPUSet], entries: dict[int, str],
) -> set[int]:
    """Give each online CPU that no node lists the node of its cpuN/nodeM link.

    A link to a node without a directory (offline) makes that node, marked
    offline; without any link the CPU goes to the lowest node, with a warning.
    Returns the offline nodes made.
    """
    offline_nodes: set[int] = set()
    extra: dict[int, set[int]] = {}
    for cpu in online:
        if cpu in cpu_node:
            continue
        try:
            names = os.listdir(f"{cdir}/cpu{cpu}")
        except OSError:
            names = []
        linked = sorted(int(m.group(1)) for n in names if (m := _NODE_RE.fullmatch(n)))
        if linked:
            nid = linked[0]
            if nid not in entries:
                offline_nodes.add(nid)
        else:
            nid = min(entries)
            rd.warn(f"{cdir}/cpu{cpu}", f"no node lists CPU {cpu} and it has no node link; put in node {nid}")
        cpu_node[cpu] = nid
        extra.setdefault(nid, set()).add(cpu)
    for nid, cpus in extra.items():
        members[nid] = members.get(nid, CPUSet()) | CPUSet(cpus)
        if nid in offline_nodes:
            rd.warn(f"{ndir}/node{nid}", f"missing, but CPUs {CPUSet(cpus)} link to it: node {nid} "
                                         "kept with no memory, marked offline")
    return offline_nodes


def _distances(rd: Reader, path: str, nid: int, column_ids: list[int]) -> dict[int, int]:
    text = rd.text(path)
    defaults = {o: DEFAULT_LOCAL_DISTANCE if o == nid else DEFAULT_REMOTE_DISTANCE for o in column_ids}
    if text is None:
        return defaults
    fields = text.split()
    try:
        values = [int(v) for v in fields]
    except ValueError:
        rd.warn(path, f"not a list of distances: {text[:80]!r}; using 10 local, 20 remote")
        return defaults
    if len(values) != len(column_ids):
        rd.warn(path, f"{len(values)} distances for {len(column_ids)} online nodes; using 10 local, 20 remote")
        return defaults
    return dict(zip(column_ids, values, strict=True))


def _memtotal(rd: Reader, path: str) -> int:
    text = rd.text(path)
    match = _MEMTOTAL_RE.search(text or "")
    if text is not None and not match:
        rd.warn(path, "no MemTotal line; memory taken as 0")
    return int(match.group(1)) if match else 0


def _side_cache_kb(rd: Reader, path: str) -> int | None:
    # memory_side_cache/indexN/size in bytes: memory behind a cache (2LM, HBM cache mode).
    try:
        names = sorted(n for n in os.listdir(path) if n.startswith("index"))
    except OSError:
        return None
    sizes = [rd.integer(f"{path}/{n}/size") for n in names]
    known = [s for s in sizes if s is not None]
    return sum(known) // 1024 if known else None


def _hmat(rd: Reader, path: str) -> list[tuple[int, int]]:
    # accessN/initiators: the HMAT view of this memory from the best initiators (access0:
    # any, access1: CPUs only), as (read MB/s, read ns); 0 where the firmware gave nothing.
    out = []
    for access in ("access0", "access1"):
        bandwidth = rd.integer(f"{path}/{access}/initiators/read_bandwidth")
        latency = rd.integer(f"{path}/{access}/initiators/read_latency")
        out.append((max(bandwidth or 0, 0), max(latency or 0, 0)))
    return out
