"""Rebuilding the balloons after a restart or a reconfiguration.

Saved assignments name each container's balloon and that balloon's CPUs. A
balloon is rebuilt on its saved CPUs when its type still exists, its members
still belong to that type, and the CPUs are still free for it (balloons
disjoint, within the CPUs balloons are made of, whole cores under
HideHyperthreads, its index within MaxBalloons). Then, in this order so that
CPUs given back are there for those that need them: balloons above their size
shrink, the types' MinBalloons are made up (as they always exist while the
policy runs), balloons below their size grow, and every other container is
placed as new. With the configuration unchanged nothing
moves; with a changed one the balloons re-size and re-place live.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cri_resmgr.policy.api import Assignment, Decision, PolicyError, Resources, Workload
from cri_resmgr.policy.balloons.assign import Balloon, type_for
from cri_resmgr.policy.balloons.types import DEFAULT, RESERVED
from cri_resmgr.policy.pools import duplicate_keys
from cri_resmgr.topology.cpuallocator import AllocationError
from cri_resmgr.topology.cpuset import CPUSet

if TYPE_CHECKING:
    from cri_resmgr.policy.balloons.book import Book
    from cri_resmgr.policy.balloons.policy import BalloonsPolicy


__all__ = ["restore", "saved_balloon"]


def saved_balloon(a: Assignment | None) -> tuple[str, int, CPUSet] | None:
    """(type, index, CPUs) from a saved assignment; None when it is not one of ours."""
    if a is None:
        return None
    d = a.details
    name, type_name, cpus = d.get("balloon"), d.get("type"), d.get("cpus")
    if not (isinstance(name, str) and isinstance(type_name, str) and isinstance(cpus, str)):
        return None
    prefix = f"{type_name}["
    if not (name.startswith(prefix) and name.endswith("]") and name[len(prefix):-1].isdigit()):
        return None
    try:
        return type_name, int(name[len(prefix):-1]), CPUSet.parse(cpus)
    except ValueError:
        return None


def restore(policy: BalloonsPolicy, items: list[tuple[Workload, Assignment | None]],
            live: bool = False) -> Decision:
    """A live change (see Policy.restore) that cannot hold the running containers is
    refused; at start-up the same is placed best-effort, with warnings."""
    dups = duplicate_keys(w.key for w, _ in items)
    if dups:
        raise PolicyError(f"balloons: restore lists containers more than once: {', '.join(dups)}")
    book = policy.book
    config = book.config
    book.clear()
    pending: list[Workload] = []
    rebuilt: dict[str, tuple[Balloon, CPUSet]] = {}  # name -> (balloon, saved CPUs)
    for w, a in items:
        t, _ = type_for(config, w, bool(book.reserved))
        saved = saved_balloon(a)
        if t.name == RESERVED:
            _join(book.by_type[RESERVED][0], w, book)
            continue
        fallback = saved is not None and a is not None and bool(a.details.get("fallback"))
        if fallback and saved is not None and saved[0] == DEFAULT and t.name != DEFAULT:
            t = config.default  # placed there best-effort when its type had no room: it stays
        if saved is None or saved[0] != t.name:
            pending.append(w)
            continue
        _, index, cpus = saved
        name = f"{t.name}[{index}]"
        entry = rebuilt.get(name)
        if entry is None:
            if not _usable(policy, t.name, index, cpus):
                pending.append(w)
                continue
            b = Balloon(t, index, cpus=cpus)
            book.balloons_add(b)
            rebuilt[name] = (b, cpus)
        elif entry[1] != cpus:  # members disagree on their balloon's CPUs: re-place this one
            pending.append(w)
            continue
        _join(rebuilt[name][0], w, book)
        if fallback:
            book.fallback.add(w.key)
    # Shrink first, so that CPUs given back are there for the balloons that must grow.
    warnings: list[str] = []
    for b in list(book.balloons.values()):
        if not book.is_fixed(b) and book.size(b) > book.target(b):
            book.resize(b)
    for t in config.types:
        while t.name != RESERVED and len(book.by_type[t.name]) < t.min_balloons:
            try:
                book.new_balloon(t, t.min_cpus)
            except AllocationError as e:
                warnings.append(f"balloons: MinBalloons of {t.name} not met: {e}")
                break
    for b in list(book.balloons.values()):
        book.resize(b)
        if book.short(b):
            warnings.append(_short(book.size(b), b))
    book.refresh(set(book.balloons.values()), book.free)
    for w in pending:
        d = policy.allocate(w)
        if d.warning:
            warnings.append(d.warning)
    if live:
        problems = _worse(policy, items)
        if problems:
            raise PolicyError("balloons: the new configuration cannot hold the running containers, "
                              f"refused: {'; '.join(problems)}")
    others: dict[str, Resources] = {}
    for w, _ in items:
        r = policy.resources(w.key)
        if r is not None:
            others[w.key] = r
    return Decision(others=others, warning="; ".join(warnings) or None)


def _worse(policy: BalloonsPolicy, items: list[tuple[Workload, Assignment | None]]) -> list[str]:
    """What a live reconfiguration broke: containers placed within their balloon's bounds
    before and not now, and MinBalloons no longer met."""
    book = policy.book
    problems = []
    for w, a in items:
        if a is None or a.details.get("short"):
            continue
        b = book.member.get(w.key)
        t, _ = type_for(book.config, w, bool(book.reserved))
        if b is None:
            continue
        if b.type.name != t.name and a.details.get("type") != DEFAULT:
            # (in default before: it may have been placed there best-effort already)
            problems.append(f"{w} ({w.key}) belongs to {t.name} but no {t.name} balloon can hold it")
        elif book.short(b):
            problems.append(f"{w} ({w.key}) in {b.name}: {book.size(b)} of the {book.needed(b, 0, 0)} "
                            f"{'cores' if t.hide_hyperthreads else 'CPUs'} its containers need")
    for t in book.config.types:
        if t.name != RESERVED and len(book.by_type[t.name]) < t.min_balloons:
            problems.append(f"{t.name}: MinBalloons {t.min_balloons} cannot be met")
    return problems


def _join(b: Balloon, w: Workload, book: Book) -> None:
    b.join(w)
    book.member[w.key] = b


def _usable(policy: BalloonsPolicy, type_name: str, index: int, cpus: CPUSet) -> bool:
    book = policy.book
    t = book.config.type(type_name)
    if t is None or (t.max_balloons is not None and index >= t.max_balloons):
        return False
    if not cpus.issubset(book.free):  # (empty: a balloon that got no CPU, as saved)
        return False
    if t.hide_hyperthreads and book.near.whole_cores(cpus) != cpus:
        return False
    return True  # a balloon above a lowered MaxCPUs is kept and shrunk


def _short(size: int, b: Balloon) -> str:
    keys = ", ".join(f"({k})" for k in b.members)
    return (f"balloons: {b.name} has {size} of the {b.requested}m its containers {keys} request: "
            "not enough free CPUs, or above its MaxCPUs")
