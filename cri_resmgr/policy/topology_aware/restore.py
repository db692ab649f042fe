"""Restart and reconfiguration: rebuild the book from saved assignments.

A saved assignment is kept when it still holds under the configuration in force: its
pool exists, the container's class and exclusive CPU count are what they were, its
exclusive CPUs are still the pool's to give (not reserved, not taken twice) and taking
them leaves the pool's shared containers enough; a shared container's pool still has
room for it (one placed overcommitted stays so while its pool has a shared CPU).
Exclusive holders are kept first, then shared ones, then overcommitted ones. The rest is
placed anew, the biggest exclusive requests first.

Refused (PolicyError, the policy's state untouched) only when the running containers do
not fit: one that held all the exclusive CPUs it asks for cannot get them again, or one
that had its CPU request would now run overcommitted. Anything else that cannot be
honoured is placed best-effort with a warning, as on a create. The decision's `others`
holds every restored container's resources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cri_resmgr.policy.api import Assignment, Decision, PolicyError, Resources, Workload
from cri_resmgr.policy.pools import POOL_RESERVED, duplicate_keys
from cri_resmgr.policy.topology_aware.book import Member
from cri_resmgr.policy.topology_aware.classes import CPUClass, Request
from cri_resmgr.policy.topology_aware.pooltree import KINDS

if TYPE_CHECKING:
    from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy

__all__ = ["restore", "revive"]

NAME = "topology-aware"


def restore(policy: TopologyAwarePolicy, items: list[tuple[Workload, Assignment | None]],
            live: bool = False) -> Decision:
    dups = duplicate_keys(w.key for w, _ in items)
    if dups:
        raise PolicyError(f"{NAME}: restore lists containers more than once: {', '.join(dups)}")
    parsed = [(w, a, policy.request(w)) for w, a in items]
    kept: set[str] = set()
    for phase in range(3):
        for w, a, req in parsed:
            if a is None or _phase(a) != phase:
                continue
            member = revive(policy, w, req, a)
            if member is not None:
                policy.keep(member)
                kept.add(w.key)
    pending = sorted((item for item in parsed if item[0].key not in kept), key=lambda item: -item[2].exclusive)
    warnings: list[str] = []
    refused: list[str] = []
    for w, a, req in pending:
        decision = policy.allocate(w)
        if decision.warning:
            warnings.append(decision.warning)
        member = policy.book.members[w.key]
        if a is None or not a.details:
            continue  # new to the policy (or another policy's): best effort
        if req.exclusive and len(a.exclusive) == req.exclusive and len(member.exclusive) < req.exclusive:
            refused.append(f"{w} ({w.key}) holds {req.exclusive} exclusive CPUs and could not get them again")
        elif member.overcommitted and not a.details.get("overcommitted"):
            refused.append(f"{w} ({w.key}) would run overcommitted: no pool has its CPU request free")
    if refused and live:
        raise PolicyError(f"{NAME}: the running containers do not fit: {'; '.join(refused)}")
    warnings.extend(refused)  # at start-up: placed best-effort, and said
    others: dict[str, Resources] = {}
    for w, _ in items:
        res = policy.resources(w.key)
        if res is not None:
            others[w.key] = res
    return Decision(others=others, warning="; ".join(warnings) or None)


def _phase(a: Assignment) -> int:
    if a.exclusive:
        return 0
    return 2 if a.details.get("overcommitted") else 1


def revive(policy: TopologyAwarePolicy, w: Workload, req: Request, a: Assignment) -> Member | None:
    """The member a saved assignment describes, if it still holds; None: place anew."""
    details = a.details
    if not details or details.get("class") != req.cls.value or len(a.exclusive) != req.exclusive:
        return None
    tree, book = policy.tree, policy.book
    if req.cls is CPUClass.RESERVED:
        if a.pool != POOL_RESERVED:
            return None
        pool = None
    else:
        pool = tree.get(a.pool)
        if pool is None or not pool.allows(req.level):
            return None
    isolated = bool(details.get("isolated"))
    if pool is not None and a.exclusive:
        if isolated:
            if not (req.prefer_isolated and a.exclusive.issubset(pool.isolated)
                    and a.exclusive.isdisjoint(book.used_isolated)):
                return None
        elif not (a.exclusive.issubset(book.shared[pool] - pool.reserved)
                  and book.can_take(pool, a.exclusive, req.shared_milli)):
            return None
    elif pool is not None:
        overcommitted = bool(details.get("overcommitted"))
        if not (book.shared[pool] if overcommitted else book.fits_shared(pool, req.shared_milli)):
            return None
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
