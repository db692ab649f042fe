"""The model as an operator reads it: text in the spirit of `lstopo-no-graphics`,
and JSON for tools. No I/O: the command prints what these return.

The text nests packages > dies > NUMA nodes > L3 > cores > threads. The
hardware is not always a tree (a node may span packages, a package may hold
several nodes), so each level shows its part of the one above, and a node
seen under several packages says so; a cache shared by several nodes shows
whole under each of them, naming them. Levels the kernel does not describe
are left out rather than made up.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from cri_resmgr.flags import plural
from cri_resmgr.topology.cpuset import CPUSet

from .model import UNKNOWN, CPUInfo, NumaNode, Topology

__all__ = ["render_text", "render_json", "to_document"]

_KIND_NAMES = {"dram": "DRAM", "pmem-cxl": "PMEM/CXL", "hbm": "HBM"}
_CORE_KINDS = {"performance": "P-core", "efficiency": "E-core"}

JSONValue = None | bool | int | str | list["JSONValue"] | dict[str, "JSONValue"]


def render_text(topo: Topology) -> str:
    """The whole model as indented lines, then offline CPUs, distances and warnings."""
    lines = [_machine_line(topo)]
    l3_groups = topo.groups("l3")
    for pkg in topo.package_ids():
        pcpus = topo.package_cpus(pkg)
        lines.append(f"  Package {_id(pkg)} ({_count(pcpus)})")
        dies = topo.die_ids(pkg)
        for die in dies:
            dcpus = topo.die_cpus(pkg, die)
            indent = "    "
            if die != UNKNOWN:
                lines.append(f"    Die {die} ({_count(dcpus)})")
                indent = "      "
            for nid in topo.cpu_node_ids():
                ncpus = topo.node_cpus(nid) & dcpus
                if not ncpus:
                    continue
                lines.append(f"{indent}{_node_line(topo, topo.nodes[nid], pkg)}")
                _l3_and_cores(topo, ncpus, l3_groups, indent + "  ", lines)
    for nid in topo.memory_only_node_ids():
        lines.append(f"  {_node_line(topo, topo.nodes[nid], None)}")
    if topo.offline:
        lines.append(f"  Offline CPUs: {topo.offline}")
    lines += _distances(topo)
    if topo.warnings:
        lines.append("Warnings (left out of the model):")
        lines += [f"  {w}" for w in topo.warnings]
    return "\n".join(lines)


def _machine_line(topo: Topology) -> str:
    parts = [f"{plural(len(topo.online), 'online CPU')} ({topo.online})", plural(len(topo.cores()), "core"),
             plural(len(topo.package_ids()), "package"), plural(len(topo.cpu_node_ids()), "NUMA node") + " with CPUs"]
    if topo.memory_only_node_ids():
        parts.append(f"{len(topo.memory_only_node_ids())} memory-only")
    if topo.isolated:
        parts.append(f"isolated {topo.isolated}")
    if topo.nohz_full:
        parts.append(f"nohz_full {topo.nohz_full}")
    return "Machine: " + ", ".join(parts)


def _node_line(topo: Topology, node: NumaNode, pkg: int | None) -> str:
    kind = _KIND_NAMES.get(node.kind or "", "memory of unknown kind")
    text = f"NUMANode {node.id} ({kind} {_size(node.memory_kb)}"
    if node.cpus:
        text += f", CPUs {node.cpus}"
    else:
        near = [n for n in topo.nodes_by_distance(node.id) if topo.nodes[n].cpus][:1]
        if near:
            text += f", nearest CPUs in node {near[0]} at distance {topo.distance(near[0], node.id)}"
    if node.memory_side_cache_kb:
        text += f", behind a {_size(node.memory_side_cache_kb)} memory-side cache"
    if not node.online:
        text += ", node offline"
    others = [p for p in topo.node_package_ids(node.id) if p != pkg] if node.cpus else []
    if others:
        text += f", also in package {', '.join(_id(p) for p in others)}"
    return text + ")"


def _l3_and_cores(topo: Topology, cpus: CPUSet, l3_groups: Iterable[CPUSet], indent: str,
                  lines: list[str]) -> None:
    sizes = {c.id: c.size_kb for c in topo.caches if c.level == 3}
    groups = [g for g in l3_groups if not g.isdisjoint(cpus)]
    if not groups:
        _cores(topo, cpus, indent, lines)
        return
    for group in groups:
        # The cache's own CPUs, as the kernel and -o json have them: an L3 that spans the
        # socket shows whole under each of its nodes (and says so), only the cores below are
        # the node's part.
        size = sizes.get(topo.cpu(group.min()).l3 or 0)
        notes = [_size(size)] if size else []
        nodes = CPUSet(topo.cpu(c).node for c in group)
        if len(nodes) > 1:
            notes.append(f"shared by NUMA nodes {nodes}")
        lines.append(f"{indent}L3 {group}" + (f" ({', '.join(notes)})" if notes else ""))
        _cores(topo, group & cpus, indent + "  ", lines)


def _cores(topo: Topology, cpus: CPUSet, indent: str, lines: list[str]) -> None:
    for core in topo.cores():
        if core.isdisjoint(cpus):
            continue
        info = topo.cpu(core.min())
        threads = ", ".join(_thread(topo, t) for t in core)
        lines.append(f"{indent}Core {_id(info.core)}{_core_details(info)}: {threads}")


def _core_details(info: CPUInfo) -> str:
    details = []
    if info.kind:
        details.append(_CORE_KINDS[info.kind])
    if info.base_khz or info.max_khz:
        base = f"{info.base_khz / 1e6:.1f}" if info.base_khz else "?"
        top = f"{info.max_khz / 1e6:.1f}" if info.max_khz else "?"
        details.append(f"{base}/{top} GHz")
    if info.cluster is not None:
        details.append(f"cluster {info.cluster}")
    return f" ({', '.join(details)})" if details else ""


def _thread(topo: Topology, cpu: int) -> str:
    marks = [m for m, on in (("isolated", cpu in topo.isolated), ("nohz_full", cpu in topo.nohz_full)) if on]
    return f"CPU {cpu}" + (f" ({', '.join(marks)})" if marks else "")


def _distances(topo: Topology) -> list[str]:
    ids = topo.node_ids()
    if len(ids) < 2:
        return []
    width = max(4, *(len(str(i)) + 1 for i in ids))
    rows = ["Distances:", "  " + " " * width + "".join(f"{i:>{width}}" for i in ids)]
    rows += ["  " + f"{a:>{width}}" + "".join(f"{topo.distance(a, b):>{width}}" for b in ids) for a in ids]
    return rows


def _size(kb: int) -> str:
    for unit, scale in (("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kb >= scale:
            return f"{kb / scale:.1f} {unit}"
    return f"{kb} KiB"


def _count(cpus: CPUSet) -> str:
    return f"{len(cpus)} CPU" + ("" if len(cpus) == 1 else "s")


def _id(value: int) -> str:
    return "?" if value == UNKNOWN else str(value)


# -- JSON -----------------------------------------------------------------------------


def render_json(topo: Topology) -> str:
    return json.dumps(to_document(topo), indent=2)


def to_document(topo: Topology) -> dict[str, JSONValue]:
    """Plain data: CPU sets in kernel list syntax, unknown ids as null."""
    return {
        "online": str(topo.online),
        "offline": str(topo.offline),
        "present": str(topo.present),
        "isolated": str(topo.isolated),
        "nohz_full": str(topo.nohz_full),
        "cpus": [_cpu_doc(info) for info in topo.cpus.values()],
        "nodes": [_node_doc(node) for node in topo.nodes.values()],
        "caches": [{"level": c.level, "id": c.id, "cpus": str(c.cpus), "size_kb": c.size_kb} for c in topo.caches],
        "groups": {level: [str(g) for g in topo.groups(level)] for level in
                   ("package", "die", "node", "l3", "cluster", "l2", "core")},
        "warnings": list(topo.warnings),
    }


def _cpu_doc(info: CPUInfo) -> dict[str, JSONValue]:
    return {
        "id": info.id, "package": _known(info.package), "die": _known(info.die), "core_id": _known(info.core),
        "node": info.node, "siblings": str(info.siblings), "cluster": info.cluster, "l2": info.l2,
        "l3": info.l3, "kind": info.kind, "capacity": info.capacity, "base_khz": info.base_khz,
        "max_khz": info.max_khz,
    }


def _node_doc(node: NumaNode) -> dict[str, JSONValue]:
    return {
        "id": node.id, "cpus": str(node.cpus), "memory_kb": node.memory_kb, "kind": node.kind,
        "online": node.online, "memory_side_cache_kb": node.memory_side_cache_kb,
        "distances": {str(k): v for k, v in sorted(node.distances.items())},
    }


def _known(value: int) -> int | None:
    return None if value == UNKNOWN else value
