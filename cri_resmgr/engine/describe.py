"""What a container got, as one phrase for the operator's log lines.

`default/web:nginx: exclusive CPUs 2-3, mems 0` is what a tester reading only the
logs needs: which container, which CPUs, and from which pool.
"""

from __future__ import annotations

from cri_resmgr.policy.api import Assignment, Resources
from cri_resmgr.topology.cpuset import CPUSet


def placement(assignment: Assignment | None, resources: Resources) -> str:
    """`exclusive CPUs 2-3, mems 0`, `shared CPUs 0-1, mems 0`, `exclusive CPUs 2 + shared 0-1, ...`."""
    cpus, mems = resources.cpuset_cpus, resources.cpuset_mems or "-"
    if assignment is None:
        return f"CPUs {cpus}, mems {mems}"
    exclusive = assignment.exclusive
    if not exclusive:
        return f"{assignment.pool} CPUs {cpus}, mems {mems}"
    rest = cpus - exclusive
    if rest:  # a fractional request: its exclusive CPUs plus the shared pool
        return f"exclusive CPUs {exclusive} + {assignment.pool} {rest}, mems {mems}"
    kind = "isolated exclusive" if assignment.pool == "isolated" else "exclusive"
    return f"{kind} CPUs {exclusive}, mems {mems}"


class Placement:
    """`placement()` for a log call's argument: the text is built only when the line is
    written (decisions run under the allocation lock; INFO may be off)."""

    __slots__ = ("assignment", "resources")

    def __init__(self, assignment: Assignment | None, resources: Resources) -> None:
        self.assignment, self.resources = assignment, resources

    def __str__(self) -> str:
        return placement(self.assignment, self.resources)


class UpdateBatch:
    """The updates one decision sends to other containers, as one INFO line (a pool
    change can update a thousand containers: their names go to DEBUG, one each).

    Collecting is cheap and text is built only by `line()` (or `str()`, so the batch
    itself is the log call's argument): only for the cpusets and names it shows."""

    NAMES = 3  # named per cpuset; the rest counted
    GROUPS = 4  # cpusets shown; the rest counted

    def __init__(self, cause: str) -> None:
        self.cause = cause
        self.count = 0
        # By the Resources object: a pool's members share one (policy/pools.py).
        self._groups: dict[int, tuple[Resources, list[object], list[int]]] = {}

    def add(self, name: object, resources: Resources) -> None:
        group = self._groups.get(id(resources))
        if group is None:
            group = self._groups[id(resources)] = (resources, [], [0])
        group[2][0] += 1
        if len(group[1]) < self.NAMES:
            group[1].append(name)
        self.count += 1

    def line(self) -> str:
        """`updating 998 containers after creating default/db:c: cpuset 0-1,3 mems 0 for
        default/web:c, default/a:c, default/b:c and 995 more`."""
        # Equal cpusets from different Resources objects are one group: merged by the
        # sets themselves (hashing a set is cached, formatting one is not free).
        merged: dict[tuple[CPUSet, str], tuple[list[object], int]] = {}
        for r, names, (count,) in self._groups.values():
            key = (r.cpuset_cpus, r.cpuset_mems or "-")
            had, n = merged.get(key, ([], 0))
            merged[key] = ((had + names)[:self.NAMES], n + count)
        parts = []
        for (cpus, mems), (names, count) in list(merged.items())[:self.GROUPS]:
            more = f" and {count - len(names)} more" if count > len(names) else ""
            parts.append(f"cpuset {cpus} mems {mems} for {', '.join(map(str, names))}{more}")
        if len(merged) > self.GROUPS:
            parts.append(f"{len(merged) - self.GROUPS} more cpusets")
        noun = "container" if self.count == 1 else "containers"
        return f"updating {self.count} {noun} after {self.cause}: {'; '.join(parts)}"

    __str__ = line
