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
