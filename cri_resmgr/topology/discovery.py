"""Build a Topology from a sysfs tree under a host root.

Only `<host_root>/sys/devices/...` is read. The cpu directory is required;
everything else degrades, with a warning naming the path when a file is odd
(Topology.warnings): a detail the kernel does not give is absent from the
model, never guessed. Threads belong to a core by `thread_siblings_list`
(as hwloc does): core ids repeat across dies on old kernels.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cri_resmgr.topology.cpuset import CPUSet

from .cpuextras import read_caches, read_clusters, read_frequencies, read_kinds
from .model import UNKNOWN, CPUInfo, Topology, TopologyError
from .nodes import read_nodes
from .sysfsread import Reader

__all__ = ["discover", "SYSFS_CPU_DIR", "SYSFS_NODE_DIR"]

SYSFS_CPU_DIR = "sys/devices/system/cpu"
SYSFS_NODE_DIR = "sys/devices/system/node"

_CPU_DIR_RE = re.compile(r"cpu(\d+)")

# (package, die, core_id, thread_siblings_list) as read, None where absent.
_Raw = tuple[int, int, int, CPUSet | None]


def discover(host_root: str | os.PathLike[str] = "/") -> Topology:
    """Read the CPU and NUMA topology of the machine whose root is `host_root`.

    Raises TopologyError naming the path only when the host root or its cpu
    directory is missing or unreadable; odd files become warnings.
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
        entries = _numbered_dirs(str(cpu_dir), _CPU_DIR_RE)
    except OSError as err:
        raise TopologyError(f"cannot list {str(cpu_dir)!r}: {err}") from err

    rd = Reader()
    cdir = str(cpu_dir)
    online = _online_cpus(rd, cdir, entries)
    present = CPUSet(entries) | online
    offline = rd.cpulist(f"{cdir}/offline")
    if offline is None:
        # No cpu/offline: the CPUs that have a directory but are not online.
        offline = present - online
    offline -= online
    isolated = (rd.cpulist(f"{cdir}/isolated") or CPUSet()) & online
    nohz_full = (rd.cpulist(f"{cdir}/nohz_full") or CPUSet()) & online

    raw = _read_topologies(rd, cdir, online)
    siblings = _cores(rd, cdir, raw, online)
    nodes, cpu_node = read_nodes(rd, str(root / SYSFS_NODE_DIR), cdir, online)
    l2, l3, caches = read_caches(rd, cdir, online)
    clusters = read_clusters(rd, cdir, online)
    kinds, capacity = read_kinds(rd, str(root), cdir, online)
    base, top = read_frequencies(rd, cdir, online)

    cpus = []
    for cpu in raw:
        first = raw[siblings[cpu].min()]  # one core, one place: its lowest thread's
        cpus.append(CPUInfo(
            id=cpu, package=first[0], die=first[1], core=first[2], node=cpu_node[cpu],
            siblings=siblings[cpu], cluster=clusters.get(cpu), l2=l2.get(cpu), l3=l3.get(cpu),
            kind=kinds.get(cpu), capacity=capacity.get(cpu), base_khz=base.get(cpu), max_khz=top.get(cpu),
        ))
    return Topology(
        cpus, nodes, offline=offline, isolated=isolated, present=present, nohz_full=nohz_full,
        caches=caches, warnings=rd.warnings,
    )


def _numbered_dirs(parent: str, pattern: re.Pattern[str]) -> dict[int, str]:
    found = {}
    with os.scandir(parent) as it:
        for entry in it:
            match = pattern.fullmatch(entry.name)
            if match and entry.is_dir():
                found[int(match.group(1))] = entry.path
    return dict(sorted(found.items()))


def _online_cpus(rd: Reader, cdir: str, entries: dict[int, str]) -> CPUSet:
    listed = rd.cpulist(f"{cdir}/online")
    if listed:
        return listed
    # No (usable) cpu/online: trust per-CPU online flags; cpu0 usually has none
    # because it cannot be hot-unplugged.
    online = [cpu for cpu, path in entries.items() if rd.text(f"{path}/online") != "0"]
    if not online:
        raise TopologyError(f"no online CPUs found under {cdir!r}")
    return CPUSet(online)


def _read_topologies(rd: Reader, cdir: str, online: CPUSet) -> dict[int, _Raw]:
    # A thread listed by an earlier thread's sibling list takes that reading:
    # a core is placed by its lowest thread anyway, and this halves the reads
    # on SMT machines (thousands of files on big ones).
    raw: dict[int, _Raw] = {}
    for cpu in online:
        if cpu not in raw:
            raw[cpu] = found = _read_cpu_topology(rd, f"{cdir}/cpu{cpu}", cpu)
            if found[3] is not None and cpu in found[3]:
                for sibling in found[3]:
                    if sibling > cpu and sibling in online:
                        raw[sibling] = found
    return dict(sorted(raw.items()))


def _read_cpu_topology(rd: Reader, path: str, cpu: int) -> _Raw:
    topo = f"{path}/topology"
    siblings = rd.cpulist(f"{topo}/thread_siblings_list")
    package = rd.integer(f"{topo}/physical_package_id")
    if package is None and siblings is None and not os.path.isdir(topo):
        # Some virtual machines expose no topology: a single-thread core per CPU.
        return (UNKNOWN, UNKNOWN, cpu, CPUSet([cpu]))
    die = rd.integer(f"{topo}/die_id")
    core = rd.integer(f"{topo}/core_id")
    # -1 is the kernel's own "unknown"; anything negative is no better.
    return (
        UNKNOWN if package is None or package < 0 else package,
        UNKNOWN if die is None or die < 0 else die,
        UNKNOWN if core is None or core < 0 else core,
        siblings,
    )


def _cores(rd: Reader, cdir: str, raw: dict[int, _Raw], online: CPUSet) -> dict[int, CPUSet]:
    """Each online CPU's core: the connected sibling lists (union-find), so
    that an asymmetric or partial list cannot split or double a core."""
    parent = {cpu: cpu for cpu in online}

    def find(cpu: int) -> int:
        while parent[cpu] != cpu:
            parent[cpu] = parent[parent[cpu]]
            cpu = parent[cpu]
        return cpu

    no_list: dict[tuple[int, int, int], list[int]] = {}
    for cpu, (pkg, die, core, listed) in raw.items():
        if listed is None:
            # Without thread_siblings_list, CPUs sharing (package, die, core_id) are one core.
            if core != UNKNOWN:
                no_list.setdefault((pkg, die, core), []).append(cpu)
            continue
        if cpu not in listed:
            rd.warn(f"{cdir}/cpu{cpu}/topology/thread_siblings_list", f"does not list CPU {cpu} itself")
        for other in listed & online:
            a, b = find(cpu), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    for group in no_list.values():
        for other in group[1:]:
            a, b = find(group[0]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[int, list[int]] = {}
    for cpu in online:
        members.setdefault(find(cpu), []).append(cpu)
    sets = {first: CPUSet(cpus) for first, cpus in members.items()}
    result = {cpu: sets[find(cpu)] for cpu in online}
    for cpu, (_, _, _, listed) in raw.items():
        if listed is not None and listed & online != result[cpu]:
            rd.warn(f"{cdir}/cpu{cpu}/topology/thread_siblings_list",
                    f"lists {listed & online}, but the sibling lists join {result[cpu]} into one core")
    return result
