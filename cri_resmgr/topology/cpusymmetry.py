"""Groups an allocation need not try one by one: idle twins.

On a big machine a small request fits in every NUMA node, and `cpuplacer.place`
would work out the best pick inside each of them (16 nodes, 128 cores each, for
a 2-CPU container on a 4096-CPU machine) only to keep one. Two groups of a level
are *twins* when they are built alike, core for core: the same core sizes, the
same split into the groups of every other level, those groups the same size and
touching packages alike. While both are idle (every thread free) and the groups
they share with the rest of the machine (their package, a die or L3 that reaches
beyond them) are equally free, every criterion (cpucriteria.CRITERIA) scores the
best pick inside one as it scores the matching pick inside the other, except the
last word, `lowest_ids`; so only the first of them in core order, which wins that,
needs to be tried. That holds when the first's cores are, position by position,
lower than the other's; a class where this fails (odd core numbering) keeps
every group to itself, and is tried group by group as before.

Idle twins whose outer groups are not equally free (a node in a busy package, its
twin in an idle one) score differently, so each is a candidate; but when a twin lies
inside one group of every other level (its package, say), every pick inside it
touches the same outer groups, which add the same to every such pick's score: the
best pick inside it is the first twin's, moved core for core (`mapped`), not worked
out again.

The classes depend on the machine only: `Shape.twins(level)` works them out once.
Which idle groups count as twins at a call depends on what is free (`untwinned`).
Only the built-in criteria are known to score twins alike: `cpuplacer.place` prunes
and maps for them alone.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cri_resmgr.topology.cpucriteria import FreeState
    from cri_resmgr.topology.cpushape import Shape
    from cri_resmgr.topology.model import Level

__all__ = ["Twin", "idle_twins", "untwinned", "mapped"]


class Twin(NamedTuple):
    cls: int  # groups with the same class are built alike (and ordered: the first wins ties)
    outer: tuple[tuple[Level, int], ...]  # the groups of other levels it shares with the rest
    # Inside one group of every level it is not made of (its package, say): every pick
    # inside it touches the same outer groups, so how free they are cannot change which
    # pick inside it wins, and a twin's best pick is this one's, core for core (`mapped`).
    within: bool = False


def idle_twins(shape: Shape, level: Level) -> tuple[Twin, ...]:
    members = shape.members[level]
    packages = shape.group_of.get("package")
    classes: dict[tuple[object, ...], int] = {}
    found: list[tuple[tuple[object, ...] | None, tuple[tuple[Level, int], ...], bool]] = []
    for cores in members:
        mine = set(cores)
        own_packages = {packages[c] for c in cores} if packages is not None else set()
        outer: list[tuple[Level, int]] = []
        built: list[object] = [tuple(shape.size[c] for c in cores)]
        alone = False  # a group of another level reaches into a package it does not touch
        within = True
        for other, of_core in shape.group_of.items():
            if other == level:
                continue
            rename: dict[int, int] = {}
            crossing = 0
            for c in cores:
                h = of_core[c]
                if h not in rename:
                    rename[h] = len(rename)
                    if not mine.issuperset(shape.members[other][h]):
                        crossing += 1
                        if not any(shape.members[o][k] == shape.members[other][h] for o, k in outer):
                            outer.append((other, h))  # (the same CPUs at two levels: counted once)
                    if not shape.group_packages[other][h] <= own_packages and packages is not None:
                        alone = True
            within = within and crossing <= 1
            groups = sorted(rename, key=rename.__getitem__)
            built.append((other, tuple(rename[of_core[c]] for c in cores),
                          tuple(mine.issuperset(shape.members[other][h]) for h in groups),
                          tuple(shape.group_size[other][h] for h in groups)))
        if packages is not None:  # the packages its cores are in, renamed alike
            rename = {}
            built.append(tuple(rename.setdefault(packages[c], len(rename)) for c in cores))
        found.append((None if alone else tuple(built), tuple(outer), within))
    for signature, _, _ in found:
        if signature is not None:
            classes.setdefault(signature, len(classes))
    unique = iter(range(len(classes), len(classes) + len(found)))
    cls = [classes[b] if b is not None else next(unique) for b, _, _ in found]
    # The first idle one of a class at a call must win `lowest_ids` against every later
    # one: each group's cores lower, position by position, than the next one's. A class
    # where that fails is split up (no pruning there).
    last: dict[int, int] = {}
    broken: set[int] = set()
    for g, c in enumerate(cls):
        if c in last and not _below(members[last[c]], members[g]):
            broken.add(c)
        last[c] = g
    return tuple(Twin(next(unique) if c in broken else c, outer, within)
                 for c, (_, outer, within) in zip(cls, found, strict=True))


def _below(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x < y for x, y in zip(a, b, strict=True))


def untwinned(state: FreeState, level: Level, fitting: list[int], part_free: dict[int, int]) -> list[int]:
    """`fitting` without the idle groups whose twin, earlier in the list, is tried anyway."""
    shape = state.shape
    sizes, twins = shape.group_size[level], shape.twins(level)
    seen: set[tuple[object, ...]] = set()
    kept = []
    for g in fitting:
        if part_free[g] == sizes[g]:
            t = twins[g]
            key = (t.cls, tuple(state.group_free(lvl)[h] for lvl, h in t.outer))
            if key in seen:
                continue
            seen.add(key)
        kept.append(g)
    return kept


def mapped(shape: Shape, level: Level, source: int, target: int, pick: dict[int, int]) -> dict[int, int]:
    """`pick`, made inside group `source`, moved to the cores in the same places of its
    idle twin `target` (both of one class, `within`): what trying the target would give."""
    mine, theirs = shape.members[level][source], shape.members[level][target]
    return {theirs[bisect_left(mine, core)]: k for core, k in pick.items()}
