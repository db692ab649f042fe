"""The allocator's fixed view of a Topology: cores and the groups they sit in.

Built once per Topology so that an allocation works on small integer indices
(core numbers, group numbers) instead of CPU sets. The groups come from
`Topology.groups(level)` and are not a tree: a NUMA node may span packages and
a package may hold several nodes, so every core simply carries its group
number at every level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cri_resmgr.topology.model import Level, Topology

if TYPE_CHECKING:
    from cri_resmgr.topology.cpusymmetry import Twin

__all__ = ["Shape", "CONTAINMENT", "SOFT_LEVELS", "SPAN_LEVELS"]

# The order in which a request is kept inside one group: a request that fits
# in one NUMA node stays in one, then one die, one L3 group, one package; then
# the small groups inside (clusters, L2) where the kernel exposes them.
CONTAINMENT: tuple[Level, ...] = ("node", "die", "l3", "package", "cluster", "l2")
# Levels where staying in one group is only a preference that the criteria
# weigh against the cores used (cpucriteria.CRITERIA), not a rule.
SOFT_LEVELS: frozenset[Level] = frozenset({"cluster", "l2"})
# Every level whose groups the criteria count, core excluded (cores have their own).
SPAN_LEVELS: tuple[Level, ...] = CONTAINMENT


class Shape:
    """Cores (as sorted CPU id tuples) and, per level, each core's group number."""

    __slots__ = ("topology", "cores", "size", "group_of", "group_size",
                 "group_packages", "members", "core_mask", "group_mask", "group_order", "levels", "threads",
                 "_twins", "_splitting")

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.cores: tuple[tuple[int, ...], ...] = tuple(c.sorted() for c in topology.cores())
        self.size: tuple[int, ...] = tuple(len(c) for c in self.cores)
        self.threads = max(self.size)
        self.group_of: dict[Level, tuple[int, ...]] = {}
        self.group_size: dict[Level, tuple[int, ...]] = {}
        for level in SPAN_LEVELS:
            groups = topology.groups(level)
            if not groups:
                continue  # the kernel does not say: nothing to keep together
            of_cpu = {cpu: g for g, cpus in enumerate(groups) for cpu in cpus}
            # A core's threads share every group above the core; its lowest thread decides.
            self.group_of[level] = tuple(of_cpu[core[0]] for core in self.cores)
            self.group_size[level] = tuple(len(g) for g in groups)
        # An unknown package (id -1 on POWER) splits nothing: the machine is one package.
        packages = self.group_of.get("package", (0,) * len(self.cores))
        # Which packages a group touches: multi-group requests prefer to stay in few packages.
        self.group_packages: dict[Level, tuple[frozenset[int], ...]] = {}
        for level, of_core in self.group_of.items():
            touched: list[set[int]] = [set() for _ in self.group_size[level]]
            for core, g in enumerate(of_core):
                touched[g].add(packages[core])
            self.group_packages[level] = tuple(frozenset(t) for t in touched)
        # Each group's cores, ascending: a group's free threads are a sum over these.
        self.members: dict[Level, tuple[tuple[int, ...], ...]] = {}
        for level, of_core in self.group_of.items():
            cores: list[list[int]] = [[] for _ in self.group_size[level]]
            for core, g in enumerate(of_core):
                cores[g].append(core)
            self.members[level] = tuple(tuple(c) for c in cores)
        # The same as bitmasks of CPU ids (CPUSet.as_mask): a free count is a popcount.
        self.core_mask: tuple[int, ...] = tuple(sum(1 << cpu for cpu in core) for core in self.cores)
        self.group_mask: dict[Level, tuple[int, ...]] = {
            level: tuple(g.as_mask() for g in topology.groups(level)) for level in self.group_of}
        # Groups in the order of their first core (a walk over the cores meets them so).
        self.group_order: dict[Level, tuple[int, ...]] = {
            level: tuple(sorted(range(len(m)), key=lambda g, m=m: m[g][0] if m[g] else len(self.cores)))  # type: ignore[misc]
            for level, m in self.members.items()}
        self.levels = self._narrowing_levels()
        self._twins: dict[Level, tuple[Twin, ...]] = {}
        self._splitting: dict[tuple[Level, int, tuple[Level, ...]], tuple[Level, ...]] = {}

    def splitting(self, level: Level, group: int, levels: tuple[Level, ...]) -> tuple[Level, ...]:
        """Those of `levels` that split the cores of `group` (of `level`): a walk inside the
        group skips the others, which would only hand it on whole (machine data, kept)."""
        key = (level, group, levels)
        found = self._splitting.get(key)
        if found is None:
            members = self.members[level][group]
            found = self._splitting[key] = tuple(
                lvl for lvl in levels if len({self.group_of[lvl][c] for c in members}) > 1)
        return found

    def twins(self, level: Level) -> tuple[Twin, ...]:
        """Per group of `level`: which groups it is interchangeable with while idle
        (cpusymmetry.py), worked out on first use."""
        found = self._twins.get(level)
        if found is None:
            found = self._twins[level] = idle_twins(self, level)
        return found

    def _narrowing_levels(self) -> tuple[Level, ...]:
        """The containment levels that actually split something, in CONTAINMENT order.

        A level with one group, with the same split as an earlier level, or
        with one core per group (Intel's per-core L2) adds no choice, only cost.
        """
        seen: set[tuple[int, ...]] = set()
        out: list[Level] = []
        ncores = len(self.cores)
        for level in CONTAINMENT:
            of_core = self.group_of.get(level)
            if of_core is None:
                continue
            ngroups = len(self.group_size[level])
            if ngroups <= 1 or ngroups >= ncores:
                continue
            key = _canonical(of_core)
            if key in seen:
                continue
            seen.add(key)
            out.append(level)
        return tuple(out)


def idle_twins(shape: Shape, level: Level) -> tuple[Twin, ...]:
    from cri_resmgr.topology.cpusymmetry import idle_twins as find  # it builds on Shape

    return find(shape, level)


def _canonical(of_core: tuple[int, ...]) -> tuple[int, ...]:
    """The partition's shape with group numbers renamed by first appearance."""
    rename: dict[int, int] = {}
    return tuple(rename.setdefault(g, len(rename)) for g in of_core)
