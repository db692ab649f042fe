"""Restart and reconfiguration: topology-aware's rules for policy/restore.py.

A saved assignment is kept when it still holds under the configuration in force: its
pool exists, the container's class and exclusive CPU count are what they were, its
exclusive CPUs are still the pool's to give (not reserved, not taken twice) and taking
them leaves the pool's shared containers enough; a shared container's pool still has
room for it (one placed overcommitted stays so while its pool has a shared CPU).
Exclusive holders are kept first, then shared ones, then overcommitted ones. The rest is
placed anew, the biggest exclusive requests first.

What a live restore refuses (lost): a container that held all the exclusive CPUs it asks
for cannot get them again, or one that had its CPU request would now run overcommitted.
Assignments without details (another policy's) promise nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cri_resmgr.bounded import short
from cri_resmgr.policy.api import Assignment, Workload
from cri_resmgr.policy.pools import POOL_RESERVED
from cri_resmgr.policy.restore import Rules, lost_exclusive
from cri_resmgr.policy.topology_aware.book import Member
from cri_resmgr.policy.topology_aware.classes import CPUClass, Request
from cri_resmgr.policy.topology_aware.pooltree import KINDS

if TYPE_CHECKING:
    from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy

__all__ = ["TopologyAwareRules", "revive"]


class TopologyAwareRules(Rules):
    def __init__(self, policy: TopologyAwarePolicy) -> None:
        self.name = policy.name
        self._policy = policy
        self._requests: dict[str, Request] = {}  # each container's, worked out once

    def request(self, w: Workload) -> Request:
        req = self._requests.get(w.key)
        if req is None:
            req = self._requests[w.key] = self._policy.request(w)
        return req

    def reset(self) -> Callable[[], None]:
        return self._policy.start_afresh()

    def keep_rank(self, workload: Workload, saved: Assignment) -> int:
        if saved.exclusive:
            return 0
        return 2 if saved.details.get("overcommitted") else 1

    def validate(self, workload: Workload, saved: Assignment | None) -> str | None:
        if saved is None:
            return "nothing saved"
        return unfit(self._policy, self.request(workload), saved)

    def keep(self, workload: Workload, saved: Assignment | None) -> None:
        assert saved is not None  # validate() refuses None
        self._policy.keep(revive(self._policy, workload, self.request(workload), saved))

    def place_rank(self, workload: Workload) -> int:
        return -self.request(workload).exclusive

    def lost(self, workload: Workload, saved: Assignment) -> str | None:
        if not saved.details:
            return None  # another policy's: best effort
        req, member = self.request(workload), self._policy.book.members[workload.key]
        problem = lost_exclusive(workload, req.exclusive, saved, len(member.exclusive))
        if problem is None and member.overcommitted and not saved.details.get("overcommitted"):
            problem = f"{workload} ({workload.short_key}) would run overcommitted: no pool has its CPU request free"
        return problem


def unfit(policy: TopologyAwarePolicy, req: Request, a: Assignment) -> str | None:
    """Why a saved assignment does not hold now, given what is kept so far; None: it does."""
    details = a.details
    if not details:
        return "not topology-aware's"
    if details.get("class") != req.cls.value:
        return f"its class is {req.cls.value} now, was {short(details.get('class'), 30)}"
    if len(a.exclusive) != req.exclusive:
        return f"it asks for {req.exclusive} exclusive CPUs, had {len(a.exclusive)}"
    book = policy.book
    if req.cls is CPUClass.RESERVED:
        return None if a.pool == POOL_RESERVED else "it runs on the reserved CPUs now"
    pool = policy.tree.get(a.pool)
    if pool is None:
        return f"pool {short(a.pool, 40)} is gone"
    if not pool.allows(req.level):
        return f"pool {pool.name} is below the {req.level} level it may go to"
    if a.exclusive:
        if details.get("isolated"):
            if not req.prefer_isolated:
                return "its CPUs are isolated and it prefers no isolated CPUs"
            if not a.exclusive.issubset(pool.isolated):
                return f"CPUs {a.exclusive - pool.isolated} are not isolated CPUs of {pool.name}"
            if not a.exclusive.isdisjoint(book.used_isolated):
                return f"CPUs {a.exclusive & book.used_isolated} are taken"
            return None
        if not a.exclusive.issubset(book.shared[pool] - pool.reserved):
            return f"CPUs {a.exclusive - (book.shared[pool] - pool.reserved)} are not {pool.name}'s to give"
        if not book.can_take(pool, a.exclusive, req.shared_milli):
            return f"taking them leaves too little for the shared containers of {pool.name}"
        return None
    if details.get("overcommitted"):
        return None if book.shared[pool] else f"{pool.name} has no shared CPU"
    return None if book.fits_shared(pool, req.shared_milli) else f"{pool.name} has no room for its CPU request"


def revive(policy: TopologyAwarePolicy, w: Workload, req: Request, a: Assignment) -> Member:
    """The member a saved assignment describes (unfit() found nothing wrong with it)."""
    details = a.details
    tree = policy.tree
    pool = None if req.cls is CPUClass.RESERVED else tree.get(a.pool)
    isolated = bool(details.get("isolated"))
    placer = policy.placer
    anchor = placer.anchor(pool, req, a.exclusive)
    mem_pool = tree.get(str(details.get("mem_pool", "")))
    kinds = tuple(k for k in details.get("kinds") or () if k in KINDS)
    cold = details.get("cold_until")
    cold_until = float(cold) if isinstance(cold, int | float) and not isinstance(cold, bool) else None
    if mem_pool is None or mem_pool not in anchor.lineage() or not kinds:
        fresh = placer.member(w, req, pool, a.exclusive, isolated)
        mem_pool, kinds, cold_until = fresh.mem_pool, fresh.kinds, fresh.cold_until
    return Member(key=w.key, workload=w, request=req, pool=pool, exclusive=a.exclusive,
                  from_isolated=isolated and bool(a.exclusive), mem_pool=mem_pool, kinds=kinds, mems=None,
                  cold_until=cold_until, overcommitted=bool(details.get("overcommitted")) and not a.exclusive)
