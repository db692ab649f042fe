"""Per-CPU details beyond package/die/core: caches, clusters, hybrid kinds, frequencies.

Each reader returns CPU id -> value for the CPUs the kernel described; a CPU
missing from the result has no such detail. Shared lists are read once per
group (the first CPU of a group names it for all), which keeps machines with
thousands of CPUs cheap.
"""

from __future__ import annotations

import os
import re

from cri_resmgr.topology.cpuset import CPUSet

from .model import CacheInfo, CoreKind
from .sysfsread import Reader

__all__ = ["read_caches", "read_clusters", "read_kinds", "read_frequencies"]

_INDEX_RE = re.compile(r"index(\d+)")
_SIZE_RE = re.compile(r"(\d+)\s*([KMG]?)", re.IGNORECASE)


class _Grouping:
    """CPU -> group id (the group's lowest CPU), refusing overlapping groups."""

    def __init__(self, rd: Reader, what: str) -> None:
        self.rd, self.what = rd, what
        self.of: dict[int, int] = {}
        self.groups: dict[int, CPUSet] = {}
        self.broken = False

    def add(self, path: str, cpu: int, shared: CPUSet) -> int | None:
        if cpu not in shared:
            self.rd.warn(path, f"does not list CPU {cpu} itself")
            shared = shared | CPUSet([cpu])
        gid = shared.min()
        for other in shared:
            if self.of.get(other, gid) != gid:
                self.rd.warn(path, f"{self.what} {shared} overlaps {self.groups[self.of[other]]}; "
                                   f"{self.what} groups left out")
                self.broken = True
                return None
        self.groups[gid] = shared
        for other in shared:
            self.of[other] = gid
        return gid

    def result(self) -> dict[int, int]:
        return {} if self.broken else self.of


def read_caches(
    rd: Reader, cdir: str, online: CPUSet
) -> tuple[dict[int, int], dict[int, int], list[CacheInfo]]:
    """L2 and L3 groups from cpuN/cache/index*/{level,type,shared_cpu_list,size}; kernels
    whose cache directories have no shared_cpu_list give the same as shared_cpu_map."""
    levels = {2: _Grouping(rd, "L2 cache"), 3: _Grouping(rd, "L3 cache")}
    sizes: dict[tuple[int, int], int | None] = {}
    hint: dict[int, str] = {}  # level -> index dir that held it last time: usually the same
    for cpu in online:
        wanted = [lv for lv, g in levels.items() if cpu not in g.of and not g.broken]
        if not wanted:
            continue
        base = f"{cdir}/cpu{cpu}/cache"
        for level in wanted:
            index = _find_index(rd, base, level, hint)
            if index is None:
                continue
            source = f"{index}/shared_cpu_list"
            shared = rd.cpulist(source)
            if shared is None:
                source = f"{index}/shared_cpu_map"
                shared = rd.cpumask(source)
            if shared is None:
                continue
            gid = levels[level].add(source, cpu, shared & online)
            if gid is not None and (level, gid) not in sizes:
                sizes[(level, gid)] = _size_kb(rd, f"{index}/size")
    caches = [
        CacheInfo(level, gid, cpus, sizes.get((level, gid)))
        for level, g in levels.items() if not g.broken for gid, cpus in g.groups.items()
    ]
    return levels[2].result(), levels[3].result(), caches


def _find_index(rd: Reader, base: str, level: int, hint: dict[int, str]) -> str | None:
    # Data or unified cache of `level`; instruction caches do not group CPUs for placement.
    guess = hint.get(level)
    if guess is not None:
        index = f"{base}/{guess}"
        # The hint held a data or unified cache of this level for an earlier CPU.
        if rd.integer(f"{index}/level") == level:
            return index
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None
    for name in names:
        if not _INDEX_RE.fullmatch(name) or name == guess:
            continue
        index = f"{base}/{name}"
        if rd.integer(f"{index}/level") == level and rd.text(f"{index}/type") != "Instruction":
            hint[level] = name
            return index
    return None


def _size_kb(rd: Reader, path: str) -> int | None:
    text = rd.text(path)
    if text is None:
        return None
    match = _SIZE_RE.fullmatch(text)
    if not match:
        rd.warn(path, f"not a cache size: {text[:40]!r}; ignored")
        return None
    value, unit = int(match.group(1)), match.group(2).upper()
    return {"": value // 1024, "K": value, "M": value * 1024, "G": value * 1024 * 1024}[unit]


def read_clusters(rd: Reader, cdir: str, online: CPUSet) -> dict[int, int]:
    """Cluster groups from topology/cluster_cpus_list (kernels 5.16 and later)."""
    grouping = _Grouping(rd, "cluster")
    for cpu in online:
        if cpu in grouping.of:
            continue
        path = f"{cdir}/cpu{cpu}/topology/cluster_cpus_list"
        shared = rd.cpulist(path)
        if shared is None:
            if cpu == online.min():
                return {}  # a kernel without clusters: do not try every CPU
            continue
        if grouping.add(path, cpu, shared & online) is None:
            return {}
    return grouping.result()


def read_kinds(
    rd: Reader, root: str, cdir: str, online: CPUSet
) -> tuple[dict[int, CoreKind], dict[int, int]]:
    """Hybrid core kinds: Intel's cpu_core/cpu_atom PMU lists, else ARM's cpu_capacity."""
    kinds: dict[int, CoreKind] = {}
    big = rd.cpulist(f"{root}/sys/devices/cpu_core/cpus")
    small = rd.cpulist(f"{root}/sys/devices/cpu_atom/cpus")
    if big is not None and small is not None:
        kinds.update((cpu, "performance") for cpu in big & online)
        kinds.update((cpu, "efficiency") for cpu in small & online)
    capacity: dict[int, int] = {}
    first = online.min()
    if rd.text(f"{cdir}/cpu{first}/cpu_capacity") is not None:
        for cpu in online:
            value = rd.integer(f"{cdir}/cpu{cpu}/cpu_capacity")
            if value is not None:
                capacity[cpu] = value
    if not kinds and len(set(capacity.values())) > 1 and len(capacity) == len(online):
        top = max(capacity.values())
        kinds = {cpu: "performance" if value == top else "efficiency" for cpu, value in capacity.items()}
    return kinds, capacity


def read_frequencies(rd: Reader, cdir: str, online: CPUSet) -> tuple[dict[int, int], dict[int, int]]:
    """Base and maximum frequency (kHz) per CPU from cpufreq's policies."""
    base: dict[int, int] = {}
    top: dict[int, int] = {}
    try:
        policies = [n for n in os.listdir(f"{cdir}/cpufreq") if n.startswith("policy")]
    except OSError:
        policies = []
    if policies:
        for name in policies:
            pdir = f"{cdir}/cpufreq/{name}"
            cpus = _idlist(rd, f"{pdir}/related_cpus")
            if cpus is not None:
                _put(base, top, rd, pdir, cpus & online)
    elif os.path.isdir(f"{cdir}/cpu{online.min()}/cpufreq"):
        for cpu in online:
            _put(base, top, rd, f"{cdir}/cpu{cpu}/cpufreq", CPUSet([cpu]))
    return base, top


def _idlist(rd: Reader, path: str) -> CPUSet | None:
    # cpufreq writes "0 40", not the "0,40" of cpulist files.
    text = rd.text(path)
    if text is None:
        return None
    try:
        return CPUSet(int(word) for word in text.split())
    except ValueError:
        rd.warn(path, f"not a list of CPU ids: {text[:80]!r}; ignored")
        return None


def _put(base: dict[int, int], top: dict[int, int], rd: Reader, pdir: str, cpus: CPUSet) -> None:
    b = rd.integer(f"{pdir}/base_frequency")
    m = rd.integer(f"{pdir}/cpuinfo_max_freq")
    for cpu in cpus:
        if b is not None:
            base[cpu] = b
        if m is not None:
            top[cpu] = m
