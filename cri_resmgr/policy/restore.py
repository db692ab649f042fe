"""One restore procedure for every policy (api.Policy.restore): after a restart, or when a
reconfiguration replaces a running policy, the book is rebuilt from the containers that
run and the assignments saved for them.

The steps are the same for each policy; what differs is in its `Rules`:

1. A container listed twice is refused (PolicyError), before anything changes.
2. The book is emptied (`reset`); what was in force comes back if the restore fails or
   is refused.
3. Each saved assignment, in the policy's keep order (`keep_rank`), is kept (`keep`) when it
   still holds on this topology and configuration, given what was kept before it; else
   (`validate` says why) the container is pending. Containers without one are pending.
4. The policy settles what it kept (`settle`: the shared pool, balloon sizes), with warnings.
5. The pending containers are placed as new (the policy's `allocate`), in the policy's
   order (`place_rank`), their warnings collected.
6. What a container had under its saved assignment and lacks now (`lost`; `unmet` for what
   no one container lacks, such as MinBalloons): a live restore (`live`: a reconfiguration
   replacing a running policy) refuses it, naming every one, and puts back what was in
   force, so the running containers keep what they have; at start-up the relay must serve,
   so the same is said in the warning and the containers run best-effort.
7. The decision's `others` holds every restored container's resources.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable

from cri_resmgr.policy.api import Assignment, Decision, Policy, PolicyError, Resources, Workload

__all__ = ["Rules", "restore", "duplicate_keys", "lost_exclusive"]

Items = list[tuple[Workload, Assignment | None]]


class Rules(abc.ABC):
    """What one policy plugs into `restore`: built for one restore (it may remember what it
    worked out about each container, for the steps after)."""

    name: str  # the policy's, for the messages

    @abc.abstractmethod
    def reset(self) -> Callable[[], None]:
        """Empty the policy's book; returns what puts back the state in force before
        (called when the restore is refused or fails)."""

    def keep_rank(self, workload: Workload, saved: Assignment) -> int:
        """Saved assignments are tried lowest rank first (stable: then in the given order)."""
        return 0

    @abc.abstractmethod
    def validate(self, workload: Workload, saved: Assignment | None) -> str | None:
        """Why `saved` cannot be kept now, given what was kept so far; None: keep it.
        Also asked without an assignment (None): a policy may place some containers
        where they must be without a decision (balloons' reserved ones)."""

    @abc.abstractmethod
    def keep(self, workload: Workload, saved: Assignment | None) -> None:
        """Record the container as `saved` says (validated just before)."""

    def settle(self) -> list[str]:
        """After the keeping, before the placing: the policy makes what it kept whole; the
        warnings of what it could not do."""
        return []

    def place_rank(self, workload: Workload) -> int:
        """Pending containers are placed lowest rank first (stable: then in the given order)."""
        return 0

    def lost(self, workload: Workload, saved: Assignment) -> str | None:
        """Once all are placed: what the container had under `saved` (its own, or that of
        the policy this one replaces) and does not have now, naming it; None: nothing."""
        return None

    def unmet(self) -> list[str]:
        """Once all are placed: what the configuration promises and no longer holds."""
        return []


def restore(policy: Policy, rules: Rules, items: Items, live: bool = False) -> Decision:
    """api.Policy.restore, for `policy` by its `rules` (see the module's docstring)."""
    dups = duplicate_keys(w.key for w, _ in items)
    if dups:
        raise PolicyError(f"{rules.name}: restore lists containers more than once: {', '.join(dups)}")
    undo = rules.reset()
    try:
        return _rebuild(policy, rules, items, live)
    except BaseException:
        undo()  # refused (or a bug): what was in force stays, untouched
        raise


def _rebuild(policy: Policy, rules: Rules, items: Items, live: bool) -> Decision:
    kept: set[str] = set()
    not_kept: dict[str, str] = {}  # key -> why its saved assignment was not kept
    order = sorted(items, key=lambda item: 0 if item[1] is None else rules.keep_rank(item[0], item[1]))
    for w, a in order:
        reason = rules.validate(w, a)
        if reason is None:
            rules.keep(w, a)
            kept.add(w.key)
        elif a is not None:
            not_kept[w.key] = reason
    warnings = rules.settle()
    pending = sorted((w for w, _ in items if w.key not in kept), key=rules.place_rank)
    for w in pending:
        decision = policy.allocate(w)
        if decision.warning:
            warnings.append(decision.warning)
    problems = []
    for w, a in items:
        if a is not None:
            problem = rules.lost(w, a)
            if problem is not None:
                why = not_kept.get(w.key)
                problems.append(f"{problem} (its saved placement: {why})" if why else problem)
    problems.extend(rules.unmet())
    if problems and live:
        raise PolicyError(f"{rules.name}: refused, the running containers do not fit: {'; '.join(problems)}")
    warnings.extend(problems)  # at start-up: placed best-effort, and said
    others: dict[str, Resources] = {}
    for w, _ in items:
        res = policy.resources(w.key)
        if res is not None:
            others[w.key] = res
    return Decision(others=others, warning="; ".join(warnings) or None)


def duplicate_keys(keys: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    dups: list[str] = []
    for key in keys:
        if key in seen:
            dups.append(key)
        seen.add(key)
    return dups


def lost_exclusive(workload: Workload, wanted: int, saved: Assignment, now: int) -> str | None:
    """The `lost` of a container that held all the exclusive CPUs it asks for and now has fewer."""
    if wanted and len(saved.exclusive) == wanted and now < wanted:
        return f"{workload} ({workload.short_key}) holds {wanted} exclusive CPUs and could not get them again"
    return None
