"""ShareIdleCPUsInSame: idle CPUs (in no balloon) lent to a balloon's containers.

A balloon of a type with ShareIdleCPUsInSame: LEVEL lets its containers also
run on the idle CPUs of the LEVEL groups (package, die, NUMA node, L3 cache,
core) its own CPUs are in; `system` lends every idle CPU. Lent CPUs stay idle:
no balloon owns them, so the next balloon to inflate may take them, and the
containers they were lent to are updated.
"""

from __future__ import annotations

from cri_resmgr.policy.balloons.assign import Balloon
from cri_resmgr.policy.balloons.sizing import Nearness
from cri_resmgr.policy.balloons.types import SHARE_LEVELS
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["share_region", "lent_cpus"]


def share_region(near: Nearness, b: Balloon, assignable: CPUSet) -> CPUSet:
    """Where the balloon's lent CPUs may come from (empty: it borrows nothing)."""
    share = b.type.share_idle
    if share is None:
        return CPUSet()
    level = SHARE_LEVELS[share]
    if level is None:
        return assignable
    region = near.region(level, b.cpus)
    return CPUSet() if region is None else region & assignable


def lent_cpus(near: Nearness, b: Balloon, idle: CPUSet, assignable: CPUSet) -> CPUSet:
    if b.type.share_idle is None:
        return CPUSet()
    if b.share_region is None:
        b.share_region = share_region(near, b, assignable)
    return idle & b.share_region
