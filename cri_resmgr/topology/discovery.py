"""Build a Topology from a sysfs tree under a host root.

Only `<host_root>/sys/devices/system/{cpu,node}` is read. The cpu directory
is required; everything else degrades: no node directory means one node
holding all CPUs, a missing die_id means die 0, a missing distance file means
the ACPI defaults (10 local, 20 remote), a missing meminfo means 0 kB.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TypeVar

from cri_resmgr.topology.cpuset import CPUSet

from .model import (
    DEFAULT_LOCAL_DISTANCE,
    DEFAULT_REMOTE_DISTANCE,
    CPUInfo,
    NumaNode,
    Topology,
    TopologyError,
)

__all__ = ["discover", "SYSFS_CPU_DIR", "SYSFS_NODE_DIR"]

SYSFS_CPU_DIR = "sys/devices/system/cpu"
SYSFS_NODE_DIR = "sys/devices/system/node"

D = TypeVar("D")  # what a reader returns for a missing file

_CPU_DIR_RE = re.compile(r"cpu(\d+)")
_NODE_DIR_RE = re.compile(r"node(\d+)")
_MEMTOTAL_RE = re.compile(r"MemTotal:\s*(\d+)\s*kB")


def discover(host_root: str | os.PathLike[str] = "/") -> Topology:
    """Read the CPU and NUMA topology of the machine whose root is `host_root`.

    Raises TopologyError naming the path when the host root or its cpu
    directory is missing or unreadable, or when a file holds garbage.
    """
    root = Path(host_root)
    if not root.is_dir():
        raise TopologyError(f"host root {str(root)!r} is not a readable directory")
    cpu_dir = root / SYSFS_CPU_DIR
    if not cpu_dir.is_dir():
        hint = ""
        if (root / SYSFS_CPU_DIR.removeprefix("sys/")).is_dir():
            hint = f" ({str(root)!r} looks like a sysfs mount: pass the directory above it)"
        raise TopologyError(f"CPU sysfs directory {str(cpu_dir)!r} is missing{hint}")
    try:
        cpu_entries = _numbered_dirs(cpu_dir, _CPU_DIR_RE)
    except OSError as err:
        raise TopologyError(f"cannot list {str(cpu_dir)!r}: {err}") from err

    online = _online_cpus(cpu_dir, cpu_entries)
    offline = _read_cpulist(cpu_dir / "offline", default=CPUSet()) - online
    isolated = _read_cpulist(cpu_dir / "isolated", default=CPUSet()) & online

    raw = {cpu: _read_cpu_topology(cpu_dir / f"cpu{cpu}", cpu) for cpu in online}
    nodes, cpu_node = _read_nodes(root / SYSFS_NODE_DIR, online, cpu_dir)

    cpus = _build_cpus(raw, cpu_node, online)
    return Topology(cpus, nodes, offline=offline, isolated=isolated)


def _numbered_dirs(parent: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    found = {}
    for entry in os.scandir(parent):
        match = pattern.fullmatch(entry.name)
        if match and entry.is_dir():
            found[int(match.group(1))] = Path(entry.path)
    return dict(sorted(found.items()))


def _online_cpus(cpu_dir: Path, entries: dict[int, Path]) -> CPUSet:
    listed = _read_cpulist(cpu_dir / "online", default=None)
    if listed is not None:
        return listed
    # No cpu/online: trust per-CPU online flags; cpu0 usually has none
    # because it cannot be hot-unplugged.
    online = []
    for cpu, path in entries.items():
        flag = _read_text(path / "online", default="1").strip()
        if flag != "0":
            online.append(cpu)
    if not online:
        raise TopologyError(f"no online CPUs found under {str(cpu_dir)!r}")
    return CPUSet(online)


def _read_cpu_topology(path: Path, cpu: int) -> tuple[int, int, int, CPUSet | None]:
    topo = path / "topology"
    if not topo.is_dir():
        # Some virtual machines expose no topology: a single-thread core per CPU.
        return (0, 0, cpu, CPUSet([cpu]))
    package = _read_int(topo / "physical_package_id", default=0)
    die = _read_int(topo / "die_id", default=0)
    core = _read_int(topo / "core_id", default=cpu)
    siblings = _read_cpulist(topo / "thread_siblings_list", default=None)
    # Some platforms report -1 when an id is unknown.
    return (max(package, 0), max(die, 0), core if core >= 0 else cpu, siblings)


def _build_cpus(
    raw: dict[int, tuple[int, int, int, CPUSet | None]], cpu_node: dict[int, int], online: CPUSet
) -> list[CPUInfo]:
    # Without thread_siblings_list, the CPUs sharing (package, die, core_id)
    # are the siblings.
    groups: dict[tuple[int, int, int], set[int]] = {}
    for cpu, (pkg, die, core, _) in raw.items():
        groups.setdefault((pkg, die, core), set()).add(cpu)
    return [
        CPUInfo(
            id=cpu,
            package=pkg,
            die=die,
            core=core,
            node=cpu_node[cpu],
            siblings=(siblings & online) if siblings is not None else CPUSet(groups[(pkg, die, core)]),
        )
        for cpu, (pkg, die, core, siblings) in raw.items()
    ]


def _read_nodes(
    node_dir: Path, online: CPUSet, cpu_dir: Path
) -> tuple[list[NumaNode], dict[int, int]]:
    entries = _numbered_dirs(node_dir, _NODE_DIR_RE) if node_dir.is_dir() else {}
    if not entries:
        only = NumaNode(0, online, 0, {0: DEFAULT_LOCAL_DISTANCE})
        return [only], {cpu: 0 for cpu in online}

    node_ids = list(entries)
    nodes = []
    cpu_node: dict[int, int] = {}
    for nid, path in entries.items():
        cpus = _read_cpulist(path / "cpulist", default=CPUSet()) & online
        for cpu in cpus:
            if cpu in cpu_node:
                raise TopologyError(
                    f"CPU {cpu} is listed by both node{cpu_node[cpu]} and node{nid} under {str(node_dir)!r}"
                )
            cpu_node[cpu] = nid
        nodes.append(
            NumaNode(
                id=nid,
                cpus=cpus,
                memory_kb=_read_memtotal(path / "meminfo"),
                distances=_read_distances(path / "distance", nid, node_ids),
            )
        )

    orphans = [cpu for cpu in online if cpu not in cpu_node]
    if orphans:
        nodes = _adopt_orphans(nodes, orphans, cpu_node, cpu_dir)
    return nodes, cpu_node


def _adopt_orphans(
    nodes: list[NumaNode], orphans: list[int], cpu_node: dict[int, int], cpu_dir: Path
) -> list[NumaNode]:
    # An online CPU missing from every cpulist: trust its cpuN/nodeM link,
    # else put it in the lowest node, so every CPU has exactly one node.
    by_id = {n.id: n for n in nodes}
    extra: dict[int, set[int]] = {}
    for cpu in orphans:
        linked = [
            int(m.group(1))
            for name in _list_names(cpu_dir / f"cpu{cpu}")
            if (m := _NODE_DIR_RE.fullmatch(name)) and int(m.group(1)) in by_id
        ]
        nid = min(linked) if linked else min(by_id)
        cpu_node[cpu] = nid
        extra.setdefault(nid, set()).add(cpu)
    return [
        NumaNode(n.id, n.cpus | CPUSet(extra[n.id]), n.memory_kb, n.distances) if n.id in extra else n
        for n in nodes
    ]


def _read_distances(path: Path, nid: int, node_ids: list[int]) -> dict[int, int]:
    text = _read_text(path, default=None)
    if text is None:
        return {
            other: DEFAULT_LOCAL_DISTANCE if other == nid else DEFAULT_REMOTE_DISTANCE
            for other in node_ids
        }
    fields = text.split()
    # The kernel writes one column per *possible-and-online* node, in id order.
    if len(fields) != len(node_ids):
        raise TopologyError(
            f"{str(path)!r}: {len(fields)} distances for {len(node_ids)} nodes: {text.strip()!r}"
        )
    try:
        return {other: int(value) for other, value in zip(node_ids, fields, strict=False)}
    except ValueError:
        raise TopologyError(f"{str(path)!r}: bad distance list {text.strip()!r}") from None


def _read_memtotal(path: Path) -> int:
    text = _read_text(path, default="")
    match = _MEMTOTAL_RE.search(text)
    return int(match.group(1)) if match else 0


def _read_cpulist(path: Path, default: D) -> CPUSet | D:
    text = _read_text(path, default=None)
    if text is None:
        return default
    try:
        return CPUSet.parse(text)
    except ValueError as err:
        raise TopologyError(f"{str(path)!r}: {err}") from None


def _read_int(path: Path, default: int) -> int:
    text = _read_text(path, default=None)
    if text is None:
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise TopologyError(f"{str(path)!r}: expected an integer, got {text.strip()!r}") from None


def _read_text(path: Path, default: D) -> str | D:
    try:
        return path.read_text()
    except FileNotFoundError:
        return default
    except OSError as err:
        raise TopologyError(f"cannot read {str(path)!r}: {err}") from err


def _list_names(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
