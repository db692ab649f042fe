"""The balloons policy: named CPU pools ("balloon types") that inflate and deflate with
the CPU requests of their containers. types.py (configuration), assign.py (which type,
which balloon), sizing.py (inflate near, deflate compact), idle.py (ShareIdleCPUsInSame),
book.py (balloons and free CPUs), isolation.py (dedicated balloons), restore.py,
resize.py (in-place resize), policy.py (the decisions)."""

from __future__ import annotations

from cri_resmgr.policy.api import PolicyContext
from cri_resmgr.policy.balloons.policy import DESCRIPTION, NAME, BalloonsPolicy

__all__ = ["NAME", "DESCRIPTION", "BalloonsPolicy", "factory"]


def factory(context: PolicyContext) -> BalloonsPolicy:
    return BalloonsPolicy(context)
