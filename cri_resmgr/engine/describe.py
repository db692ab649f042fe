"""What a container got, as one phrase for the operator's log lines.

`default/web:nginx: exclusive CPUs 2-3, mems 0` is what a tester reading only the
logs needs: which container, which CPUs, and from which pool.
"""

from __future__ import annotations

from cri_resmgr.policy.api import Assignment, Resources


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


class UpdateBatch:
    """The updates one decision sends to other containers, as one INFO line (a pool
    change can update a thousand containers: their names go to DEBUG, one each)."""

    NAMES = 3  # named per cpuset; the rest counted
    GROUPS = 4  # cpusets shown; the rest counted

    def __init__(self, cause: str) -> None:
        self.cause = cause
        self.count = 0
        # By the Resources object: a pool's members share one (policy/pools.py).
        self._groups: dict[int, tuple[Resources, list[str], list[int]]] = {}

    def add(self, name: object, resources: Resources) -> None:
        group = self._groups.get(id(resources))
        if group is None:
            group = self._groups[id(resources)] = (resources, [], [0])
        group[2][0] += 1
        if len(group[1]) < self.NAMES:
            group[1].append(str(name))
        self.count += 1

    def line(self) -> str:
        """`updating 998 containers after creating default/db:c: cpuset 0-1,3 mems 0 for
        default/web:c, default/a:c, default/b:c and 995 more`."""
        merged: dict[tuple[str, str], tuple[list[str], int]] = {}
        for r, names, (count,) in self._groups.values():
            text = (str(r.cpuset_cpus), r.cpuset_mems or "-")
            had, n = merged.get(text, ([], 0))
            merged[text] = ((had + names)[:self.NAMES], n + count)
        parts = []
        for (cpus, mems), (names, count) in list(merged.items())[:self.GROUPS]:
            more = f" and {count - len(names)} more" if count > len(names) else ""
            parts.append(f"cpuset {cpus} mems {mems} for {', '.join(names)}{more}")
        if len(merged) > self.GROUPS:
            parts.append(f"{len(merged) - self.GROUPS} more cpusets")
        noun = "container" if self.count == 1 else "containers"
        return f"updating {self.count} {noun} after {self.cause}: {'; '.join(parts)}"
